// The "gmlake" model: 2 MiB chunks in the large pool, stitching free blocks for requests of 512 MiB and
// more, reuse of free stitched blocks, and garbage collection of stitched ranges.
#include <gtest/gtest.h>

#include "baselines/baseline_fixtures.hpp"

namespace tessera::testing {
namespace {

struct GMLakeModel : ::testing::Test {
  std::unique_ptr<Driver> driver = sim_driver(8 * GiB);
  SegmentLog log;

  std::unique_ptr<DeviceAllocator> make(BaselineOptions options = {}) {
    options.on_segment = log.observer();
    return make_model("gmlake", *driver, options);
  }
};

TEST_F(GMLakeModel, SmallPoolIsPyTorchsAndLargeSegmentsAreChunks) {
  auto counting = std::make_unique<CountingDriver>(std::move(driver));
  CountingDriver* calls = counting.get();
  driver = std::move(counting);
  auto allocator = make();

  alloc(*allocator, 1 * KiB);
  EXPECT_EQ(log.allocs(), std::vector<Bytes>{2 * MiB});
  EXPECT_EQ(driver->census().pages, 1u);
  calls->reset();

  alloc(*allocator, 5 * MiB);
  EXPECT_EQ(log.allocs(), (std::vector<Bytes>{2 * MiB, 20 * MiB}));
  EXPECT_EQ(driver->census().pages, 11u) << "a 20 MiB segment is ten 2 MiB chunks";
  EXPECT_EQ(calls->tally().calls_of(DriverCall::create_chunk), 10u);
  EXPECT_EQ(calls->tally().calls_of(DriverCall::map), 10u);
  EXPECT_EQ(calls->tally().calls_of(DriverCall::set_access), 10u);
  EXPECT_EQ(calls->tally().calls_of(DriverCall::reserve), 1u);
}

TEST_F(GMLakeModel, LargeRequestsAreRoundedToChunksAndSplitAtChunks) {
  auto allocator = make();
  const Address a = alloc(*allocator, 5 * MiB);  // 6 MiB of a 20 MiB segment
  EXPECT_EQ(allocator->stats().allocated_bytes, 6 * MiB);
  EXPECT_EQ(alloc(*allocator, 14 * MiB), a + 6 * MiB) << "the 14 MiB remainder";
  EXPECT_EQ(log.allocs(), std::vector<Bytes>{20 * MiB});
}

TEST_F(GMLakeModel, StitchesFreeBlocksForLargeRequestsWithoutNewMemory) {
  auto allocator = make();
  const Address a = alloc(*allocator, 300 * MiB);
  const Address b = alloc(*allocator, 300 * MiB);
  release(*allocator, a);
  release(*allocator, b);
  const DriverCensus before = driver->census();

  const Address stitched = alloc(*allocator, 600 * MiB);
  EXPECT_NE(stitched, a);
  EXPECT_NE(stitched, b);
  DriverCensus census = driver->census();
  EXPECT_EQ(census.pages, before.pages) << "stitching maps the chunks that are there";
  EXPECT_EQ(census.page_bytes, 600 * MiB);
  EXPECT_EQ(census.reservations, before.reservations + 1);
  EXPECT_EQ(census.mappings, before.mappings + 300);
  EXPECT_EQ(log.allocs(), (std::vector<Bytes>{300 * MiB, 300 * MiB}));
  EXPECT_EQ(allocator->stats().allocated_bytes, 600 * MiB);
  EXPECT_EQ(allocator->stats().reserved_bytes, 600 * MiB);

  release(*allocator, stitched);
  EXPECT_EQ(alloc(*allocator, 600 * MiB), stitched) << "a free stitched block is reused";
  EXPECT_EQ(driver->census().reservations, before.reservations + 1);
  release(*allocator, stitched);

  const Address small = alloc(*allocator, 100 * MiB);  // the original blocks come first
  EXPECT_EQ(small, a);
  release(*allocator, small);

  TESSERA_OK(allocator->empty_cache());
  EXPECT_EQ(driver->census().pages, 0u);
  EXPECT_EQ(driver->census().reservations, 0u);
  EXPECT_EQ(driver->census().mappings, 0u);
}

TEST_F(GMLakeModel, StitchingCutsTheLastBlockToTheRequest) {
  auto allocator = make();
  const Address a = alloc(*allocator, 300 * MiB);
  const Address b = alloc(*allocator, 400 * MiB);
  release(*allocator, a);
  release(*allocator, b);
  alloc(*allocator, 600 * MiB);  // all of B, then 200 MiB of A
  EXPECT_EQ(alloc(*allocator, 100 * MiB), a + 200 * MiB) << "the rest of A stays free";
  EXPECT_EQ(log.allocs().size(), 2u);
}

TEST_F(GMLakeModel, RequestsUnder512MiBAreNotStitched) {
  auto allocator = make();
  const Address a = alloc(*allocator, 200 * MiB);
  const Address b = alloc(*allocator, 200 * MiB);
  release(*allocator, a);
  release(*allocator, b);
  alloc(*allocator, 300 * MiB);
  EXPECT_EQ(log.allocs(), (std::vector<Bytes>{200 * MiB, 200 * MiB, 300 * MiB}));
}

TEST_F(GMLakeModel, AFreeStitchedBlockServesSmallerRequestsWithTheChunksTheyNeed) {
  auto allocator = make();
  const Address a = alloc(*allocator, 300 * MiB);
  const Address b = alloc(*allocator, 300 * MiB);
  release(*allocator, a);
  release(*allocator, b);
  const Address stitched = alloc(*allocator, 600 * MiB);
  release(*allocator, stitched);

  EXPECT_EQ(alloc(*allocator, 550 * MiB), stitched) << "no original block fits; the stitched one is within 10x";
  EXPECT_EQ(allocator->stats().allocated_bytes, 550 * MiB);
  // The stitched block takes B (taken first when it was made) and the front of A.
  EXPECT_EQ(alloc(*allocator, 50 * MiB), a + 250 * MiB) << "the 25 chunks it does not need stay free";
  EXPECT_EQ(log.allocs().size(), 2u);
  EXPECT_EQ(driver->census().page_bytes, 600 * MiB);
}

TEST_F(GMLakeModel, ReuseLimitBoundsTheStitchedBlockForARequest) {
  for (const double limit : {10.0, 1.5}) {
    log.events.clear();
    BaselineOptions options;
    options.gmlake.fragment_limit = 64 * MiB;
    options.gmlake.reuse_limit = limit;
    auto allocator = make(options);
    const Address a = alloc(*allocator, 40 * MiB);
    const Address b = alloc(*allocator, 40 * MiB);
    release(*allocator, a);
    release(*allocator, b);
    const Address stitched = alloc(*allocator, 80 * MiB);
    release(*allocator, stitched);
    const Address next = alloc(*allocator, 42 * MiB);
    if (limit == 10.0) {
      EXPECT_EQ(next, stitched);
      EXPECT_EQ(log.allocs().size(), 2u);
    } else {
      EXPECT_NE(next, stitched) << "80 MiB is more than 1.5 x 42 MiB";
      EXPECT_EQ(log.allocs().size(), 3u);
    }
  }
}

TEST_F(GMLakeModel, GarbageCollectionFreesStitchedRangesNotChunks) {
  auto allocator = make();
  const Address a = alloc(*allocator, 300 * MiB);
  const Address b = alloc(*allocator, 300 * MiB);
  const Address keep = alloc(*allocator, 2 * MiB);  // keeps a third segment, and so its chunks, alive
  release(*allocator, a);
  release(*allocator, b);
  const Address stitched = alloc(*allocator, 600 * MiB);
  release(*allocator, stitched);
  const Address piece = alloc(*allocator, 100 * MiB);  // takes chunks of A: the stitched block is fragmented
  EXPECT_EQ(piece, a);
  const DriverCensus before = driver->census();
  TESSERA_OK(allocator->empty_cache());  // B is released (whole); the stitched range goes with it
  const DriverCensus after = driver->census();
  EXPECT_EQ(after.reservations, before.reservations - 2);
  EXPECT_EQ(after.page_bytes, before.page_bytes - 300 * MiB);
  release(*allocator, piece);
  release(*allocator, keep);
  TESSERA_OK(allocator->empty_cache());
  EXPECT_EQ(driver->census().pages, 0u);
}

TEST_F(GMLakeModel, AStitchedBlockThatLostItsTailIsDeletedAtItsFree) {
  auto allocator = make();
  const Address a = alloc(*allocator, 200 * MiB);
  const Address b = alloc(*allocator, 300 * MiB);
  const Address c = alloc(*allocator, 300 * MiB);
  for (Address block : {a, b, c}) release(*allocator, block);
  const Address stitched = alloc(*allocator, 800 * MiB);  // C, B, then A: largest first
  release(*allocator, stitched);
  EXPECT_EQ(alloc(*allocator, 600 * MiB), stitched) << "needs C and B only: A stays free and whole";
  TESSERA_OK(allocator->empty_cache());  // A's segment goes; the stitched block loses its tail mappings
  EXPECT_EQ(driver->census().page_bytes, 600 * MiB);
  EXPECT_EQ(driver->census().reservations, 3u);
  release(*allocator, stitched);
  EXPECT_EQ(driver->census().reservations, 2u) << "the stitched range is gone at its free";
  TESSERA_OK(allocator->empty_cache());
  EXPECT_EQ(driver->census().pages, 0u);
  EXPECT_EQ(driver->census().reservations, 0u);
}

TEST_F(GMLakeModel, EveryFreeRecordsAnEvent) {
  auto counting = std::make_unique<CountingDriver>(std::move(driver));
  CountingDriver* calls = counting.get();
  driver = std::move(counting);
  auto allocator = make();
  for (int i = 0; i < 3; ++i) release(*allocator, alloc(*allocator, 1 * MiB));
  EXPECT_EQ(calls->tally().calls_of(DriverCall::record_event), 3u);
  EXPECT_EQ(calls->tally().calls_of(DriverCall::create_event), 1u) << "the block's event is recorded again";
}

}  // namespace
}  // namespace tessera::testing
