// torch_npu's profiler output memory_record.csv (ASCEND_PROFILER_OUTPUT, beside operator_memory.csv): one row
// per change of an allocator's totals, in MB, with the component whose totals they are (docs/trace-format.md).
// Columns are found by name in the header; the others are ignored. The rows become the real allocator's line
// beside a replay of operator_memory.csv: reserved_after and allocated_after of its trace's events.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "tessera/trace.hpp"
#include "trace/csv_fields.hpp"
#include "trace/gzip_file.hpp"
#include "trace/readers.hpp"
#include "trace/text_lines.hpp"

namespace tessera {

namespace {

enum Column : std::size_t { component, timestamp, allocated_mb, reserved_mb, device_type, column_count };

constexpr std::array<trace_detail::CsvColumn, column_count> columns{{
    {"Component", true},
    {"Timestamp(us)", true},
    {"Total Allocated(MB)", false},
    {"Total Reserved(MB)", true},
    {"Device Type", true},
}};

constexpr double mb = 1024.0 * 1024.0;

Result<std::vector<MemoryRecord>> parse_memory_record_inflated(std::string_view text, std::string_view source) {
  auto fail = [source](std::size_t line, std::string_view what) {
    return make_error(Errc::invalid_argument, fmt::format("{}:{}: {}", source, line, what));
  };
  std::array<std::optional<std::size_t>, column_count> index;
  std::size_t width = 0;
  std::vector<MemoryRecord> records;
  std::vector<std::string> fields;
  trace_detail::LineScanner lines(trace_detail::without_utf8_bom(text));
  std::string_view line;
  bool header = true;
  while (lines.next(line)) {
    const std::size_t number = lines.line_number();
    if (trace_detail::trim(line).empty()) continue;
    if (!trace_detail::split_quoted_csv(line, fields)) return fail(number, "a quoted field has no closing quote");
    if (header) {
      header = false;
      width = fields.size();
      if (const auto missing = trace_detail::locate_columns(fields, columns, index); !missing.empty()) {
        return fail(number, fmt::format("the header has no '{}' column (torch_npu's memory_record.csv has it)", missing));
      }
      continue;
    }
    if (fields.size() != width) return fail(number, fmt::format("{} fields where the header has {}", fields.size(), width));
    const auto cell = [&](Column c) -> std::string_view { return index[c] ? std::string_view(fields[*index[c]]) : ""; };
    // Bytes from MB, or microseconds: finite, not negative, below 2^63.
    const auto number_of = [&](Column c, double scale, double& value) -> std::optional<Error> {
      if (!trace_detail::parse_decimal(cell(c), value)) {
        return fail(number, fmt::format("{} '{}' is not a number", columns[c].header, cell(c)));
      }
      if (value < 0) return fail(number, fmt::format("{} is negative ({})", columns[c].header, cell(c)));
      value = std::round(value * scale);
      if (value >= 0x1p63) return fail(number, fmt::format("{} '{}' is out of range", columns[c].header, cell(c)));
      return {};
    };
    MemoryRecord record;
    record.line = number;
    record.component = std::string(cell(component));
    if (std::any_of(record.component.begin(), record.component.end(),
                    [](unsigned char c) { return c < 0x20 || c == 0x7f; })) {
      return fail(number, "Component holds a control character");
    }
    double value = 0;
    if (auto error = number_of(timestamp, 1.0, value)) return std::move(*error);
    record.time_us = static_cast<std::int64_t>(value);
    if (auto error = number_of(reserved_mb, mb, value)) return std::move(*error);
    record.reserved = static_cast<std::uint64_t>(value);
    if (index[allocated_mb]) {
      if (auto error = number_of(allocated_mb, mb, value)) return std::move(*error);
      record.allocated = static_cast<std::uint64_t>(value);
    }
    if (!trace_detail::device_from_cell(cell(device_type), record.device)) {
      return fail(number, "Device Type holds a control character");
    }
    records.push_back(std::move(record));
  }
  if (header) return fail(1, "the file is empty: no header and no rows");
  return records;
}

}  // namespace

Result<std::vector<MemoryRecord>> parse_memory_record_csv(std::string_view bytes, std::string_view source) {
  return trace_detail::with_inflated(
      bytes, source, [&](std::string_view text, bool) { return parse_memory_record_inflated(text, source); },
      trace_detail::trace_start_check(TraceFormat::operator_memory_csv, source));
}

Result<std::vector<MemoryRecord>> read_memory_record_csv(const std::filesystem::path& path) {
  Result<std::string> bytes = trace_detail::read_file_bytes(
      path, trace_detail::trace_start_check(TraceFormat::operator_memory_csv, path.string()));
  if (!bytes) return std::move(bytes).error();
  return parse_memory_record_csv(*bytes, path.string());
}

std::optional<RecordedTotals> totals_from_memory_record(const Trace& trace, const std::vector<MemoryRecord>& records,
                                                        std::string_view wanted) {
  std::vector<const MemoryRecord*> mine;
  for (const MemoryRecord& record : records) {
    if (record.component == wanted && record.device == trace.device) mine.push_back(&record);
  }
  if (mine.empty() || trace.events.empty()) return std::nullopt;
  if (std::any_of(trace.events.begin(), trace.events.end(), [](const TraceEvent& e) { return e.time_us == no_time; })) {
    return std::nullopt;
  }
  // Rows of one time keep the file's order: the last of them is the state after that time.
  std::stable_sort(mine.begin(), mine.end(),
                   [](const MemoryRecord* a, const MemoryRecord* b) { return a->time_us < b->time_us; });
  const bool has_allocated =
      std::all_of(mine.begin(), mine.end(), [](const MemoryRecord* r) { return r->allocated.has_value(); });
  RecordedTotals totals;
  totals.reserved_after.reserve(trace.events.size());
  std::size_t next = 0;
  const MemoryRecord* last = nullptr;
  auto take = [&](const MemoryRecord& record) {
    totals.peak_reserved = std::max(totals.peak_reserved, record.reserved);
    if (has_allocated) totals.peak_allocated = std::max(totals.peak_allocated, *record.allocated);
    last = &record;
  };
  for (const TraceEvent& event : trace.events) {
    while (next < mine.size() && mine[next]->time_us <= event.time_us) take(*mine[next++]);
    totals.reserved_after.push_back(last == nullptr ? 0 : last->reserved);
    if (has_allocated) totals.allocated_after.push_back(last == nullptr ? 0 : *last->allocated);
  }
  return totals;
}

namespace trace_detail {

Result<void> take_memory_record_beside(const std::filesystem::path& path, ProfileRecording& recording) {
  const std::filesystem::path beside = path.parent_path() / "memory_record.csv";
  // Only an absent file is no line; anything else there (a folder, one that cannot be read) is read and its
  // error names it.
  std::error_code ignored;
  if (std::filesystem::status(beside, ignored).type() == std::filesystem::file_type::not_found) return {};
  Result<std::vector<MemoryRecord>> records = read_memory_record_csv(beside);
  if (!records) return std::move(records).error();
  if (std::optional<RecordedTotals> totals = totals_from_memory_record(recording.trace, *records)) {
    // A version that writes no Total Allocated leaves operator_memory.csv's own.
    if (totals->allocated_after.empty()) {
      totals->allocated_after = std::move(recording.recorded.allocated_after);
      totals->peak_allocated = recording.recorded.peak_allocated;
    }
    recording.recorded = std::move(*totals);
    recording.recorded_from = beside;
  }
  return {};
}

}  // namespace trace_detail

}  // namespace tessera
