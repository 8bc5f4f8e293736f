// The decorators around any driver: counting, fault injection, a capacity limit.
#include <unistd.h>

#include <cstring>

#include "driver_fixtures.hpp"
#include "tessera/driver_decorators.hpp"

namespace tessera::testing {
namespace {

struct Stack {
  std::unique_ptr<CountingDriver> counting;
  FaultInjectingDriver* faults = nullptr;
};

Stack counted_faulty_host() {
  auto faults = std::make_unique<FaultInjectingDriver>(TESSERA_OK(make_host_driver({.capacity = 16 * MiB})));
  FaultInjectingDriver* steer = faults.get();
  return {std::make_unique<CountingDriver>(std::move(faults)), steer};
}

TEST(FaultInjection, AFailingMapIsATypedErrorAndTheDriverStaysUsable) {
  auto [driver, faults] = counted_faulty_host();
  const Address base = TESSERA_OK(driver->reserve(8 * MiB));
  std::vector<ChunkId> pages;
  for (int i = 0; i < 3; ++i) pages.push_back(TESSERA_OK(driver->create_chunk(2 * MiB)));

  faults->fail(DriverCall::map, 2);
  TESSERA_OK(driver->map(base, pages[0]));
  auto failed = driver->map(base + 2 * MiB, pages[1]);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.error().code, Errc::platform);
  EXPECT_NE(failed.error().message.find("injected failure of map"), std::string::npos) << failed.error().message;
  EXPECT_EQ(driver->census().mappings, 1u) << "the failed map must leave no mapping";

  // The same call succeeds now, and the data of the first mapping is intact.
  TESSERA_OK(driver->map(base + 2 * MiB, pages[1]));
  const unsigned char byte = 0x42;
  TESSERA_OK(driver->write(base + 2 * MiB, &byte, 1));
  unsigned char back = 0;
  TESSERA_OK(driver->read(base + 2 * MiB, &back, 1));
  EXPECT_EQ(back, byte);
  EXPECT_EQ(faults->injected(DriverCall::map), 1u);
  EXPECT_EQ(driver->tally().failures_of(DriverCall::map), 1u);
  EXPECT_EQ(driver->tally().calls_of(DriverCall::map), 3u);

