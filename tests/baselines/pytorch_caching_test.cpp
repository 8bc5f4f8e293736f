// The "pytorch" model against PyTorch's rules: segment sizes, rounding, best fit, split thresholds,
// merging, max_split_size, streams and events, the out-of-memory ladder, garbage collection.
#include <gtest/gtest.h>

#include "baselines/baseline_fixtures.hpp"

namespace tessera::testing {
namespace {

struct PyTorchModel : ::testing::Test {
  std::unique_ptr<Driver> driver = sim_driver(8 * GiB);
  SegmentLog log;

  std::unique_ptr<DeviceAllocator> make(BaselineOptions options = {}) {
    options.on_segment = log.observer();
    return make_model("pytorch", *driver, options);
  }
};

TEST_F(PyTorchModel, SegmentSizesFollowPyTorch) {
  struct Case {
    Bytes request;
    Bytes segment;
  };
  const Case cases[] = {
      {1, 2 * MiB},                // small pool
      {1 * KiB, 2 * MiB},          //
      {1 * MiB, 2 * MiB},          // the largest small request
      {1 * MiB + 1, 20 * MiB},     // large, under 10 MiB
      {5 * MiB, 20 * MiB},         //
      {10 * MiB - 512, 20 * MiB},  //
      {10 * MiB, 10 * MiB},        // from 10 MiB on: rounded up to 2 MiB
      {30 * MiB + 1, 32 * MiB},    //
      {100 * MiB - 3, 100 * MiB},  //
  };
  for (const Case& c : cases) {
    log.events.clear();
    auto allocator = make();
    alloc(*allocator, c.request);
    EXPECT_EQ(log.allocs(), std::vector<Bytes>{c.segment}) << "request " << c.request;
    EXPECT_EQ(driver->census().page_bytes, c.segment);
    EXPECT_EQ(driver->census().pages, 1u) << "cudaMalloc is one page";
    EXPECT_EQ(allocator->stats().reserved_bytes, c.segment);
    EXPECT_EQ(log.events.front().small_pool, c.request <= 1 * MiB);
  }
  EXPECT_EQ(driver->census().pages, 0u) << "destroying a model gives everything back";
}

TEST_F(PyTorchModel, RoundsRequestsTo512Bytes) {
  auto allocator = make();
  const Address a = alloc(*allocator, 1);
  const Address b = alloc(*allocator, 513);
  const Address c = alloc(*allocator, 100);
  EXPECT_EQ(b - a, 512u);
  EXPECT_EQ(c - b, 1024u);
  const AllocatorStats stats = allocator->stats();
  EXPECT_EQ(stats.allocated_bytes, 512u + 1024u + 512u);
  EXPECT_EQ(stats.requested_bytes, 1u + 513u + 100u);
  EXPECT_EQ(log.allocs().size(), 1u);
}

TEST_F(PyTorchModel, RoundupPowerOfTwoDivisions) {
  auto allocator = make({.roundup_power2_divisions = 4});
  alloc(*allocator, 1200 * KiB);  // between 1 MiB and 2 MiB in quarters: 1.25 MiB
  EXPECT_EQ(allocator->stats().allocated_bytes, 1280 * KiB);
  alloc(*allocator, 1500);  // not above 512 B × 4: plain 512 B rounding
  EXPECT_EQ(allocator->stats().allocated_bytes, 1280 * KiB + 1536);
  alloc(*allocator, 3 * MiB);  // between two divisions already: unchanged
  EXPECT_EQ(allocator->stats().allocated_bytes, 1280 * KiB + 1536 + 3 * MiB);
}

TEST_F(PyTorchModel, LargeBlocksSplitOnlyWhenMoreThan1MiBRemains) {
  {
    auto allocator = make();
    alloc(*allocator, 19 * MiB);  // a 20 MiB segment; 1 MiB would remain: not split
    EXPECT_EQ(allocator->stats().allocated_bytes, 20 * MiB);
  }
  auto allocator = make();
  const Address a = alloc(*allocator, 18 * MiB + 512 * KiB);  // 1.5 MiB remains: split
  EXPECT_EQ(allocator->stats().allocated_bytes, 18 * MiB + 512 * KiB);
  const Address b = alloc(*allocator, 1 * MiB + 512 * KiB);
  EXPECT_EQ(b, a + 18 * MiB + 512 * KiB) << "the remainder serves the next request";
  EXPECT_EQ(log.allocs().size(), 2u);  // one segment in each model
}

TEST_F(PyTorchModel, SmallBlocksSplitWhen512BytesRemain) {
  auto allocator = make();
  const Address a = alloc(*allocator, 1 * MiB);
  const Address b = alloc(*allocator, 1 * MiB - 512);  // leaves 512 B: split
  const Address c = alloc(*allocator, 512);
  EXPECT_EQ(b, a + 1 * MiB);
  EXPECT_EQ(c, b + 1 * MiB - 512);
  EXPECT_EQ(log.allocs(), std::vector<Bytes>{2 * MiB});
}

TEST_F(PyTorchModel, BestFitBySizeThenAddress) {
  auto allocator = make();
  // One 20 MiB segment cut into A2 B3 C2 D4 E2 F7 (MiB).
  const Address a = alloc(*allocator, 2 * MiB);
  const Address b = alloc(*allocator, 3 * MiB);
  const Address c = alloc(*allocator, 2 * MiB);
  const Address d = alloc(*allocator, 4 * MiB);
  alloc(*allocator, 2 * MiB);
  alloc(*allocator, 7 * MiB);
  ASSERT_EQ(log.allocs(), std::vector<Bytes>{20 * MiB});

  release(*allocator, d);
  release(*allocator, b);
  EXPECT_EQ(alloc(*allocator, 3 * MiB), b) << "3 MiB fits B exactly, better than D";
  EXPECT_EQ(alloc(*allocator, 2 * MiB + 512 * KiB), d);

  release(*allocator, c);
  release(*allocator, a);
  EXPECT_EQ(alloc(*allocator, 2 * MiB), a) << "equal sizes: the lower address first";
  EXPECT_EQ(log.allocs().size(), 1u);
}

TEST_F(PyTorchModel, MergesWithinASegmentButNeverAcross) {
  auto allocator = make();
  const Address a = alloc(*allocator, 6 * MiB);
  const Address b = alloc(*allocator, 6 * MiB);
  alloc(*allocator, 6 * MiB);
  release(*allocator, a);
  release(*allocator, b);
  EXPECT_EQ(alloc(*allocator, 12 * MiB), a) << "A and B merged";
  EXPECT_EQ(log.allocs(), std::vector<Bytes>{20 * MiB});

  const Address s1 = alloc(*allocator, 20 * MiB);
  const Address s2 = alloc(*allocator, 20 * MiB);
  EXPECT_EQ(s2, s1 + 20 * MiB) << "the sim driver hands out neighbouring ranges";
  release(*allocator, s1);
  release(*allocator, s2);
  alloc(*allocator, 40 * MiB);
  EXPECT_EQ(log.allocs(), (std::vector<Bytes>{20 * MiB, 20 * MiB, 20 * MiB, 40 * MiB}))
      << "two neighbouring free segments never merge";
}

TEST_F(PyTorchModel, MaxSplitSizeKeepsOversizeBlocksWhole) {
  auto allocator = make({.max_split_size = 40 * MiB});
  const Address big = alloc(*allocator, 100 * MiB);
  release(*allocator, big);
  const Address fifty = alloc(*allocator, 50 * MiB);  // 100 MiB exceeds it by 20 MiB or more: refused
  EXPECT_NE(fifty, big);
  release(*allocator, fifty);
  EXPECT_EQ(alloc(*allocator, 90 * MiB), big) << "within 20 MiB: served";
  EXPECT_EQ(allocator->stats().allocated_bytes, 100 * MiB) << "and not split";
  alloc(*allocator, 30 * MiB);  // under max_split_size: the 50 MiB block is oversize for it
  EXPECT_EQ(log.allocs(), (std::vector<Bytes>{100 * MiB, 50 * MiB, 30 * MiB}));
}

TEST_F(PyTorchModel, OutOfMemoryReleasesOversizeBlocksFirst) {
  driver = sim_driver(128 * MiB);
  auto allocator = make({.max_split_size = 40 * MiB});
  release(*allocator, alloc(*allocator, 100 * MiB));
  alloc(*allocator, 60 * MiB);  // 100 + 60 > 128: the cached 100 MiB goes, then cudaMalloc again
  const AllocatorStats stats = allocator->stats();
  EXPECT_EQ(stats.num_alloc_retries, 0u) << "the oversize release is not the retry step";
  EXPECT_EQ(stats.num_sync_all_streams, 0u);
  EXPECT_EQ(stats.num_device_free, 1u);
  EXPECT_EQ(log.allocs(), (std::vector<Bytes>{100 * MiB, 60 * MiB}));
  EXPECT_EQ(log.sizes(SegmentEvent::Kind::free), std::vector<Bytes>{100 * MiB});
}

TEST_F(PyTorchModel, StreamsHaveTheirOwnBlocks) {
  auto allocator = make();
  const StreamId one{1};
  const StreamId two{2};
  const Address a = alloc(*allocator, 5 * MiB, one);
  release(*allocator, a);
  const Address b = alloc(*allocator, 5 * MiB, two);
  EXPECT_NE(b, a);
  EXPECT_EQ(alloc(*allocator, 5 * MiB, one), a);
  EXPECT_EQ(log.allocs(), (std::vector<Bytes>{20 * MiB, 20 * MiB}));
}

TEST_F(PyTorchModel, RecordStreamDelaysReuseUntilTheEventCompletes) {
  auto counting = std::make_unique<CountingDriver>(std::move(driver));
  CountingDriver* calls = counting.get();
  driver = std::move(counting);
  StreamControl* control = driver->stream_control();
  ASSERT_NE(control, nullptr);
  auto allocator = make();
  const StreamId one{1};
  const StreamId two{2};

  control->hold(two);
  const Address a = alloc(*allocator, 20 * MiB, one);
  TESSERA_OK(allocator->record_stream(a, two));
  TESSERA_OK(allocator->record_stream(a, one));  // the allocation stream: ignored
  release(*allocator, a);
  EXPECT_EQ(calls->tally().calls_of(DriverCall::record_event), 1u);

  const Address b = alloc(*allocator, 20 * MiB, one);
  EXPECT_NE(b, a) << "stream two may still use A";
  control->complete(two);
  release(*allocator, b);
  EXPECT_EQ(alloc(*allocator, 20 * MiB, one), a) << "the event completed: A is back, lowest address first";
  EXPECT_EQ(log.allocs().size(), 2u);
}

TEST_F(PyTorchModel, OutOfMemoryLadderFreesCachedSegmentsAndRetries) {
  driver = sim_driver(64 * MiB);
  auto allocator = make();
  release(*allocator, alloc(*allocator, 40 * MiB));
  alloc(*allocator, 50 * MiB);
  const AllocatorStats stats = allocator->stats();
  EXPECT_EQ(stats.num_alloc_retries, 1u);
  EXPECT_EQ(stats.num_sync_all_streams, 1u);
  EXPECT_EQ(stats.num_device_alloc, 2u);
  EXPECT_EQ(stats.num_device_free, 1u);
  EXPECT_EQ(stats.num_ooms, 0u);
  EXPECT_EQ(stats.reserved_bytes, 50 * MiB);
  EXPECT_EQ(driver->census().page_bytes, 50 * MiB);
}

TEST_F(PyTorchModel, OutOfMemoryIsAnAnswerAndTheModelStaysUsable) {
  driver = sim_driver(64 * MiB);
  auto allocator = make();
  const Address live = alloc(*allocator, 40 * MiB);
  auto refused = allocator->allocate(30 * MiB, default_stream);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, Errc::out_of_memory);
  EXPECT_NE(refused.error().message.find("31457280"), std::string::npos) << refused.error().message;
  AllocatorStats stats = allocator->stats();
  EXPECT_EQ(stats.num_ooms, 1u);
  EXPECT_EQ(stats.num_alloc_retries, 1u);
  EXPECT_EQ(stats.allocated_bytes, 40 * MiB);
  EXPECT_EQ(stats.reserved_bytes, driver->census().page_bytes);

