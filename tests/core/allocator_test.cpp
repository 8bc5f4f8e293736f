// The allocator's policy, one named piece at a time, on the host driver (real memory) with small granules.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "tessera/allocator.hpp"
#include "tessera/driver_decorators.hpp"
#include "tessera/drivers.hpp"
#include "support/must.hpp"

namespace tessera {
namespace {

constexpr Bytes granule = 64 * KiB;

using test_support::must;

// host driver → fault injector → counter → allocator.
class AllocatorTest : public ::testing::Test {
 protected:
  void make(Bytes capacity, AllocatorConfig config = {}) {
    auto faults = std::make_unique<FaultInjectingDriver>(
        must(make_host_driver({.capacity = capacity, .granularity = granule})));
    faults_ = faults.get();
    driver_ = std::make_unique<CountingDriver>(std::move(faults));
    allocator_ = must(make_tessera_allocator(*driver_, config));
  }

  void TearDown() override {
    if (allocator_) {
      EXPECT_EQ(allocator_->check(), std::nullopt);
      EXPECT_EQ(driver_->census().page_bytes, allocator_->stats().reserved_bytes)
          << "the driver holds pages the allocator does not know";
    }
  }

  void fill(Address at, Bytes size, unsigned char seed) {
    std::vector<unsigned char> bytes(size);
    for (Bytes i = 0; i < size; ++i) bytes[i] = static_cast<unsigned char>(seed + i * 31);
    must(driver_->write(at, bytes.data(), size));
  }

  bool holds(Address at, Bytes size, unsigned char seed) {
    std::vector<unsigned char> bytes(size);
    must(driver_->read(at, bytes.data(), size));
    for (Bytes i = 0; i < size; ++i) {
      if (bytes[i] != static_cast<unsigned char>(seed + i * 31)) return false;
    }
    return true;
  }

