// The allocators a replay can run, by name.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tessera/replay.hpp"

namespace tessera {

std::vector<std::string_view> replay_allocator_names() { return {"tessera", "ideal"}; }

Result<std::unique_ptr<DeviceAllocator>> make_replay_allocator(std::string_view name, Driver& driver,
                                                               const AllocatorConfig& tessera_config) {
  if (name == "tessera") {
    auto allocator = make_tessera_allocator(driver, tessera_config);
    if (!allocator) return std::move(allocator).error();
    return std::unique_ptr<DeviceAllocator>(std::move(allocator).value());
  }
  if (name == "ideal") {
    return make_error(Errc::invalid_argument, "'ideal' is a reference line computed from the trace, not an allocator");
  }
  return make_error(Errc::invalid_argument, fmt::format("unknown allocator '{}': expected one of {}", name,
                                                        fmt::join(replay_allocator_names(), ", ")));
}

}  // namespace tessera
