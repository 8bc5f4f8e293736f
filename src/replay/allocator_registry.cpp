// The allocators a replay can run, by name: Tessera's and the baseline models.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "tessera/baselines.hpp"
#include "tessera/replay.hpp"

namespace tessera {

std::vector<std::string_view> replay_allocator_names() {
  std::vector<std::string_view> names{"tessera"};
  for (std::string_view baseline : baseline_names()) names.push_back(baseline);
  names.push_back("ideal");
  names.push_back("ideal_cache");
  return names;
}

Result<std::unique_ptr<DeviceAllocator>> make_replay_allocator(std::string_view name, Driver& driver,
                                                               const AllocatorConfig& tessera_config) {
  if (name == "tessera") {
    auto allocator = make_tessera_allocator(driver, tessera_config);
    if (!allocator) return std::move(allocator).error();
    return std::unique_ptr<DeviceAllocator>(std::move(allocator).value());
  }
  if (is_reference_line(name)) {
    return make_error(Errc::invalid_argument,
                      fmt::format("'{}' is a reference line computed from the trace, not an allocator", name));
  }
  const auto baselines = baseline_names();
  if (std::find(baselines.begin(), baselines.end(), name) != baselines.end()) return make_baseline(name, driver);
  return make_error(Errc::invalid_argument, fmt::format("unknown allocator '{}': expected one of {}", name,
                                                        fmt::join(replay_allocator_names(), ", ")));
}

}  // namespace tessera