  FaultInjectingDriver* faults_ = nullptr;
  std::unique_ptr<CountingDriver> driver_;
  std::unique_ptr<TesseraAllocator> allocator_;
};

TEST_F(AllocatorTest, RoundsTo512BytesAndCountsRequestedAndAllocated) {
  make(4 * MiB);
  const Address a = must(allocator_->allocate(1, default_stream));
  const Address b = must(allocator_->allocate(513, default_stream));
  EXPECT_NE(a, b);
  const AllocatorStats stats = allocator_->stats();
  EXPECT_EQ(stats.requested_bytes, 514u);
  EXPECT_EQ(stats.allocated_bytes, 512u + 1024u);
  EXPECT_EQ(allocator_->tessera_stats().mapped_bytes, granule) << "both fit in one small-pool page";
  EXPECT_EQ(stats.reserved_bytes, 2 * granule) << "and its chunk grew by as much again, pooled";
  must(allocator_->deallocate(a));
  must(allocator_->deallocate(b));
  EXPECT_EQ(allocator_->stats().allocated_bytes, 0u);
  EXPECT_EQ(allocator_->stats().peak_allocated_bytes, 1536u);
}

TEST_F(AllocatorTest, PowerOfTwoDivisionsRoundLikePyTorch) {
  make(64 * MiB, must(parse_allocator_config("roundup_power2_divisions:4")));
  // 1100 KiB lies between 1 MiB and 2 MiB, whose quarters are 256 KiB: it rounds up to 1280 KiB.
  const Address block = must(allocator_->allocate(1100 * KiB, default_stream));
  EXPECT_EQ(allocator_->stats().allocated_bytes, 1280 * KiB);
  must(allocator_->deallocate(block));
}

TEST_F(AllocatorTest, AFreedBlockIsReusedAtOnceWithNoDriverCall) {
  make(16 * MiB);
  const Address first = must(allocator_->allocate(3 * granule, default_stream));
  must(allocator_->deallocate(first));
  const std::uint64_t calls = driver_->tally().total_calls();
  const Address second = must(allocator_->allocate(3 * granule, default_stream));
  EXPECT_EQ(second, first);
  EXPECT_EQ(driver_->tally().total_calls(), calls) << "cached memory needs no driver call";
  must(allocator_->deallocate(second));
}

// A large arena grows down and takes a good fit: of the free blocks that hold the request and are at most
// twice the best fit's size, the highest, carved at its high end. One larger still, higher up, is not taken.
TEST_F(AllocatorTest, ALargeRequestTakesTheHighestFreeBlockUpToTwiceTheBestFit) {
  make(64 * granule, must(parse_allocator_config("small_max_kb:32")));
  std::vector<Address> order;
  for (const std::size_t granules : {1, 5, 1, 3, 1, 2, 1}) {
    order.push_back(must(allocator_->allocate(granules * granule, default_stream)));
  }
  for (std::size_t i = 1; i < order.size(); ++i) ASSERT_LT(order[i], order[i - 1]) << "it grows down";
  const Address five = order[1], three = order[3], two = order[5];
  for (const Address hole : {five, three, two}) must(allocator_->deallocate(hole));
  const std::uint64_t calls = driver_->tally().total_calls();
  const Address taken = must(allocator_->allocate(2 * granule, default_stream));
  EXPECT_EQ(taken, three + granule) << "the three-granule hole, at its high end; not the best fit (" << std::hex
                                     << two << ") nor the five-granule hole above (" << five << ")";
  EXPECT_EQ(driver_->tally().total_calls(), calls) << "cached memory";
  EXPECT_EQ(allocator_->check(), std::nullopt);
}

TEST_F(AllocatorTest, SmallAndLargeRequestsLiveInSeparatePools) {
  make(16 * MiB, must(parse_allocator_config("small_max_kb:64")));
  const Address small = must(allocator_->allocate(4 * KiB, default_stream));
  const Address large = must(allocator_->allocate(256 * KiB, default_stream));
  const AllocatorSnapshot snapshot = allocator_->snapshot();
  ASSERT_EQ(snapshot.segments.size(), 2u);
  for (const SnapshotSegment& segment : snapshot.segments) {
    const Address expected = segment.pool == SizePool::small ? small : large;
    std::vector<Address> allocated;
    for (const SnapshotBlock& block : segment.blocks) {
      if (block.state == SnapshotBlock::State::active_allocated) allocated.push_back(block.address);
    }
    EXPECT_EQ(allocated, std::vector<Address>{expected});
  }
  // The small pool grows up from its region's start, the large pool down from its region's end.
  for (const SnapshotSegment& segment : snapshot.segments) {
    if (segment.pool == SizePool::small) {
      EXPECT_EQ(small, segment.address);
    } else {
      EXPECT_EQ(large + 256 * KiB, segment.address + segment.total_size);
    }
  }
  must(allocator_->deallocate(small));
  must(allocator_->deallocate(large));
}

TEST_F(AllocatorTest, FreeNeighboursMerge) {
  make(16 * MiB);
  const Address a = must(allocator_->allocate(2 * granule, default_stream));
  const Address b = must(allocator_->allocate(2 * granule, default_stream));
  const Address c = must(allocator_->allocate(2 * granule, default_stream));
  ASSERT_EQ(b, a + 2 * granule);
  must(allocator_->deallocate(a));
  must(allocator_->deallocate(b));
  const AllocatorSnapshot snapshot = allocator_->snapshot();
  const auto& blocks = snapshot.segments.at(0).blocks;
  ASSERT_GE(blocks.size(), 2u);
  EXPECT_EQ(blocks[0].address, a);
  EXPECT_EQ(blocks[0].size, 4 * granule) << "a and b merged";
  EXPECT_EQ(blocks[0].state, SnapshotBlock::State::inactive);
  EXPECT_EQ(must(allocator_->allocate(4 * granule, default_stream)), a);
  must(allocator_->deallocate(a));
  must(allocator_->deallocate(c));
}

TEST_F(AllocatorTest, ScatteredFreePagesAreStitchedIntoOneBlockWithoutTouchingLiveData) {
  make(8 * granule);
  std::vector<Address> blocks;
  for (int i = 0; i < 4; ++i) {
    blocks.push_back(must(allocator_->allocate(2 * granule, default_stream)));
    fill(blocks.back(), 2 * granule, static_cast<unsigned char>(i));
  }
  EXPECT_EQ(allocator_->stats().reserved_bytes, 8 * granule) << "the device is full";
  must(allocator_->deallocate(blocks[1]));
  must(allocator_->deallocate(blocks[3]));

  // Two holes of two granules, not neighbours; four granules asked for.
  const Address stitched = must(allocator_->allocate(4 * granule, default_stream));
  fill(stitched, 4 * granule, 9);
  const TesseraStats stats = allocator_->tessera_stats();
  EXPECT_EQ(stats.common.reserved_bytes, 8 * granule) << "no page beyond the capacity";
  EXPECT_GE(stats.pages_stitched, 2u);
  EXPECT_GE(stats.syncs, 1u) << "pages are unmapped only after proving the stream idle";
  EXPECT_TRUE(holds(blocks[0], 2 * granule, 0));
  EXPECT_TRUE(holds(blocks[2], 2 * granule, 2));
  EXPECT_TRUE(holds(stitched, 4 * granule, 9));
  for (Address block : {blocks[0], blocks[2], stitched}) must(allocator_->deallocate(block));
}

TEST_F(AllocatorTest, OutOfMemoryIsATypedAnswerWithTheFiguresAndChangesNothing) {
  make(8 * granule);
  const Address live = must(allocator_->allocate(6 * granule, default_stream));
  fill(live, 6 * granule, 5);
  auto refused = allocator_->allocate(4 * granule, default_stream);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, Errc::out_of_memory);
  const std::string& message = refused.error().message;
  EXPECT_NE(message.find(std::to_string(4 * granule)), std::string::npos) << message;
  EXPECT_NE(message.find("allocated"), std::string::npos) << message;
  EXPECT_NE(message.find("reserved"), std::string::npos) << message;
  EXPECT_NE(message.find("free on the device"), std::string::npos) << message;
  EXPECT_EQ(allocator_->check(), std::nullopt);
  EXPECT_EQ(allocator_->stats().num_ooms, 1u);
  EXPECT_EQ(allocator_->stats().num_alloc_retries, 1u);
  EXPECT_TRUE(holds(live, 6 * granule, 5));
  const Address fits = must(allocator_->allocate(2 * granule, default_stream));
  must(allocator_->deallocate(fits));
  must(allocator_->deallocate(live));
}

TEST_F(AllocatorTest, BadRequestsAreNamedErrorsAndChangeNothing) {
  make(8 * granule);
  auto zero = allocator_->allocate(0, default_stream);
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.error().code, Errc::invalid_argument);
  auto huge = allocator_->allocate(~Bytes{0} - 3, default_stream);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.error().code, Errc::out_of_memory);
  const Address block = must(allocator_->allocate(100, default_stream));
  must(allocator_->deallocate(block));
  auto twice = allocator_->deallocate(block);
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(twice.error().code, Errc::not_found);
  EXPECT_NE(twice.error().message.find("double free"), std::string::npos);
  auto foreign = allocator_->deallocate(0x1234);
  ASSERT_FALSE(foreign.ok());
  EXPECT_EQ(foreign.error().code, Errc::not_found);
  auto record = allocator_->record_stream(0x1234, StreamId{3});
  ASSERT_FALSE(record.ok());
  EXPECT_EQ(allocator_->stats().allocated_bytes, 0u);
}

