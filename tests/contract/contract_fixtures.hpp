// What the allocator contract suite crosses: every DeviceAllocator, with the ways one legitimately
// differs from the contract's plain reading named as properties, and every driver that can host them.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "driver/driver_fixtures.hpp"
#include "tessera/allocator.hpp"
#include "tessera/baselines.hpp"
#include "tessera/driver_decorators.hpp"
#include "tessera/drivers.hpp"

namespace tessera::testing {

struct AllocatorKind {
  std::string name;
  std::function<Result<std::unique_ptr<DeviceAllocator>>(Driver&)> make;
  // A request refused for want of memory may leave the allocator holding more pages than before: those it
  // created on the way, pooled for the next request instead of handed back at once. Live blocks and their
  // byte counts are still as they were, and empty_cache gives those pages back.
  bool keeps_pages_made_for_a_refused_request = false;
};

inline std::ostream& operator<<(std::ostream& out, const AllocatorKind& kind) { return out << kind.name; }

inline std::vector<AllocatorKind> contract_allocators() {
  auto baseline = [](std::string_view name) {
    return [name](Driver& driver) { return make_baseline(name, driver); };
  };
  return {
      // Tessera backs a block page by page; when the last page cannot be had, those already obtained stay
      // pooled (src/core/tessera_allocator.cpp states it: "nothing is lost").
      {"tessera",
       [](Driver& driver) -> Result<std::unique_ptr<DeviceAllocator>> {
         auto made = make_tessera_allocator(driver);
         if (!made) return std::move(made).error();
         return std::unique_ptr<DeviceAllocator>(std::move(made).value());
       },
       /*keeps_pages_made_for_a_refused_request=*/true},
      // The models make a segment in one driver call (cudaMalloc) or give back what they made on failure.
      {"pytorch", baseline("pytorch")},
      {"expandable", baseline("expandable")},
      {"gmlake", baseline("gmlake")},
      // torch_memory_saver's way: untagged memory through the pytorch model, a handle per tagged allocation.
      {"memory_saver", baseline("memory-saver")},
  };
}

// The conformance suite's drivers, and each decorator over the host driver: counting, fault injection with
// no fault armed (its forwarding path alone), and a capacity limit below the host driver's own capacity.
inline std::vector<DriverFactory> contract_drivers() {
  std::vector<DriverFactory> drivers = available_drivers();
  auto host = [](Bytes capacity) { return make_host_driver({.capacity = capacity}); };
  drivers.push_back({"counting_host", [host]() -> Result<std::unique_ptr<Driver>> {
                       auto inner = host(test_capacity);
                       if (!inner) return std::move(inner).error();
                       return std::unique_ptr<Driver>(std::make_unique<CountingDriver>(std::move(inner).value()));
                     }});
  drivers.push_back({"fault_injecting_host", [host]() -> Result<std::unique_ptr<Driver>> {
                       auto inner = host(test_capacity);
                       if (!inner) return std::move(inner).error();
                       return std::unique_ptr<Driver>(std::make_unique<FaultInjectingDriver>(std::move(inner).value()));
                     }});
  drivers.push_back({"capacity_limited_host", [host]() -> Result<std::unique_ptr<Driver>> {
                       auto inner = host(2 * test_capacity);
                       if (!inner) return std::move(inner).error();
                       return std::unique_ptr<Driver>(
                           std::make_unique<CapacityLimitDriver>(std::move(inner).value(), test_capacity));
                     }});
  return drivers;
}

}  // namespace tessera::testing
