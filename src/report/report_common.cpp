#include "report/report_common.hpp"

#include <algorithm>

namespace tessera::report {

std::vector<TraceGroup> group_by_trace(std::span<const ReplayResult> results) {
  std::vector<TraceGroup> groups;
  for (const ReplayResult& result : results) {
    auto group =
        std::find_if(groups.begin(), groups.end(), [&](const TraceGroup& g) { return g.trace == result.trace; });
    if (group == groups.end()) {
      groups.push_back({result.trace, {}});
      group = std::prev(groups.end());
    }
    group->results.push_back(&result);
  }
  return groups;
}

std::vector<std::string> allocator_order(std::span<const ReplayResult> results) {
  std::vector<std::string> names;
  for (const ReplayResult& result : results) {
    if (std::find(names.begin(), names.end(), result.allocator) == names.end()) names.push_back(result.allocator);
  }
  return names;
}

std::optional<double> reserved_overhead(const ReplayResult& result) {
  if (result.peak_allocated == 0) return std::nullopt;
  return static_cast<double>(result.peak_reserved) / static_cast<double>(result.peak_allocated) - 1.0;
}

std::optional<std::uint64_t> steady_calls_per_iteration(const ReplayResult& result) {
  // The first iteration pays for warming the cache up; one more is needed to see the steady state.
  if (result.calls_per_iteration.size() < 2) return std::nullopt;
  return result.calls_per_iteration.back();
}

}  // namespace tessera::report