TEST_F(AllocatorTest, ABlockUsedByAnotherStreamWaitsForThatStreamBeforeReuse) {
  make(16 * MiB);
  StreamControl* streams = driver_->stream_control();
  ASSERT_NE(streams, nullptr);
  const StreamId other{5};
  const Address block = must(allocator_->allocate(2 * granule, default_stream));
  must(allocator_->record_stream(block, other));
  streams->hold(other);
  must(allocator_->deallocate(block));
  EXPECT_EQ(allocator_->snapshot().segments.at(0).blocks.at(0).state, SnapshotBlock::State::active_pending_free);

  const Address meanwhile = must(allocator_->allocate(2 * granule, default_stream));
  EXPECT_NE(meanwhile, block) << "reused while the other stream may still use it";
  streams->complete(other);
  const Address later = must(allocator_->allocate(2 * granule, default_stream));
  EXPECT_EQ(later, block) << "reusable once the other stream's work is done";
  must(allocator_->deallocate(meanwhile));
  must(allocator_->deallocate(later));
}

TEST_F(AllocatorTest, StreamsDoNotShareCachedBlocks) {
  make(16 * MiB);
  const Address on_default = must(allocator_->allocate(2 * granule, default_stream));
  must(allocator_->deallocate(on_default));
  const Address on_other = must(allocator_->allocate(2 * granule, StreamId{9}));
  EXPECT_NE(on_other, on_default);
  must(allocator_->deallocate(on_other));
}

TEST_F(AllocatorTest, EmptyCacheGivesEveryIdlePageBack) {
  make(16 * MiB, must(parse_allocator_config("small_max_kb:64")));  // the 3-granule block is large, aligned
  std::vector<Address> blocks;
  for (Bytes size : {3 * granule, 100 * KiB, 7 * granule, 1 * KiB}) {
    blocks.push_back(must(allocator_->allocate(size, default_stream)));
  }
  const Address keep = blocks[0];
  for (Address block : blocks) {
    if (block != keep) must(allocator_->deallocate(block));
  }
  must(allocator_->empty_cache());
  EXPECT_EQ(allocator_->tessera_stats().mapped_bytes, 3 * granule) << "only the live block's pages stay mapped";
  EXPECT_EQ(driver_->census().pages, 1u) << "and only its chunk stays (its surplus pooled: it goes back whole)";
  EXPECT_EQ(allocator_->stats().reserved_bytes, driver_->census().page_bytes);
  must(allocator_->deallocate(keep));
  must(allocator_->empty_cache());
  EXPECT_EQ(allocator_->stats().reserved_bytes, 0u);
  EXPECT_EQ(driver_->census().pages, 0u);
}

TEST_F(AllocatorTest, MemoryFractionLimitsWhatMayBeHeld) {
  make(16 * granule);
  EXPECT_FALSE(allocator_->set_memory_fraction(0.0).ok());
  EXPECT_FALSE(allocator_->set_memory_fraction(1.5).ok());
  must(allocator_->set_memory_fraction(0.5));
  const Address half = must(allocator_->allocate(8 * granule, default_stream));
  auto over = allocator_->allocate(granule, default_stream);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.error().code, Errc::out_of_memory);
  must(allocator_->deallocate(half));
}

// With one chunk per page (chunk_max_mb:0) every idle page can go back on its own.
TEST_F(AllocatorTest, GarbageCollectionKeepsTheFootprintUnderTheThreshold) {
  make(16 * granule, must(parse_allocator_config("garbage_collection_threshold:0.5,chunk_max_mb:0")));
  for (int round = 0; round < 3; ++round) {
    const Address a = must(allocator_->allocate(5 * granule, default_stream));
    must(allocator_->deallocate(a));
    const Address b = must(allocator_->allocate(2 * granule, StreamId{4}));
    must(allocator_->deallocate(b));
    const Address c = must(allocator_->allocate(6 * granule, StreamId{8}));
    EXPECT_LE(allocator_->stats().reserved_bytes, 8 * granule) << "round " << round;
    must(allocator_->deallocate(c));
  }
}

// With chunks, a block's pages come from one create call, are mapped one by one, and go back to the
// device with their chunk once all of it is idle: garbage collection gives back whole idle chunks.
TEST_F(AllocatorTest, ABlocksPagesComeFromOneChunkThatGoesBackWhenAllOfItIsIdle) {
  make(16 * granule, must(parse_allocator_config("garbage_collection_threshold:0.5,chunk_max_mb:1")));
  const Address a = must(allocator_->allocate(5 * granule, default_stream));
  EXPECT_EQ(driver_->tally().calls_of(DriverCall::create_chunk), 1u) << "one chunk for five pages";
  EXPECT_EQ(driver_->tally().calls_of(DriverCall::map), 5u) << "each page mapped on its own";
  EXPECT_EQ(driver_->census().mappings, 5u);
  fill(a, 5 * granule, 7);
  EXPECT_TRUE(holds(a, 5 * granule, 7));
  must(allocator_->deallocate(a));
  // 6 more on another stream: 11 held, past the threshold of 8: a's idle chunk goes back whole.
  const Address b = must(allocator_->allocate(6 * granule, StreamId{4}));
  EXPECT_LE(allocator_->stats().reserved_bytes, 8 * granule);
  EXPECT_EQ(allocator_->stats().num_device_free, 1u);
  // A chunk larger than chunk_max is never made: 20 granules of 64 KiB in chunks of at most 16.
  must(allocator_->deallocate(b));
  must(allocator_->empty_cache());
  const std::uint64_t created = driver_->tally().calls_of(DriverCall::create_chunk);
  const Address c = must(allocator_->allocate(16 * granule, default_stream));
  EXPECT_EQ(driver_->tally().calls_of(DriverCall::create_chunk), created + 1);
  must(allocator_->deallocate(c));
}

