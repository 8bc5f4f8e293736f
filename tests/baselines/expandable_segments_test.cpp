// The "expandable" model: one reservation per stream and pool, 2 MiB and 20 MiB pages, growth at the lowest
// address that fits, pages unmapped only by empty_cache and at the edge of out-of-memory.
#include <gtest/gtest.h>

#include "baselines/baseline_fixtures.hpp"

namespace tessera::testing {
namespace {

struct ExpandableModel : ::testing::Test {
  std::unique_ptr<Driver> driver = sim_driver(1 * GiB);
  SegmentLog log;

  std::unique_ptr<DeviceAllocator> make(BaselineOptions options = {}) {
    options.on_segment = log.observer();
    return make_model("expandable", *driver, options);
  }
};

TEST_F(ExpandableModel, OneReservationPerPoolWithItsPageSize) {
  auto allocator = make();
  alloc(*allocator, 1 * KiB);
  DriverCensus census = driver->census();
  EXPECT_EQ(census.reservations, 1u);
  EXPECT_EQ(census.reserved_bytes, 1152 * MiB) << "9/8 of 1 GiB in 2 MiB pages";
  EXPECT_EQ(census.pages, 1u);
  EXPECT_EQ(census.page_bytes, 2 * MiB);

  alloc(*allocator, 5 * MiB);
  census = driver->census();
  EXPECT_EQ(census.reservations, 2u);
  EXPECT_EQ(census.reserved_bytes, 1152 * MiB + 1160 * MiB) << "9/8 of 1 GiB rounded up to 20 MiB pages";
  EXPECT_EQ(census.pages, 2u);
  EXPECT_EQ(census.page_bytes, 22 * MiB);
  EXPECT_EQ(log.sizes(SegmentEvent::Kind::map), (std::vector<Bytes>{2 * MiB, 20 * MiB}));
  EXPECT_EQ(allocator->stats().num_device_alloc, 2u);
  EXPECT_EQ(allocator->stats().reserved_bytes, 22 * MiB);

  alloc(*allocator, 5 * MiB, StreamId{3});
  EXPECT_EQ(driver->census().reservations, 3u) << "another stream, another segment";
}

TEST_F(ExpandableModel, GrowsByMappingOnlyWhatIsMissing) {
  auto counting = std::make_unique<CountingDriver>(std::move(driver));
  CountingDriver* calls = counting.get();
  driver = std::move(counting);
  auto allocator = make();

  const Address a = alloc(*allocator, 30 * MiB);
  EXPECT_EQ(driver->census().page_bytes, 40 * MiB);
  EXPECT_EQ(calls->tally().calls_of(DriverCall::create_chunk), 2u);
  EXPECT_EQ(calls->tally().calls_of(DriverCall::map), 2u);
  EXPECT_EQ(calls->tally().calls_of(DriverCall::set_access), 1u) << "one set_access over the new range";

  const Address b = alloc(*allocator, 15 * MiB);  // 10 MiB free at the end, 5 MiB more mapped after it
  EXPECT_EQ(b, a + 30 * MiB);
  EXPECT_EQ(driver->census().page_bytes, 60 * MiB);
  EXPECT_EQ(log.sizes(SegmentEvent::Kind::map), (std::vector<Bytes>{40 * MiB, 20 * MiB}));

  const Address c = alloc(*allocator, 3 * MiB);  // the last 15 MiB of the mapped pages
  EXPECT_EQ(c, b + 15 * MiB);
  EXPECT_EQ(driver->census().page_bytes, 60 * MiB);
}

TEST_F(ExpandableModel, EmptyCacheUnmapsOnlyWholeFreePages) {
  auto allocator = make();
  const Address a = alloc(*allocator, 30 * MiB);  // [0, 30)
  const Address b = alloc(*allocator, 15 * MiB);  // [30, 45), pages [0, 60)
  release(*allocator, a);
  EXPECT_EQ(driver->census().page_bytes, 60 * MiB) << "a free keeps the pages";
  TESSERA_OK(allocator->empty_cache());
  EXPECT_EQ(driver->census().page_bytes, 40 * MiB) << "only page [0, 20) is wholly free";
  EXPECT_EQ(log.sizes(SegmentEvent::Kind::unmap), std::vector<Bytes>{20 * MiB});
  EXPECT_EQ(allocator->stats().num_device_free, 1u);

  EXPECT_EQ(alloc(*allocator, 20 * MiB), a) << "growth fills the lowest gap first";
  EXPECT_EQ(driver->census().page_bytes, 60 * MiB);

  release(*allocator, a);
  release(*allocator, b);
  TESSERA_OK(allocator->empty_cache());
  EXPECT_EQ(driver->census().pages, 0u);
  EXPECT_EQ(driver->census().reservations, 0u) << "an empty segment gives its reservation back";
  EXPECT_EQ(allocator->stats().reserved_bytes, 0u);
}

TEST_F(ExpandableModel, RemaindersOfAny512BytesAreSplit) {
  auto allocator = make();
  const Address a = alloc(*allocator, 20 * MiB - 512);
  EXPECT_EQ(allocator->stats().allocated_bytes, 20 * MiB - 512) << "512 B remain and are split off";
  EXPECT_EQ(alloc(*allocator, 1 * MiB + 512), a + 20 * MiB - 512) << "the remainder grows into the next page";
  EXPECT_EQ(driver->census().page_bytes, 40 * MiB);
}

TEST_F(ExpandableModel, OutOfMemoryUnmapsFreePagesOfOtherStreamsAndRetries) {
  driver = sim_driver(64 * MiB);
  auto allocator = make();
  release(*allocator, alloc(*allocator, 50 * MiB, StreamId{1}));  // three pages, 60 MiB, cached
  alloc(*allocator, 50 * MiB, StreamId{2});
  const AllocatorStats stats = allocator->stats();
  EXPECT_EQ(stats.num_alloc_retries, 1u);
  EXPECT_EQ(stats.num_sync_all_streams, 1u);
  EXPECT_EQ(stats.reserved_bytes, 60 * MiB);
  EXPECT_EQ(driver->census().page_bytes, 60 * MiB);
  EXPECT_EQ(driver->census().reservations, 1u) << "stream 1's empty segment is gone";

  auto refused = allocator->allocate(20 * MiB, StreamId{2});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, Errc::out_of_memory);
  EXPECT_EQ(allocator->stats().num_ooms, 1u);
  EXPECT_EQ(allocator->stats().reserved_bytes, driver->census().page_bytes);
}

TEST_F(ExpandableModel, RecordStreamKeepsPagesUntilTheEventCompletes) {
  StreamControl* control = driver->stream_control();
  auto allocator = make();
  const StreamId one{1};
  const StreamId two{2};
  control->hold(two);
  const Address a = alloc(*allocator, 40 * MiB, one);
  TESSERA_OK(allocator->record_stream(a, two));
  release(*allocator, a);
  TESSERA_OK(allocator->empty_cache());  // synchronizes the event, then unmaps
  EXPECT_EQ(driver->census().pages, 0u);
  control->complete(two);
}

}  // namespace
}  // namespace tessera::testing
