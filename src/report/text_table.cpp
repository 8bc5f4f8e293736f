// The comparison table for the terminal: one header, then each trace's name and one row per allocator.
#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "report/report_common.hpp"
#include "tessera/report.hpp"

namespace tessera {

namespace {

constexpr std::string_view missing = "-";

std::string percent(std::optional<double> value) {
  return value ? fmt::format("{:.1f}%", *value * 100.0) : std::string(missing);
}

std::string bytes_or_missing(std::optional<Bytes> value) { return value ? format_bytes(*value) : std::string(missing); }

}  // namespace

std::string format_table(std::span<const ReplayResult> results) {
  constexpr std::string_view row = "  {:<12} {:>11} {:>11} {:>11} {:>9} {:>8} {:>11} {:>8} {:>4} {:>8} {:>10} {:>7}\n";
  std::string out = fmt::format(fmt::runtime(row), "allocator", "peak alloc", "rsv@peak", "peak rsv", "frag@peak",
                                "avg frag", "min cap", "overhead", "oom", "calls", "driver ms", "ns/op");
  for (const report::TraceGroup& group : report::group_by_trace(results)) {
    // An allocator that ran out of memory stopped early: the others' count is the trace's.
    std::size_t events = 0;
    for (const ReplayResult* result : group.results) events = std::max(events, result->events);
    out += fmt::format("{}  ({} events)\n", group.trace, events);
    bool recorded = false;
    for (const ReplayResult* result : group.results) {
      if (!result->failure.empty()) {
        out += fmt::format("  {:<12} failed: {}\n", result->allocator, result->failure);
        continue;
      }
      const bool replayed = !report::is_reference(*result);
      recorded = recorded || report::is_recorded(*result);
      out += fmt::format(
          fmt::runtime(row), result->allocator, format_bytes(result->peak_allocated),
          format_bytes(result->reserved_at_peak_allocated), format_bytes(result->peak_reserved),
          percent(result->frag_at_peak), percent(result->avg_frag), bytes_or_missing(result->min_capacity),
          percent(result->overhead), result->oom ? "OOM" : "no",
          replayed ? fmt::format("{}", result->driver_calls.total_calls()) : std::string(missing),
          replayed ? fmt::format("{:.1f}", static_cast<double>(result->driver_time_ns) / 1e6) : std::string(missing),
          replayed ? fmt::format("{:.0f}", result->host_ns_per_op) : std::string(missing));
    }
    if (recorded) {
      out += fmt::format("  ({}: the real allocator, as the profile recorded its Total Allocated and Total Reserved)\n",
                         recorded_line_name);
    }
  }
  return out;
}

}  // namespace tessera