// A chunk partly under a live block stays; its idle pages are still reused by other blocks (stitched).
TEST_F(AllocatorTest, APartlyLiveChunkStaysButItsIdlePagesMove) {
  make(8 * granule, must(parse_allocator_config("chunk_max_mb:1")));
  const Address a = must(allocator_->allocate(6 * granule, default_stream));  // one chunk of 6
  must(allocator_->deallocate(a));
  const Address head = must(allocator_->allocate(2 * granule, default_stream));  // the front of a's pages
  must(allocator_->empty_cache());
  EXPECT_EQ(allocator_->stats().reserved_bytes, 6 * granule) << "the chunk is partly live: it stays";
  EXPECT_EQ(driver_->census().mappings, 2u) << "its idle pages were unmapped into the pool";
  fill(head, 2 * granule, 3);
  // 6 granules on another stream: the 4 pooled pages of the chunk and 2 new ones.
  const Address other = must(allocator_->allocate(6 * granule, StreamId{1}));
  EXPECT_LE(allocator_->stats().reserved_bytes, 8 * granule);
  EXPECT_TRUE(holds(head, 2 * granule, 3));
  must(allocator_->deallocate(other));
  must(allocator_->deallocate(head));
  must(allocator_->empty_cache());
  EXPECT_EQ(allocator_->stats().reserved_bytes, 0u);
}

TEST_F(AllocatorTest, AFailingMapDuringAllocationLosesNothing) {
  make(16 * granule);  // one page per granule: four maps
  faults_->fail(DriverCall::map, 2);
  auto failed = allocator_->allocate(4 * granule, default_stream);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.error().code, Errc::platform);
  EXPECT_EQ(allocator_->check(), std::nullopt);
  EXPECT_EQ(driver_->census().mappings, 0u) << "a half-built block keeps no mapping";
  const Address block = must(allocator_->allocate(4 * granule, default_stream));
  fill(block, 4 * granule, 1);
  EXPECT_TRUE(holds(block, 4 * granule, 1));
  must(allocator_->deallocate(block));
}

TEST_F(AllocatorTest, AFailingSetAccessDuringAllocationLosesNothing) {
  make(16 * granule);
  faults_->fail(DriverCall::set_access, 1);
  auto failed = allocator_->allocate(3 * granule, default_stream);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(allocator_->check(), std::nullopt);
  EXPECT_EQ(driver_->census().mappings, 0u);
  must(allocator_->deallocate(must(allocator_->allocate(3 * granule, default_stream))));
}

TEST_F(AllocatorTest, WithLargePagesTheInsideOfALargeBlockIsOnePage) {
  make(64 * granule, must(parse_allocator_config("small_max_kb:64,page_max_mb:32")));
  const Address block = must(allocator_->allocate(10 * granule, default_stream));
  EXPECT_EQ(driver_->tally().calls_of(DriverCall::create_chunk), 1u) << "one page for the whole block";
  EXPECT_EQ(driver_->tally().calls_of(DriverCall::map), 1u);
  EXPECT_EQ(driver_->tally().calls_of(DriverCall::set_access), 1u);
  fill(block, 10 * granule, 3);
  EXPECT_TRUE(holds(block, 10 * granule, 3));
  must(allocator_->deallocate(block));
}

// Far from the limit, the granules only one block touches are mapped with one call (one page); the data
// survives, and the page goes back whole once all of it is idle.
TEST_F(AllocatorTest, FarFromTheLimitALargeBlocksOwnGranulesAreOneMapping) {
  make(256 * granule, must(parse_allocator_config("small_max_kb:64")));
  const Address block = must(allocator_->allocate(20 * granule, default_stream));
  EXPECT_EQ(driver_->tally().calls_of(DriverCall::create_chunk), 1u);
  // The chunk grew past the block: five of its granules are mapped ahead below it, one call each, under
  // the same set-access call (page_backing.cpp, map_ahead).
  EXPECT_EQ(driver_->tally().calls_of(DriverCall::map), 1u + 5u) << "twenty granules of one chunk, one call";
  EXPECT_EQ(driver_->tally().calls_of(DriverCall::set_access), 1u);
  fill(block, 20 * granule, 5);
  EXPECT_TRUE(holds(block, 20 * granule, 5));
  must(allocator_->deallocate(block));
  const Address smaller = must(allocator_->allocate(4 * granule, default_stream));
  EXPECT_EQ(driver_->tally().calls_of(DriverCall::map), 1u + 5u) << "cached: inside the freed block's page";
  must(allocator_->deallocate(smaller));
  EXPECT_EQ(allocator_->check(), std::nullopt);
  must(allocator_->empty_cache());
  EXPECT_EQ(driver_->census().pages, 0u) << "the page and its chunk went back whole";
  EXPECT_EQ(driver_->census().mappings, 0u);
}