  TESSERA_OK(driver->unmap(base));
  TESSERA_OK(driver->unmap(base + 2 * MiB));
  for (ChunkId page : pages) TESSERA_OK(driver->release_chunk(page));
  TESSERA_OK(driver->release_reservation(base));
  EXPECT_EQ(driver->census(), DriverCensus{});
}

TEST(FaultInjection, AFailingCreateFromTheNthOnIsOutOfMemoryUntilCleared) {
  auto [driver, faults] = counted_faulty_host();
  faults->fail(DriverCall::create_chunk, 2, FaultInjectingDriver::Repeat::from_then_on, Errc::out_of_memory);
  const ChunkId first = TESSERA_OK(driver->create_chunk(2 * MiB));
  for (int i = 0; i < 3; ++i) {
    auto failed = driver->create_chunk(2 * MiB);
    ASSERT_FALSE(failed.ok());
    EXPECT_EQ(failed.error().code, Errc::out_of_memory);
  }
  EXPECT_EQ(driver->census().pages, 1u);
  faults->clear(DriverCall::create_chunk);
  const ChunkId second = TESSERA_OK(driver->create_chunk(2 * MiB));
  EXPECT_EQ(faults->injected(DriverCall::create_chunk), 3u);
  TESSERA_OK(driver->release_chunk(first));
  TESSERA_OK(driver->release_chunk(second));
}

TEST(FaultInjection, EveryKindOfCallCanBeFailed) {
  auto [driver, faults] = counted_faulty_host();
  const Address base = TESSERA_OK(driver->reserve(2 * MiB));
  const ChunkId page = TESSERA_OK(driver->create_chunk(2 * MiB));
  TESSERA_OK(driver->map(base, page));
  const EventId event = TESSERA_OK(driver->create_event());
  const HostBuffer buffer = TESSERA_OK(driver->allocate_host(4096));
  unsigned char byte = 0;
  const std::vector<std::pair<DriverCall, std::function<bool()>>> calls = {
      {DriverCall::reserve, [&] { return driver->reserve(2 * MiB).ok(); }},
      {DriverCall::release_reservation, [&] { return driver->release_reservation(base).ok(); }},
      {DriverCall::create_chunk, [&] { return driver->create_chunk(2 * MiB).ok(); }},
      {DriverCall::release_chunk, [&] { return driver->release_chunk(page).ok(); }},
      {DriverCall::map, [&] { return driver->map(base, page).ok(); }},
      {DriverCall::set_access, [&] { return driver->set_access(base, 2 * MiB).ok(); }},
      {DriverCall::unmap, [&] { return driver->unmap(base).ok(); }},
      {DriverCall::create_event, [&] { return driver->create_event().ok(); }},
      {DriverCall::record_event, [&] { return driver->record_event(event, default_stream).ok(); }},
      {DriverCall::query_event, [&] { return driver->query_event(event).ok(); }},
      {DriverCall::synchronize_event, [&] { return driver->synchronize_event(event).ok(); }},
      {DriverCall::destroy_event, [&] { return driver->destroy_event(event).ok(); }},
      {DriverCall::synchronize_stream, [&] { return driver->synchronize_stream(default_stream).ok(); }},
      {DriverCall::synchronize_device, [&] { return driver->synchronize_device().ok(); }},
      {DriverCall::copy, [&] { return driver->read(base, &byte, 1).ok(); }},
      {DriverCall::allocate_host, [&] { return driver->allocate_host(4096).ok(); }},
      {DriverCall::free_host, [&] { return driver->free_host(buffer).ok(); }},
      {DriverCall::copy_to_host, [&] { return driver->copy_to_host(buffer, base, 4096).ok(); }},
      {DriverCall::copy_to_device, [&] { return driver->copy_to_device(base, buffer, 4096).ok(); }},
      // Refused by a driver without shareable_chunks; injected before it is reached all the same.
      {DriverCall::export_chunk, [&] { return driver->export_chunk(page).ok(); }},
      {DriverCall::import_chunk, [&] { return driver->import_chunk(0, 0, 2 * MiB).ok(); }},
  };
  ASSERT_EQ(calls.size(), driver_call_count);
  const DriverCensus before = driver->census();
  for (const auto& [kind, call] : calls) {
    faults->fail(kind, 1);
    EXPECT_FALSE(call()) << to_string(kind);
    EXPECT_EQ(faults->injected(kind), 1u) << to_string(kind);
    EXPECT_EQ(driver->census(), before) << to_string(kind) << " changed the driver while failing";
  }
  TESSERA_OK(driver->free_host(buffer));
  TESSERA_OK(driver->destroy_event(event));
  TESSERA_OK(driver->unmap(base));
  TESSERA_OK(driver->release_chunk(page));
  TESSERA_OK(driver->release_reservation(base));
}

// What pause and resume rely on: a backup call that fails moves no byte and holds no buffer, and the same
// call succeeds when tried again.
TEST(FaultInjection, AFailedHostBufferOrCopyLeavesDeviceBufferAndCensusAsTheyWere) {
  auto [driver, faults] = counted_faulty_host();
  const Address base = TESSERA_OK(driver->reserve(2 * MiB));
  const ChunkId page = TESSERA_OK(driver->create_chunk(2 * MiB));
  TESSERA_OK(driver->map(base, page));
  std::vector<unsigned char> device(8192), host(8192);
  for (std::size_t i = 0; i < device.size(); ++i) {
    device[i] = static_cast<unsigned char>(i * 7 + 1);
    host[i] = static_cast<unsigned char>(i * 13 + 5);
  }
  TESSERA_OK(driver->write(base, device.data(), device.size()));
  const HostBuffer buffer = TESSERA_OK(driver->allocate_host(host.size()));
  std::memcpy(buffer.data, host.data(), host.size());
  const DriverCensus before = driver->census();
  auto unchanged = [&](DriverCall kind) {
    EXPECT_EQ(driver->census(), before) << to_string(kind);
    std::vector<unsigned char> now(device.size());
    TESSERA_OK(driver->read(base, now.data(), now.size()));
    EXPECT_TRUE(now == device) << to_string(kind) << " changed the device";
    EXPECT_EQ(std::memcmp(buffer.data, host.data(), host.size()), 0) << to_string(kind) << " changed the buffer";
  };

  faults->fail(DriverCall::allocate_host, 1, FaultInjectingDriver::Repeat::once, Errc::out_of_memory);
  auto allocated = driver->allocate_host(4096);
  ASSERT_FALSE(allocated.ok());
  EXPECT_EQ(allocated.error().code, Errc::out_of_memory);
  unchanged(DriverCall::allocate_host);

  faults->fail(DriverCall::copy_to_host, 1);
  EXPECT_FALSE(driver->copy_to_host(buffer, base, host.size()).ok());
  unchanged(DriverCall::copy_to_host);

  faults->fail(DriverCall::copy_to_device, 1);
  EXPECT_FALSE(driver->copy_to_device(base, buffer, host.size()).ok());
  unchanged(DriverCall::copy_to_device);

  faults->fail(DriverCall::free_host, 1);
  EXPECT_FALSE(driver->free_host(buffer).ok());
  unchanged(DriverCall::free_host);

  // Each fault fired once; the same calls now succeed.
  for (DriverCall kind : {DriverCall::allocate_host, DriverCall::free_host, DriverCall::copy_to_host,
                          DriverCall::copy_to_device}) {
    EXPECT_EQ(faults->injected(kind), 1u) << to_string(kind);
    EXPECT_EQ(driver->tally().failures_of(kind), 1u) << to_string(kind);
  }
  TESSERA_OK(driver->copy_to_device(base, buffer, host.size()));
  std::vector<unsigned char> restored(host.size());
  TESSERA_OK(driver->read(base, restored.data(), restored.size()));
  EXPECT_TRUE(restored == host);
  TESSERA_OK(driver->free_host(buffer));
  EXPECT_EQ(driver->census().host_buffers, 0u);
  EXPECT_EQ(driver->tally().calls_of(DriverCall::free_host), 2u) << "the counter outside saw both tries";

  TESSERA_OK(driver->unmap(base));
  TESSERA_OK(driver->release_chunk(page));
  TESSERA_OK(driver->release_reservation(base));
}

TEST(CountingDriver, CountsEveryCallByKindWithItsTime) {
  CountingDriver driver(TESSERA_OK(make_host_driver({.capacity = 16 * MiB})));
  const Address base = TESSERA_OK(driver.reserve(4 * MiB));
  const ChunkId page = TESSERA_OK(driver.create_chunk(2 * MiB));
  TESSERA_OK(driver.map(base, page));
  EXPECT_FALSE(driver.unmap(base + 2 * MiB).ok());
  TESSERA_OK(driver.unmap(base));
  TESSERA_OK(driver.release_chunk(page));
  TESSERA_OK(driver.release_reservation(base));
  const CallTally& tally = driver.tally();
  EXPECT_EQ(tally.calls_of(DriverCall::reserve), 1u);
  EXPECT_EQ(tally.calls_of(DriverCall::map), 1u);
  EXPECT_EQ(tally.calls_of(DriverCall::unmap), 2u);
  EXPECT_EQ(tally.failures_of(DriverCall::unmap), 1u);
  EXPECT_EQ(tally.total_calls(), 7u);
  EXPECT_GT(tally.nanoseconds_of(DriverCall::map), 0u);
  driver.reset();
  EXPECT_EQ(driver.tally().total_calls(), 0u);
}

TEST(CapacityLimitDriver, LowersTheCapacityOfAnyDriver) {
  auto sim = TESSERA_OK(make_sim_driver());
  CapacityLimitDriver driver(std::move(sim.driver), 6 * MiB);
  EXPECT_EQ(driver.capacity(), 6 * MiB);
  const ChunkId first = TESSERA_OK(driver.create_chunk(4 * MiB));
  auto over = driver.create_chunk(4 * MiB);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.error().code, Errc::out_of_memory);
  EXPECT_NE(over.error().message.find("capacity limit"), std::string::npos);
  const ChunkId second = TESSERA_OK(driver.create_chunk(2 * MiB));
  TESSERA_OK(driver.release_chunk(first));
  TESSERA_OK(driver.release_chunk(second));
  EXPECT_EQ(driver.census(), DriverCensus{});
}

}  // namespace
}  // namespace tessera::testing

