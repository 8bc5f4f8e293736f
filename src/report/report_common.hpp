// What the three report formats share: which results are the reference line, how results group by trace,
// and which overhead the charts show.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tessera/replay.hpp"

namespace tessera::report {

// The real allocator's line (recorded_result): what a profile recorded, not a replay.
inline bool is_recorded(const ReplayResult& result) { return result.allocator == recorded_line_name; }

// The reference lines ("ideal", "ideal_cache") are computed from the trace and the real allocator's line read
// from the profile, not replayed: they have no driver, calls or host time.
inline bool is_reference(const ReplayResult& result) {
  return is_reference_line(result.allocator) || is_recorded(result);
}

// The name a report shows for a result: the real allocator's line says what it is.
inline std::string display_name(const ReplayResult& result) {
  return is_recorded(result) ? std::string(recorded_line_name) + " (real allocator)" : result.allocator;
}

// The results of one trace, in the order given; traces in the order they first appear.
struct TraceGroup {
  std::string trace;
  std::vector<const ReplayResult*> results;
};
std::vector<TraceGroup> group_by_trace(std::span<const ReplayResult> results);

// Allocator names in the order they first appear.
std::vector<std::string> allocator_order(std::span<const ReplayResult> results);

// peak_reserved / peak_allocated - 1: what a result's footprint costs when min_capacity is unknown.
std::optional<double> reserved_overhead(const ReplayResult& result);

// Driver calls per iteration once the allocator has warmed up: the last iteration's, when the trace marks
// at least two.
std::optional<std::uint64_t> steady_calls_per_iteration(const ReplayResult& result);

}  // namespace tessera::report