// Far from the limit (at most 1/32 of it held) the pooled granules mapped ahead below a block are one run,
// mapped with one call (page_backing.cpp, map_ahead). A run goes back only whole: a block carved over part
// of it keeps it mapped through empty_cache, and every block on it keeps its bytes.
TEST_F(AllocatorTest, FarFromTheLimitGranulesMappedAheadAreOneRunThatGoesBackWhole) {
  make(1024 * granule, must(parse_allocator_config("small_max_kb:64")));  // 1/32 of it: 32 granules
  const Address first = must(allocator_->allocate(8 * granule, default_stream));
  EXPECT_EQ(allocator_->stats().reserved_bytes, 16 * granule) << "the chunk grew by as much again";
  EXPECT_EQ(driver_->tally().calls_of(DriverCall::map), 8u + 1u) << "the block's granules, then four below as one";
  EXPECT_EQ(driver_->tally().calls_of(DriverCall::set_access), 1u);
  fill(first, 8 * granule, 1);
  const std::uint64_t calls = driver_->tally().total_calls();
  const Address second = must(allocator_->allocate(4 * granule, default_stream));
  EXPECT_EQ(second, first - 4 * granule) << "carved at the frontier, over the run";
  EXPECT_EQ(driver_->tally().total_calls(), calls) << "its pages were mapped ahead";
  fill(second, 4 * granule, 2);
  must(allocator_->deallocate(second));
  const Address part = must(allocator_->allocate(2 * granule, default_stream));
  EXPECT_EQ(part, first - 2 * granule) << "the top of the freed run";
  fill(part, 2 * granule, 3);
  must(allocator_->empty_cache());
  EXPECT_EQ(driver_->tally().calls_of(DriverCall::unmap), 0u) << "the run is partly live: it stays mapped whole";
  EXPECT_TRUE(holds(first, 8 * granule, 1));
  EXPECT_TRUE(holds(part, 2 * granule, 3));
  EXPECT_EQ(allocator_->check(), std::nullopt);
  must(allocator_->deallocate(part));
  must(allocator_->empty_cache());
  EXPECT_EQ(driver_->census().mappings, 8u) << "only the live block's granule pages stay mapped";
  EXPECT_TRUE(holds(first, 8 * granule, 1));
  must(allocator_->deallocate(first));
  must(allocator_->empty_cache());
  EXPECT_EQ(driver_->census().pages, 0u);
  EXPECT_EQ(driver_->census().mappings, 0u);
}

TEST_F(AllocatorTest, WithLargePagesGrowthMapsAheadWhileThereIsRoom) {
  make(64 * granule, must(parse_allocator_config("small_max_kb:32,page_max_mb:1")));  // pages of 16 granules
  const Address first = must(allocator_->allocate(3 * granule, default_stream));
  EXPECT_EQ(allocator_->stats().reserved_bytes, 16 * granule) << "one page runs on past the block";
  const std::uint64_t calls = driver_->tally().total_calls();
  const Address second = must(allocator_->allocate(5 * granule, default_stream));
  EXPECT_EQ(second, first + 3 * granule);
  EXPECT_EQ(driver_->tally().total_calls(), calls) << "the next block found its page already mapped";
  must(allocator_->deallocate(first));
  must(allocator_->deallocate(second));
}

TEST_F(AllocatorTest, ALargePageGoesBackOnlyWhenAllOfItIsIdle) {
  make(64 * granule, must(parse_allocator_config("small_max_kb:64,page_max_mb:32")));
  const Address first = must(allocator_->allocate(8 * granule, default_stream));
  const Bytes page = allocator_->stats().reserved_bytes;  // the block's page, run on past it while there is room
  ASSERT_GE(page, 8 * granule);
  must(allocator_->deallocate(first));
  const Address part = must(allocator_->allocate(2 * granule, default_stream));
  ASSERT_EQ(part, first) << "best fit reuses the front of the cached block";
  must(allocator_->empty_cache());
  EXPECT_EQ(allocator_->stats().reserved_bytes, page) << "the live block pins its whole page";
  must(allocator_->deallocate(part));
  must(allocator_->empty_cache());
  EXPECT_EQ(allocator_->stats().reserved_bytes, 0u);
}

TEST_F(AllocatorTest, NearTheLimitPooledPagesTooLargeForTheHoleAreTradedForGranulePages) {
  make(8 * granule, must(parse_allocator_config("small_max_kb:64,page_max_mb:32")));
  const Address big = must(allocator_->allocate(6 * granule, default_stream));  // one page of 6
  const Address small = must(allocator_->allocate(2 * granule, StreamId{1}));    // one page of 2
  must(allocator_->deallocate(big));
  must(allocator_->empty_cache());  // the 6-granule page goes back; 6 granules are free on the device
  const Address other = must(allocator_->allocate(3 * granule + 100, StreamId{1}));
  fill(other, 3 * granule + 100, 4);
  EXPECT_TRUE(holds(other, 3 * granule + 100, 4));
  EXPECT_LE(allocator_->stats().reserved_bytes, 8 * granule);
  must(allocator_->deallocate(small));
  must(allocator_->deallocate(other));
}

