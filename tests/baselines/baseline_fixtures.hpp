// Shared helpers of the baseline tests: drivers, a recorder of segment events, and unwrapping.
#pragma once

#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "driver/driver_fixtures.hpp"
#include "tessera/baselines.hpp"
#include "tessera/driver_decorators.hpp"
#include "tessera/drivers.hpp"

namespace tessera::testing {

inline std::unique_ptr<Driver> sim_driver(Bytes capacity = 8 * GiB) {
  auto sim = make_sim_driver({.capacity = capacity});
  EXPECT_TRUE(sim.ok());
  return std::move(sim->driver);
}

inline std::unique_ptr<Driver> host_driver(Bytes capacity = 256 * MiB, bool require_set_access = true) {
  return TESSERA_OK(make_host_driver({.capacity = capacity, .require_set_access = require_set_access}));
}

// Every segment event a model reports, in order.
struct SegmentLog {
  std::vector<SegmentEvent> events;

  SegmentObserver observer() {
    return [this](const SegmentEvent& event) { events.push_back(event); };
  }
  std::vector<Bytes> sizes(SegmentEvent::Kind kind) const {
    std::vector<Bytes> out;
    for (const SegmentEvent& event : events) {
      if (event.kind == kind) out.push_back(event.size);
    }
    return out;
  }
  std::vector<Bytes> allocs() const { return sizes(SegmentEvent::Kind::alloc); }
};

inline std::unique_ptr<DeviceAllocator> make_model(std::string_view name, Driver& driver,
                                                   const BaselineOptions& options = {}) {
  return TESSERA_OK(make_baseline(name, driver, options));
}

inline Address alloc(DeviceAllocator& allocator, Bytes size, StreamId stream = default_stream) {
  return TESSERA_OK(allocator.allocate(size, stream));
}

inline void release(DeviceAllocator& allocator, Address block) { TESSERA_OK(allocator.deallocate(block)); }

}  // namespace tessera::testing
