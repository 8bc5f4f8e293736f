// What only the sim driver promises: every call charged its modelled latency.
#include "driver_fixtures.hpp"

namespace tessera::testing {
namespace {

TEST(SimDriver, ChargesTheModelledLatencyOfEachCall) {
  LatencyModel model;
  model[DriverCall::create_chunk] = {100.0, 10.0};
  model[DriverCall::map] = {2.0, 0.0};
  model[DriverCall::unmap] = {3.0, 0.0};
  auto sim = TESSERA_OK(make_sim_driver({.capacity = 64 * MiB, .latency = model}));
  Driver& driver = *sim.driver;

  const Address base = TESSERA_OK(driver.reserve(8 * MiB));
  const ChunkId small = TESSERA_OK(driver.create_chunk(2 * MiB));
  const ChunkId large = TESSERA_OK(driver.create_chunk(6 * MiB));  // two extra granules
  TESSERA_OK(driver.map(base, small));
  TESSERA_OK(driver.map(base + 2 * MiB, large));
  TESSERA_OK(driver.unmap(base));

  const CallTally& modelled = sim.clock->modelled();
  EXPECT_EQ(modelled.calls_of(DriverCall::create_chunk), 2u);
  EXPECT_EQ(modelled.nanoseconds_of(DriverCall::create_chunk), 100'000u + 120'000u);
  EXPECT_EQ(modelled.nanoseconds_of(DriverCall::map), 4'000u);
  EXPECT_EQ(modelled.nanoseconds_of(DriverCall::unmap), 3'000u);
  EXPECT_EQ(modelled.total_nanoseconds(), 227'000u);

  // Calls refused by the contract never reach the platform and cost nothing.
  ASSERT_FALSE(driver.unmap(base).ok());
  EXPECT_EQ(modelled.calls_of(DriverCall::unmap), 1u);

  sim.clock->reset_modelled();
  EXPECT_EQ(sim.clock->modelled().total_calls(), 0u);
  TESSERA_OK(driver.unmap(base + 2 * MiB));
  TESSERA_OK(driver.release_chunk(small));
  TESSERA_OK(driver.release_chunk(large));
  TESSERA_OK(driver.release_reservation(base));
}

TEST(SimDriver, ChargesHostBuffersAndCopiesByTheBytesTheyMove) {
  LatencyModel model;
  model[DriverCall::allocate_host] = {5.0, 0.0, 0.5};
  model[DriverCall::copy_to_host] = {1.0, 0.0, 0.25};
  model[DriverCall::copy_to_device] = {2.0, 0.0, 0.125};
  auto sim = TESSERA_OK(make_sim_driver({.capacity = 64 * MiB, .host_capacity = 10 * MiB, .latency = model}));
  Driver& driver = *sim.driver;
  const Address base = TESSERA_OK(driver.reserve(2 * MiB));
  const ChunkId page = TESSERA_OK(driver.create_chunk(2 * MiB));
  TESSERA_OK(driver.map(base, page));
  TESSERA_OK(driver.set_access(base, 2 * MiB));

  const HostBuffer buffer = TESSERA_OK(driver.allocate_host(8000));
  EXPECT_EQ(buffer.data, nullptr) << "the sim driver has no memory to hand out";
  TESSERA_OK(driver.copy_to_host(buffer, base + 100, 4000));  // not a granule: charged by the byte
  TESSERA_OK(driver.copy_to_device(base, buffer, 8000));
  const CallTally& modelled = sim.clock->modelled();
  EXPECT_EQ(modelled.nanoseconds_of(DriverCall::allocate_host), 5'000u + 4'000u);
  EXPECT_EQ(modelled.nanoseconds_of(DriverCall::copy_to_host), 1'000u + 1'000u);
  EXPECT_EQ(modelled.nanoseconds_of(DriverCall::copy_to_device), 2'000u + 1'000u);

  // The modelled host memory runs out like any other.
  auto over = driver.allocate_host(10 * MiB);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.error().code, Errc::out_of_memory);
  EXPECT_EQ(modelled.calls_of(DriverCall::allocate_host), 1u) << "a refused call is not charged";
  TESSERA_OK(driver.free_host(buffer));
  const HostBuffer all = TESSERA_OK(driver.allocate_host(10 * MiB));  // freed bytes are free again
  TESSERA_OK(driver.free_host(all));

  TESSERA_OK(driver.unmap(base));
  TESSERA_OK(driver.release_chunk(page));
  TESSERA_OK(driver.release_reservation(base));
}

TEST(SimDriver, DefaultsAreThePublishedA100Figures) {
  const LatencyModel model = LatencyModel::a100();
  EXPECT_DOUBLE_EQ(model[DriverCall::create_chunk].fixed_us, 193.0);
  EXPECT_DOUBLE_EQ(model[DriverCall::map].fixed_us, 1.45);
  EXPECT_DOUBLE_EQ(model[DriverCall::set_access].fixed_us, 36.0);
  EXPECT_DOUBLE_EQ(model[DriverCall::unmap].fixed_us, 25.6);
  EXPECT_DOUBLE_EQ(model[DriverCall::reserve].fixed_us, 19.0);
}

// The default latency model charges a chunk call its 2 MiB figure whatever the chunk's size: the figures
// that every saved report was made with.
TEST(SimDriver, DefaultModelChargesChunkCallsPerCall) {
  const LatencyModel per_call = LatencyModel::a100(LatencyScaling::per_call);
  const LatencyModel defaults = SimDriverOptions{}.latency;
  for (std::size_t kind = 0; kind < driver_call_count; ++kind) {
    EXPECT_EQ(defaults.of[kind].fixed_us, per_call.of[kind].fixed_us) << to_string(static_cast<DriverCall>(kind));
    EXPECT_EQ(defaults.of[kind].per_extra_granule_us, per_call.of[kind].per_extra_granule_us);
    EXPECT_EQ(defaults.of[kind].per_byte_ns, per_call.of[kind].per_byte_ns);
  }
  auto sim = TESSERA_OK(make_sim_driver());
  const ChunkId one = TESSERA_OK(sim.driver->create_chunk(2 * MiB));
  const ChunkId two = TESSERA_OK(sim.driver->create_chunk(4 * MiB));
  TESSERA_OK(sim.driver->release_chunk(one));
  TESSERA_OK(sim.driver->release_chunk(two));
  EXPECT_EQ(sim.clock->modelled().nanoseconds_of(DriverCall::create_chunk), 2 * 193'000u);
  EXPECT_EQ(sim.clock->modelled().nanoseconds_of(DriverCall::release_chunk), 2 * 10'000u);
}

// per_byte: create_chunk is 10 us + 183 us per 2 MiB, release_chunk 2 us + 8 us per 2 MiB (docs/drivers.md),
// so one granule costs what per_call charges and two granules nearly twice as much. Mapping stays per call.
TEST(SimDriver, PerByteModelChargesChunkCallsByTheirBytes) {
  auto sim =
      TESSERA_OK(make_sim_driver({.capacity = 64 * MiB, .latency = LatencyModel::a100(LatencyScaling::per_byte)}));
  Driver& driver = *sim.driver;
  const CallTally& modelled = sim.clock->modelled();
  const Address base = TESSERA_OK(driver.reserve(8 * MiB));

  const ChunkId one = TESSERA_OK(driver.create_chunk(2 * MiB));
  EXPECT_EQ(modelled.nanoseconds_of(DriverCall::create_chunk), 193'000u) << "the per_call figure at 2 MiB";
  const ChunkId two = TESSERA_OK(driver.create_chunk(4 * MiB));
  EXPECT_EQ(modelled.nanoseconds_of(DriverCall::create_chunk), 193'000u + 376'000u) << "10 + 2 x 183 us";

  TESSERA_OK(driver.map(base, one));
  const std::uint64_t one_map = modelled.nanoseconds_of(DriverCall::map);
  TESSERA_OK(driver.map(base + 2 * MiB, two));
  EXPECT_EQ(one_map, 1'450u);
  EXPECT_EQ(modelled.nanoseconds_of(DriverCall::map), 2 * one_map) << "a mapping costs the same at any size";
  TESSERA_OK(driver.unmap(base));
  TESSERA_OK(driver.unmap(base + 2 * MiB));

  TESSERA_OK(driver.release_chunk(one));
  EXPECT_EQ(modelled.nanoseconds_of(DriverCall::release_chunk), 10'000u);
  TESSERA_OK(driver.release_chunk(two));
  EXPECT_EQ(modelled.nanoseconds_of(DriverCall::release_chunk), 10'000u + 18'000u) << "2 + 2 x 8 us";
  TESSERA_OK(driver.release_reservation(base));
}

// The calibration: at one 2 MiB granule every call costs the same in both models, on both platforms.
TEST(SimDriver, LatencyModelsAgreeAtOneGranule) {
  constexpr double granule = 2.0 * MiB;
  auto at_one_granule = [&](const CallLatency& cost) { return cost.fixed_us * 1000.0 + cost.per_byte_ns * granule; };
  for (auto make : {&LatencyModel::a100, &LatencyModel::ascend_910b}) {
    const LatencyModel per_call = make(LatencyScaling::per_call);
    const LatencyModel per_byte = make(LatencyScaling::per_byte);
    for (std::size_t kind = 0; kind < driver_call_count; ++kind) {
      EXPECT_DOUBLE_EQ(at_one_granule(per_byte.of[kind]), at_one_granule(per_call.of[kind]))
          << to_string(static_cast<DriverCall>(kind));
    }
    EXPECT_GT(per_byte[DriverCall::create_chunk].per_byte_ns, 0.0);
    EXPECT_LT(per_byte[DriverCall::create_chunk].fixed_us, per_call[DriverCall::create_chunk].fixed_us);
  }
}

TEST(SimDriver, LatencyModelsGoByTheirNames) {
  EXPECT_EQ(latency_scaling_names(), (std::vector<std::string_view>{"per_call", "per_byte"}));
  for (std::string_view name : latency_scaling_names()) {
    const auto scaling = latency_scaling_named(name);
    ASSERT_TRUE(scaling.has_value()) << name;
    EXPECT_EQ(to_string(*scaling), name);
  }
  EXPECT_EQ(latency_scaling_named("per_byte"), LatencyScaling::per_byte);
  EXPECT_FALSE(latency_scaling_named("bytes").has_value());
  EXPECT_FALSE(latency_scaling_named("").has_value());
}

// The ascend platform holds callers to ACL's contract as the ascend driver declares it: a physical handle is
// mapped whole, at one address at a time, and nothing needs set-access.
TEST(SimDriver, AscendPlatformMapsWholeHandlesOnceAndNeedsNoSetAccess) {
  auto sim = TESSERA_OK(make_sim_driver(SimDriverOptions::ascend_910b()));
  Driver& driver = *sim.driver;
  EXPECT_EQ(driver.capacity(), 64 * GiB);
  EXPECT_EQ(driver.granularity(), 2 * MiB);
  const DriverCapabilities& can = driver.capabilities();
  EXPECT_FALSE(can.needs_set_access);
  EXPECT_FALSE(can.partial_map);
  EXPECT_FALSE(can.page_multi_mapping);

  const Address base = TESSERA_OK(driver.reserve(8 * MiB));
  const ChunkId page = TESSERA_OK(driver.create_chunk(4 * MiB));
  auto part = driver.map_part(base, page, 0, 2 * MiB);
  ASSERT_FALSE(part.ok());
  EXPECT_EQ(part.error().code, Errc::unsupported);
  TESSERA_OK(driver.map(base, page));
  auto second = driver.map(base + 4 * MiB, page);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.error().code, Errc::already_mapped);

  // The modelled latencies: the A100's for the matching calls (an assumption), nothing for set-access.
  const CallTally& modelled = sim.clock->modelled();
  EXPECT_EQ(modelled.nanoseconds_of(DriverCall::create_chunk), 193'000u);
  EXPECT_EQ(modelled.nanoseconds_of(DriverCall::map), 1'450u);
  TESSERA_OK(driver.set_access(base, 4 * MiB));
  EXPECT_EQ(modelled.nanoseconds_of(DriverCall::set_access), 0u);

  TESSERA_OK(driver.unmap(base));
  TESSERA_OK(driver.release_chunk(page));
  TESSERA_OK(driver.release_reservation(base));
}

TEST(SimDriver, ReplaysAnEightyGigabyteCardWithoutMemory) {
  auto sim = TESSERA_OK(make_sim_driver());
  EXPECT_EQ(sim.driver->capacity(), 80 * GiB);
  std::vector<ChunkId> pages;
  for (int i = 0; i < 39; ++i) pages.push_back(TESSERA_OK(sim.driver->create_chunk(2 * GiB)));
  EXPECT_EQ(sim.driver->census().page_bytes, 78 * GiB);
  auto over = sim.driver->create_chunk(4 * GiB);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.error().code, Errc::out_of_memory);
  for (ChunkId page : pages) TESSERA_OK(sim.driver->release_chunk(page));
}

TEST(SimDriver, RejectsBadOptions) {
  auto capacity = make_sim_driver({.capacity = 3 * MiB});
  ASSERT_FALSE(capacity.ok());
  EXPECT_NE(capacity.error().message.find("capacity"), std::string::npos);
  LatencyModel negative;
  negative[DriverCall::map].fixed_us = -1;
  auto latency = make_sim_driver({.latency = negative});
  ASSERT_FALSE(latency.ok());
  EXPECT_NE(latency.error().message.find("latency"), std::string::npos);
}

TEST(MakeDriver, KnowsEveryDriverByNameAndNamesAnUnknownOne) {
  EXPECT_EQ(TESSERA_OK(make_driver("sim"))->name(), "sim");
  EXPECT_EQ(TESSERA_OK(make_driver("host"))->name(), "host");
  auto unknown = make_driver("tpu");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().code, Errc::invalid_argument);
  EXPECT_NE(unknown.error().message.find("'tpu'"), std::string::npos);
  EXPECT_NE(unknown.error().message.find("host, sim, cuda, ascend"), std::string::npos);
}

}  // namespace
}  // namespace tessera::testing