TEST(AllocatorConfig, ParsesEveryKeyAndNamesTheBadOne) {
  const AllocatorConfig config = must(parse_allocator_config(
      " garbage_collection_threshold:0.8, roundup_power2_divisions:8,small_max_kb:512,reclaim:never,virtual_factor:4"));
  EXPECT_DOUBLE_EQ(config.garbage_collection_threshold, 0.8);
  EXPECT_EQ(config.roundup_power2_divisions, 8u);
  EXPECT_EQ(config.small_max, 512 * KiB);
  EXPECT_EQ(config.reclaim, AllocatorConfig::Reclaim::never);
  EXPECT_EQ(config.virtual_factor, 4u);
  EXPECT_EQ(must(parse_allocator_config("")), AllocatorConfig{});

  const std::vector<std::pair<std::string, std::string>> bad = {
      {"max_split_size_mb:100", "max_split_size_mb"},
      {"garbage_collection_threshold:1.5", "garbage_collection_threshold"},
      {"garbage_collection_threshold:abc", "garbage_collection_threshold"},
      {"roundup_power2_divisions:3", "roundup_power2_divisions"},
      {"small_max_kb:1", "small_max_kb"},
      {"page_max_mb:4096", "page_max_mb"},
      {"reclaim:maybe", "reclaim"},
      {"reclaim:first,reclaim:never", "reclaim"},
      {"virtual_factor", "virtual_factor"},
      {"reclaim:first,,virtual_factor:2", "empty"},
  };
  for (const auto& [text, named] : bad) {
    auto parsed = parse_allocator_config(text);
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_EQ(parsed.error().code, Errc::invalid_argument);
    EXPECT_NE(parsed.error().message.find(named), std::string::npos) << parsed.error().message;
  }
}

TEST(AllocatorConfig, ComesFromTheEnvironment) {
  setenv("TESSERA_ALLOC_CONF", "small_max_kb:256", 1);
  EXPECT_EQ(must(allocator_config_from_environment()).small_max, 256 * KiB);
  setenv("TESSERA_ALLOC_CONF", "colour:blue", 1);
  auto bad = allocator_config_from_environment();
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("TESSERA_ALLOC_CONF"), std::string::npos);
  EXPECT_NE(bad.error().message.find("colour"), std::string::npos);
  unsetenv("TESSERA_ALLOC_CONF");
  EXPECT_EQ(must(allocator_config_from_environment()), AllocatorConfig{});
}

// The destructor gives each chunk back once, after all its pages are unmapped (found in review: it released
// a chunk once per mapped page, while other parts of it were still mapped, and once more from the pool).
TEST(AllocatorTeardown, EachChunkGoesBackOnceAfterAllItsPagesAreUnmapped) {
  CountingDriver counting(must(make_host_driver({.capacity = 4 * MiB, .granularity = granule})));
  {
    auto allocator = must(make_tessera_allocator(counting));
    (void)must(allocator->allocate(3 * granule, default_stream));  // one chunk, three pages, grown by three
    (void)must(allocator->allocate(700, StreamId{2}));            // a page of its surplus, in the small pool
    ASSERT_EQ(counting.tally().calls_of(DriverCall::create_chunk), 1u);
    ASSERT_EQ(counting.census().mappings, 4u) << "one chunk mapped in two regions";
    counting.reset();
  }
  EXPECT_EQ(counting.census(), DriverCensus{}) << "everything went back";
  EXPECT_EQ(counting.tally().calls_of(DriverCall::release_chunk), 1u);
  EXPECT_EQ(counting.tally().failures_of(DriverCall::release_chunk), 0u);
}

// pages_stitched counts the pages that reclaim moved in this call, not every page of the same chunk (found
// in review: with chunks it matched on the chunk's id).
TEST(AllocatorStitchCount, OnlyPagesReclaimTookInThisCallCount) {
  CountingDriver counting(must(make_host_driver({.capacity = 4 * granule, .granularity = granule})));
  auto allocator = must(make_tessera_allocator(counting));
  const Address a = must(allocator->allocate(4 * granule, default_stream));  // one chunk of 4: the device is full
  must(allocator->deallocate(a));
  const Address front = must(allocator->allocate(granule, default_stream));  // slot 0 of the chunk
  ASSERT_EQ(front, a);
  ASSERT_FALSE(allocator->allocate(4 * granule, StreamId{1}).ok());  // reclaims 3 idle pages, then out of memory
  ASSERT_EQ(allocator->tessera_stats().pooled_bytes, 3 * granule);
  must(allocator->deallocate(front));
  const TesseraStats before = allocator->tessera_stats();
  const Address b = must(allocator->allocate(4 * granule, StreamId{1}));  // 3 pooled pages, 1 reclaimed now
  const TesseraStats after = allocator->tessera_stats();
  ASSERT_EQ(after.pages_reclaimed - before.pages_reclaimed, 1u);
  EXPECT_EQ(after.pages_stitched - before.pages_stitched, 1u);
  EXPECT_EQ(allocator->check(), std::nullopt);
  must(allocator->deallocate(b));
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// A capacity whose regions cannot fit in the address space: the request is out of memory, and the message
// says it is the virtual space (and what sized it), not the device's memory.
TEST(AllocatorAddressSpace, ARegionBeyondTheAddressSpaceIsNamedAsSuch) {
  auto driver = test_support::must(make_host_driver({.capacity = Bytes{64} << 40, .granularity = granule}));
  auto allocator = test_support::must(make_tessera_allocator(*driver));
  auto refused = allocator->allocate(1, default_stream);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, Errc::out_of_memory);
  EXPECT_NE(refused.error().message.find("no virtual address space for a new region"), std::string::npos)
      << refused.error().message;
  EXPECT_NE(refused.error().message.find("virtual_factor 2"), std::string::npos) << refused.error().message;
  EXPECT_EQ(allocator->check(), std::nullopt);
  EXPECT_EQ(driver->census(), DriverCensus{});
}