namespace tessera::testing {
namespace {

// Sharing through the decorators: counted, and failed by the fault injector without reaching the driver
// (no descriptor made, no chunk imported); the same calls succeed when tried again.
TEST(FaultInjection, ExportAndImportAreCountedAndFailWithoutChangingTheDriver) {
  auto faults = std::make_unique<FaultInjectingDriver>(
      TESSERA_OK(make_host_driver({.capacity = 16 * MiB, .shareable_chunks = true})));
  FaultInjectingDriver* steer = faults.get();
  CountingDriver driver(std::move(faults));
  const ChunkId chunk = TESSERA_OK(driver.create_chunk(2 * MiB));
  const DriverCensus before = driver.census();

  steer->fail(DriverCall::export_chunk, 1);
  auto refused = driver.export_chunk(chunk);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(steer->injected(DriverCall::export_chunk), 1u);
  const ExportedChunk exported = TESSERA_OK(driver.export_chunk(chunk));

  steer->fail(DriverCall::import_chunk, 1);
  EXPECT_FALSE(driver.import_chunk(exported.descriptor, exported.offset, exported.size).ok());
  EXPECT_EQ(driver.census(), before) << "a failed import kept a chunk";
  const ChunkId imported = TESSERA_OK(driver.import_chunk(exported.descriptor, exported.offset, exported.size));
  close(exported.descriptor);
  EXPECT_EQ(driver.census().pages, before.pages + 1);

  EXPECT_EQ(driver.tally().calls_of(DriverCall::export_chunk), 2u);
  EXPECT_EQ(driver.tally().failures_of(DriverCall::export_chunk), 1u);
  EXPECT_EQ(driver.tally().calls_of(DriverCall::import_chunk), 2u);
  EXPECT_EQ(driver.tally().failures_of(DriverCall::import_chunk), 1u);
  EXPECT_EQ(to_string(DriverCall::export_chunk), "export_chunk");
  EXPECT_EQ(to_string(DriverCall::import_chunk), "import_chunk");
  TESSERA_OK(driver.release_chunk(imported));
  TESSERA_OK(driver.release_chunk(chunk));
  EXPECT_EQ(driver.census(), DriverCensus{});
}

}  // namespace
}  // namespace tessera::testing