  const Address more = alloc(*allocator, 20 * MiB);
  release(*allocator, more);
  release(*allocator, live);
  TESSERA_OK(allocator->empty_cache());
  stats = allocator->stats();
  EXPECT_EQ(stats.reserved_bytes, 0u);
  EXPECT_EQ(stats.allocated_bytes, 0u);
  EXPECT_EQ(stats.requested_bytes, 0u);
  EXPECT_EQ(stats.peak_reserved_bytes, 60 * MiB);
  EXPECT_EQ(driver->census().pages, 0u);
  EXPECT_EQ(driver->census().reservations, 0u);
}

TEST_F(PyTorchModel, MemoryFractionCapsReservedBytes) {
  driver = sim_driver(64 * MiB);
  auto allocator = make({.memory_fraction = 0.5});
  auto refused = allocator->allocate(40 * MiB, default_stream);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, Errc::out_of_memory);
  EXPECT_EQ(driver->census().pages, 0u);
  alloc(*allocator, 30 * MiB);
}

TEST_F(PyTorchModel, GarbageCollectionFreesOldWholeSegmentsPastTheThreshold) {
  driver = sim_driver(100 * MiB);
  {
    auto allocator = make({.garbage_collection_threshold = 0.5});  // no memory fraction: PyTorch ignores it
    release(*allocator, alloc(*allocator, 30 * MiB));
    alloc(*allocator, 30 * MiB);
    alloc(*allocator, 32 * MiB);
    EXPECT_EQ(allocator->stats().num_device_free, 0u);
  }
  log.events.clear();
  auto allocator = make({.garbage_collection_threshold = 0.5, .memory_fraction = 1.0});
  const Address a = alloc(*allocator, 30 * MiB);
  alloc(*allocator, 30 * MiB);
  release(*allocator, a);
  alloc(*allocator, 32 * MiB);  // a miss with 60 MiB reserved, over 50: the cached 30 MiB segment goes first
  EXPECT_EQ(allocator->stats().num_device_free, 1u);
  EXPECT_EQ(log.sizes(SegmentEvent::Kind::free), std::vector<Bytes>{30 * MiB});
  EXPECT_EQ(allocator->stats().reserved_bytes, 62 * MiB);
}