// A small request whose fit is a hole that the largest request fits, and carved would not, goes to the
// frontier while its pages there are pooled, far from the limit (tessera_allocator.cpp, spare_hole): the
// next large request then takes the hole and creates nothing. The sim driver: blocks of hundreds of MiB.
// sim driver → fault injector → counter → allocator.
struct SparedHole {
  static constexpr Bytes sim_granule = 2 * MiB;
  FaultInjectingDriver* faults;
  CountingDriver driver;
  std::unique_ptr<TesseraAllocator> allocator;
  Address top = 0, hole = 0, bottom = 0;

  static std::unique_ptr<Driver> injecting(Bytes capacity, FaultInjectingDriver*& faults) {
    auto injector = std::make_unique<FaultInjectingDriver>(
        must(make_sim_driver({.capacity = capacity, .granularity = sim_granule})).driver);
    faults = injector.get();
    return injector;
  }
  explicit SparedHole(Bytes capacity)
      : driver(injecting(capacity, faults)), allocator(must(make_tessera_allocator(driver, {}))) {
    top = must(allocator->allocate(256 * MiB, default_stream));
    hole = must(allocator->allocate(256 * MiB, default_stream));
    bottom = must(allocator->allocate(256 * MiB, default_stream));
    EXPECT_LT(hole, top);
    EXPECT_LT(bottom, hole) << "the large pool grows down";
    must(allocator->deallocate(hole));  // a 256 MiB hole between two live blocks
  }
  bool in_hole(Address at) const { return at >= hole && at < hole + 256 * MiB; }
};

TEST(AllocatorSparedHole, FarFromTheLimitASmallBlockGoesToTheFrontierAndTheHoleStaysWhole) {
  SparedHole rig(80 * GiB);
  ASSERT_GT(rig.allocator->tessera_stats().pooled_bytes, 0u) << "a chunk's growth is pooled";
  const Address small = must(rig.allocator->allocate(2 * MiB, default_stream));
  EXPECT_FALSE(rig.in_hole(small));
  EXPECT_LT(small, rig.bottom) << "carved at the frontier, below the lowest block";
  const std::uint64_t created = rig.driver.tally().calls_of(DriverCall::create_chunk);
  const std::uint64_t mapped = rig.driver.tally().calls_of(DriverCall::map);
  const Address large = must(rig.allocator->allocate(256 * MiB, default_stream));
  EXPECT_EQ(large, rig.hole) << "the hole, whole";
  EXPECT_EQ(rig.driver.tally().calls_of(DriverCall::create_chunk), created);
  EXPECT_EQ(rig.driver.tally().calls_of(DriverCall::map), mapped) << "cached memory";
  EXPECT_EQ(rig.allocator->check(), std::nullopt);
  for (Address at : {small, large, rig.top, rig.bottom}) must(rig.allocator->deallocate(at));
  EXPECT_EQ(rig.allocator->check(), std::nullopt);
}

// The frontier's mapped-ahead granules do not cover 12 MiB: its last granule is mapped, and that call fails.
TEST(AllocatorSparedHole, AFailingMapAtTheFrontierLosesNothingAndLeavesTheHoleWhole) {
  SparedHole rig(80 * GiB);
  rig.faults->fail(DriverCall::map, 1);
  auto failed = rig.allocator->allocate(12 * MiB, default_stream);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.error().code, Errc::platform);
  EXPECT_EQ(rig.allocator->check(), std::nullopt);
  EXPECT_EQ(rig.allocator->stats().allocated_bytes, 512 * MiB) << "the two live blocks, nothing more";
  const Address small = must(rig.allocator->allocate(12 * MiB, default_stream));
  EXPECT_FALSE(rig.in_hole(small));
  EXPECT_EQ(must(rig.allocator->allocate(256 * MiB, default_stream)), rig.hole);
  EXPECT_EQ(rig.allocator->check(), std::nullopt);
}

TEST(AllocatorSparedHole, ARequestOfMoreThanHalfTheHoleIsCarvedFromIt) {
  SparedHole rig(80 * GiB);
  const Address half_and_more = must(rig.allocator->allocate(130 * MiB, default_stream));
  EXPECT_TRUE(rig.in_hole(half_and_more));
  for (Address at : {half_and_more, rig.top, rig.bottom}) must(rig.allocator->deallocate(at));
  EXPECT_EQ(rig.allocator->check(), std::nullopt);
}

TEST(AllocatorSparedHole, PastAQuarterOfTheLimitASmallBlockIsCarvedFromTheHole) {
  SparedHole rig(2 * GiB);  // 768 MiB live: more than a quarter held
  ASSERT_GT(rig.allocator->stats().reserved_bytes, 512 * MiB);
  const Address small = must(rig.allocator->allocate(2 * MiB, default_stream));
  EXPECT_TRUE(rig.in_hole(small)) << "no pooled page is spent on the frontier near the limit";
  for (Address at : {small, rig.top, rig.bottom}) must(rig.allocator->deallocate(at));
  EXPECT_EQ(rig.allocator->check(), std::nullopt);
}

