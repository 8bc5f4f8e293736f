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
