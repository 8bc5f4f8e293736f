// Reports of replays (docs/replay.md): the JSON document for programs, one self-contained HTML page with
// inline SVG charts for people, and the comparison table for the terminal. Each takes results in the order
// they should appear — trace by trace, allocators in the order run — and treats "ideal" as the reference
// line: its driver figures are not computed (null in JSON, "-" in tables).
#pragma once

#include <filesystem>
#include <span>
#include <string>
#include <string_view>

#include "tessera/replay.hpp"
#include "tessera/result.hpp"
#include "tessera/types.hpp"

namespace tessera {

// {"results": [{"trace", "allocator", "driver", "capacity", "peak_allocated", ...}]}: one object per
// result, fields in the documented order, sizes in bytes, null where not computed. Pretty-printed.
std::string format_json_report(std::span<const ReplayResult> results);

struct HtmlReportOptions {
  std::string title = "Tessera replay report";
  std::string note;  // plain text under the title: what was run, how to reproduce it
};

// One page, no external resources and no script: the metrics table, a bar chart of overhead per trace and
// allocator (min_capacity / peak_allocated - 1 where min_capacity was computed, else peak_reserved /
// peak_allocated - 1, and the chart says which), and for each trace a chart of allocated and reserved bytes
// over the events, one line per allocator, from ReplayResult::series.
std::string format_html_report(std::span<const ReplayResult> results, const HtmlReportOptions& options = {});

// Fixed-width text: a header, then for each trace its name and one row per allocator.
std::string format_table(std::span<const ReplayResult> results);

// "512 B", "1.50 KiB", "612.00 MiB", "22.55 GiB": the largest binary unit that leaves a number of at least
// one, with two decimals.
std::string format_bytes(Bytes bytes);

// Writes a report; an error names the file.
Result<void> write_report_file(const std::filesystem::path& path, std::string_view content);

}  // namespace tessera