TEST_F(PyTorchModel, ASegmentIsOneReserveCreateMapAndAccess) {
  auto counting = std::make_unique<CountingDriver>(std::move(driver));
  CountingDriver* calls = counting.get();
  driver = std::move(counting);
  auto allocator = make();
  const Address a = alloc(*allocator, 5 * MiB);
  const CallTally& tally = calls->tally();
  EXPECT_EQ(tally.calls_of(DriverCall::reserve), 1u);
  EXPECT_EQ(tally.calls_of(DriverCall::create_chunk), 1u);
  EXPECT_EQ(tally.calls_of(DriverCall::map), 1u);
  EXPECT_EQ(tally.calls_of(DriverCall::set_access), 1u);
  release(*allocator, a);
  alloc(*allocator, 5 * MiB);
  EXPECT_EQ(tally.total_calls(), 4u) << "a cached allocation calls no driver";
  calls->reset();
  TESSERA_OK(allocator->empty_cache());
  EXPECT_EQ(tally.total_calls(), 0u) << "a live segment stays";
}

TEST_F(PyTorchModel, DriverFailuresLeaveNothingBehind) {
  auto faults = std::make_unique<FaultInjectingDriver>(std::move(driver));
  FaultInjectingDriver* inject = faults.get();
  driver = std::move(faults);
  auto allocator = make();

  inject->fail(DriverCall::map, 1);
  auto failed = allocator->allocate(5 * MiB, default_stream);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.error().code, Errc::platform) << "an error other than out of memory is passed on";
  EXPECT_EQ(driver->census().pages, 0u);
  EXPECT_EQ(driver->census().reservations, 0u);
  EXPECT_EQ(allocator->stats().reserved_bytes, 0u);

  inject->fail(DriverCall::create_chunk, 1, FaultInjectingDriver::Repeat::once, Errc::out_of_memory);
  alloc(*allocator, 5 * MiB);  // out of memory once: the ladder's retry succeeds
  EXPECT_EQ(allocator->stats().num_alloc_retries, 1u);
  EXPECT_EQ(driver->census().pages, 1u);
}

}  // namespace
}  // namespace tessera::testing
