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

// Traces with pause and resume events: what the allocators held while a tag was paused, and what pausing
// and resuming cost in driver calls and time (modelled on the sim driver).
std::string pause_rows(const report::TraceGroup& group) {
  const bool any = std::any_of(group.results.begin(), group.results.end(), [](const ReplayResult* result) {
    return result->failure.empty() && result->pauses + result->resumes > 0;
  });
  if (!any) return {};
  constexpr std::string_view row = "  {:<12} {:>14} {:>12} {:>11} {:>12} {:>11}";
  std::string out = fmt::format(fmt::runtime(row), "pause/resume", "held paused", "pause calls", "pause ms",
                                "resume calls", "resume ms") +
                    "\n";
  for (const ReplayResult* result : group.results) {
    if (!result->failure.empty() || result->pauses + result->resumes == 0) continue;
    out += fmt::format(fmt::runtime(row), result->allocator, bytes_or_missing(result->peak_reserved_while_paused),
                       result->pause_driver_calls.total_calls(),
                       fmt::format("{:.3f}", static_cast<double>(result->pause_time_ns) / 1e6),
                       result->resume_driver_calls.total_calls(),
                       fmt::format("{:.3f}", static_cast<double>(result->resume_time_ns) / 1e6));
    out += result->pause_unsupported ? "  cannot pause: its tagged memory stayed\n" : "\n";
  }
  return out;
}

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
    out += pause_rows(group);
    for (const ReplayResult* result : group.results) {
      if (result->pool_unsupported) {
        out += fmt::format("  ({}: no private pools: the pools' allocations shared its cache, which the recorded job's "
                           "could not)\n",
                           result->allocator);
      }
    }
  }
  return out;
}

}  // namespace tessera