// The same on the host driver, whose 64 KiB granule makes a 4 MiB hole worth sparing (64 granules): the block
// (of the large pool) spared at the frontier and the one that then takes the hole hold their bytes, and so do
// their neighbours.
TEST_F(AllocatorTest, ASparedHoleKeepsEveryLiveBlocksBytes) {
  make(256 * MiB);
  const Address top = must(allocator_->allocate(8 * MiB, default_stream));
  Address hole = must(allocator_->allocate(8 * MiB, default_stream));
  const Address bottom = must(allocator_->allocate(8 * MiB, default_stream));
  ASSERT_LT(bottom, hole);
  fill(top, 8 * MiB, 1);
  fill(hole, 8 * MiB, 2);
  fill(bottom, 8 * MiB, 3);
  must(allocator_->deallocate(hole));
  ASSERT_GT(allocator_->tessera_stats().pooled_bytes, 0u) << "a chunk's growth is pooled";
  const Address small = must(allocator_->allocate(2 * MiB, default_stream));
  EXPECT_LT(small, bottom) << "spared: carved at the frontier";
  fill(small, 2 * MiB, 4);
  const std::uint64_t created = driver_->tally().calls_of(DriverCall::create_chunk);
  const Address large = must(allocator_->allocate(8 * MiB, default_stream));
  EXPECT_EQ(large, hole) << "the hole, whole";
  EXPECT_EQ(driver_->tally().calls_of(DriverCall::create_chunk), created);
  fill(large, 8 * MiB, 5);
  EXPECT_TRUE(holds(top, 8 * MiB, 1));
  EXPECT_TRUE(holds(bottom, 8 * MiB, 3));
  EXPECT_TRUE(holds(small, 2 * MiB, 4));
  EXPECT_TRUE(holds(large, 8 * MiB, 5));
  for (Address at : {top, bottom, small, large}) must(allocator_->deallocate(at));
}

// A chunk grows past a block for the blocks that follow while demand rises; a block that misses pages while more
// than a growth's worth is mapped and not live missed by placement, and its chunk is cut to it
// (page_backing.cpp, missed_by_placement). The sim driver: 64 MiB blocks, 2 MiB granules, far from the limit.
struct GrowthAfterFrees {
  CountingDriver driver;
  std::unique_ptr<TesseraAllocator> allocator;
  std::vector<Address> blocks;

  explicit GrowthAfterFrees(Bytes capacity = 80 * GiB)
      : driver(must(make_sim_driver({.capacity = capacity, .granularity = 2 * MiB})).driver),
        allocator(must(make_tessera_allocator(driver, {}))) {
    for (int i = 0; i < 8; ++i) {
      blocks.push_back(must(allocator->allocate(64 * MiB, default_stream)));
      blocks.push_back(must(allocator->allocate(2 * MiB, default_stream)));  // keeps the frees apart
    }
  }
  Bytes pooled() const { return allocator->tessera_stats().pooled_bytes; }
  // A block larger than the pool and than every free block: it misses, and a chunk is created for it.
  Bytes pooled_after_a_miss() {
    const Bytes size = pooled() + 20 * MiB;
    const std::uint64_t created = driver.tally().calls_of(DriverCall::create_chunk);
    blocks.push_back(must(allocator->allocate(size, default_stream)));
    EXPECT_EQ(driver.tally().calls_of(DriverCall::create_chunk), created + 1);
    EXPECT_EQ(allocator->check(), std::nullopt);
    return pooled();
  }
};

TEST(AllocatorGrowth, WhileDemandRisesANewChunkGrowsPastTheBlock) {
  GrowthAfterFrees rig;
  EXPECT_GT(rig.pooled_after_a_miss(), 0u);
}

TEST(AllocatorGrowth, ABlockThatMissesBesideIdleCachedPagesGetsAChunkCutToIt) {
  GrowthAfterFrees rig;
  for (int i = 0; i < 8; i += 2) must(rig.allocator->deallocate(rig.blocks[i]));  // 256 MiB idle, cached
  ASSERT_GE(rig.allocator->tessera_stats().cached_bytes, 256 * MiB);
  EXPECT_EQ(rig.pooled_after_a_miss(), 0u) << "no growth: it would stay pooled";
}

// Past half the limit the rule is off: reclaim takes idle pages there, and growth is cut by the room left.
TEST(AllocatorGrowth, PastHalfTheLimitIdleCachedPagesLeaveGrowthAsItIs) {
  GrowthAfterFrees rig(1 * GiB);
  ASSERT_GT(rig.allocator->stats().reserved_bytes, 512 * MiB);
  for (int i = 0; i < 8; i += 2) must(rig.allocator->deallocate(rig.blocks[i]));
  EXPECT_GT(rig.pooled_after_a_miss(), 0u);
}

// Where handles map whole (the ascend platform), a block carved over part of a free handle is not the fast
// path: near the limit the handle goes back to the device instead of being pinned by the block.
TEST(AllocatorWholeHandles, ABlockOverPartOfAFreeHandleNearTheLimitIsNotCarvedOnTheFastPath) {
  constexpr Bytes handle_granule = 2 * MiB;
  CountingDriver driver{must(make_sim_driver(
      {.capacity = 64 * handle_granule, .granularity = handle_granule, .platform = SimPlatform::ascend}))
                            .driver};
  auto allocator = must(make_tessera_allocator(driver, {}));
  const Address first = must(allocator->allocate(40 * handle_granule, default_stream));
  ASSERT_EQ(driver.tally().calls_of(DriverCall::create_chunk), 1u) << "far from the limit: one handle";
  must(allocator->deallocate(first));
  // Carved over 8 granules of the free handle's 40: 32 pinned with 24 left under the limit.
  const Address block = must(allocator->allocate(8 * handle_granule, default_stream));
  EXPECT_EQ(driver.tally().calls_of(DriverCall::unmap), 1u);
  EXPECT_EQ(driver.tally().calls_of(DriverCall::release_chunk), 1u);
  EXPECT_EQ(allocator->stats().reserved_bytes, 8 * handle_granule);
  EXPECT_EQ(driver.census().page_bytes, 8 * handle_granule);
  EXPECT_EQ(allocator->check(), std::nullopt);
  must(allocator->deallocate(block));
}

}  // namespace
}  // namespace tessera
