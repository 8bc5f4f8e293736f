// Private pools in the allocator, on the host driver (real memory: a memfd is the device) behind a fault
// injector and a counter: each rule of device_allocator.hpp's contract — a pool's freed block never reaches
// another pool or the shared cache, pools shared by several begins, the filter, release — and what a graph
// pool keeps (its pages, under pressure) that a plain pool does not. check() holds after every test, and the
// driver holds nothing once the allocator is gone.
#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>
#include <vector>

#include "support/must.hpp"
#include "tessera/allocator.hpp"
#include "tessera/driver_decorators.hpp"
#include "tessera/drivers.hpp"
#include "tessera/tags.hpp"

namespace tessera {
namespace {

constexpr Bytes granule = 64 * KiB;
constexpr PoolId graph_a{1, 1};
constexpr PoolId graph_b{1, 2};
const StreamId side{0x51de};

using test_support::must;

StreamFilter only(StreamId stream) {
  return [stream](StreamId asked) { return asked == stream; };
}

bool overlaps(Address a, Bytes a_size, Address b, Bytes b_size) { return a < b + b_size && b < a + a_size; }

class PrivatePoolingTest : public ::testing::Test {
 protected:
  void make(std::size_t granules, std::string_view conf = "") {
    allocator_.reset();  // before its driver
    auto faults = std::make_unique<FaultInjectingDriver>(
        must(make_host_driver({.capacity = granules * granule, .granularity = granule})));
    faults_ = faults.get();
    driver_ = std::make_unique<CountingDriver>(std::move(faults));
    allocator_ = must(make_tessera_allocator(*driver_, must(parse_allocator_config(conf))));
  }
  void SetUp() override { make(64); }
  void TearDown() override {
    if (!allocator_) return;
    faults_->clear_all();
    EXPECT_EQ(allocator_->check(), std::nullopt);
    allocator_.reset();
    EXPECT_EQ(driver_->census(), DriverCensus{}) << "left behind by the allocator";
  }

  Address allocate(Bytes size, StreamId stream = default_stream) {
    const Address block = must(allocator_->allocate(size, stream));
    EXPECT_EQ(allocator_->check(), std::nullopt);
    return block;
  }
  void free(Address block) {
    must(allocator_->deallocate(block));
    EXPECT_EQ(allocator_->check(), std::nullopt);
  }
  // Allocates one block of `size` into `pool` (begun and ended around it) on `stream`.
  Address allocate_in(PoolId pool, Bytes size, PoolKind kind = PoolKind::graph, StreamId stream = default_stream) {
    must(allocator_->begin_allocate_to_pool(pool, only(stream), kind));
    const Address block = allocate(size, stream);
    must(allocator_->end_allocate_to_pool(pool));
    return block;
  }
  std::uint64_t chunks_created() const { return driver_->tally().calls[static_cast<std::size_t>(DriverCall::create_chunk)]; }

  FaultInjectingDriver* faults_ = nullptr;
  std::unique_ptr<CountingDriver> driver_;
  std::unique_ptr<TesseraAllocator> allocator_;
};

TEST_F(PrivatePoolingTest, APoolsFreedBlockIsReusedInThePoolAndNeverByTheSharedCache) {
  const Bytes size = 3 * granule;
  const Address in_pool = allocate_in(graph_a, size);
  free(in_pool);
  const Address shared = allocate(size);
  EXPECT_FALSE(overlaps(shared, size, in_pool, size)) << "the shared cache took the pool's freed block";
  const Address again = allocate_in(graph_a, size);
  EXPECT_EQ(again, in_pool) << "the pool's own freed block is its best fit";
  free(again);
  free(shared);
  must(allocator_->release_pool(graph_a));
}

TEST_F(PrivatePoolingTest, ASharedCacheFreedBlockNeverReachesAPool) {
  const Bytes size = 5 * KiB;
  const Address shared = allocate(size);
  free(shared);
  const Address in_pool = allocate_in(graph_a, size);
  EXPECT_FALSE(overlaps(shared, size, in_pool, size));
  EXPECT_EQ(allocate(size), shared) << "the shared cache's block stays its own";
  free(shared);
  free(in_pool);
  must(allocator_->release_pool(graph_a));
}

TEST_F(PrivatePoolingTest, TwoPoolsNeverShareAFreedBlock) {
  const Bytes size = 2 * granule;
  const Address a = allocate_in(graph_a, size);
  free(a);
  const Address b = allocate_in(graph_b, size);
  EXPECT_FALSE(overlaps(a, size, b, size));
  free(b);
  must(allocator_->release_pool(graph_a));
  must(allocator_->release_pool(graph_b));
}

TEST_F(PrivatePoolingTest, SeveralCapturesShareOnePoolUntilTheLastRelease) {
  const Bytes size = 4 * KiB;
  const Address first = allocate_in(graph_a, size);  // the first capture's use
  free(first);
  const Address second = allocate_in(graph_a, size);  // the second's: it reuses the first's freed block
  EXPECT_EQ(second, first);
  free(second);
  must(allocator_->release_pool(graph_a));  // one use left: still a pool
  const Address third = allocate_in(graph_a, size);
  EXPECT_EQ(third, first) << "the pool outlived its first release";
  free(third);
  must(allocator_->release_pool(graph_a));
  must(allocator_->release_pool(graph_a));
  auto gone = allocator_->release_pool(graph_a);
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.error().code, Errc::not_found);
}

TEST_F(PrivatePoolingTest, OnlyTheStreamsTheFilterAcceptsAllocateIntoThePool) {
  const Bytes size = 8 * KiB;
  must(allocator_->begin_allocate_to_pool(graph_a, only(side), PoolKind::graph));
  const Address eager = allocate(size, default_stream);  // refused by the filter: the shared cache
  const Address captured = allocate(size, side);
  must(allocator_->end_allocate_to_pool(graph_a));
  free(eager);
  free(captured);
  EXPECT_EQ(allocate(size, default_stream), eager) << "the eager block was the shared cache's";
  EXPECT_NE(allocate(size, side), captured) << "the captured block was the pool's";
  must(allocator_->release_pool(graph_a));
}

TEST_F(PrivatePoolingTest, AGraphPoolKeepsItsFreedPagesUntilReleased) {
  make(8);
  const Address in_pool = allocate_in(graph_a, 6 * granule);
  free(in_pool);
  EXPECT_EQ(allocator_->tessera_stats().private_pools, 1u);
  EXPECT_EQ(allocator_->tessera_stats().private_pool_mapped_bytes, 6 * granule);
  // Two granules are left on the device: the shared cache may not take the graph pool's idle pages, whose
  // addresses the graph replays into.
  auto refused = allocator_->allocate(4 * granule, default_stream);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, Errc::out_of_memory);
  std::vector<unsigned char> bytes(6 * granule, 0x5a);
  EXPECT_TRUE(driver_->write(in_pool, bytes.data(), bytes.size()).ok()) << "the freed block's pages were taken";
  // Released, its pages go to the shared cache: the same request fits, without a new chunk.
  must(allocator_->release_pool(graph_a));
  EXPECT_EQ(allocator_->tessera_stats().private_pools, 0u);
  EXPECT_EQ(allocator_->tessera_stats().private_pool_mapped_bytes, 0u) << "its idle pages went to the page pool";
  const std::uint64_t created = chunks_created();
  const Address shared = allocate(4 * granule);
  EXPECT_EQ(chunks_created(), created);
  free(shared);
}

TEST_F(PrivatePoolingTest, APlainPoolsIdlePagesMayGoToTheSharedCache) {
  make(8);
  const Address in_pool = allocate_in(graph_a, 6 * granule, PoolKind::plain);
  free(in_pool);
  const Address shared = allocate(4 * granule);  // the plain pool's idle pages are reclaimed for it
  free(shared);
  // The pool still serves, its block where it was.
  EXPECT_EQ(allocate_in(graph_a, 6 * granule, PoolKind::plain), in_pool);
  free(in_pool);
  must(allocator_->release_pool(graph_a));
}

TEST_F(PrivatePoolingTest, AReleasedPoolsLiveBlockGivesItsMemoryBackWhenFreed) {
  make(8);
  const Address in_pool = allocate_in(graph_a, 6 * granule);
  must(allocator_->release_pool(graph_a));  // its block lives on (a graph output the caller still holds)
  auto refused = allocator_->allocate(4 * granule, default_stream);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, Errc::out_of_memory);
  free(in_pool);
  const Address shared = allocate(4 * granule);
  free(shared);
}

TEST_F(PrivatePoolingTest, AReleasedPoolsArenasGoToTheNextPoolInsteadOfNewSpace) {
  const Address first = allocate_in(graph_a, 3 * granule);
  free(first);
  must(allocator_->release_pool(graph_a));
  const std::size_t reservations = driver_->census().reservations;
  const Address second = allocate_in(graph_b, 3 * granule);
  EXPECT_EQ(driver_->census().reservations, reservations) << "a new pool reserved more virtual space";
  free(second);
  must(allocator_->release_pool(graph_b));
}

TEST_F(PrivatePoolingTest, AReleasedPoolWithALiveBlockKeepsItsArenasFromNewPools) {
  const Address kept = allocate_in(graph_a, 3 * granule);
  must(allocator_->release_pool(graph_a));
  const Address other = allocate_in(graph_b, 3 * granule);
  EXPECT_FALSE(overlaps(kept, 3 * granule, other, 3 * granule));
  free(other);
  free(kept);
  must(allocator_->release_pool(graph_b));
}

TEST_F(PrivatePoolingTest, BadCallsNameWhatIsWrongAndChangeNothing) {
  auto no_pool = allocator_->begin_allocate_to_pool(PoolId{}, only(default_stream));
  ASSERT_FALSE(no_pool.ok());
  EXPECT_EQ(no_pool.error().code, Errc::invalid_argument);
  auto no_filter = allocator_->begin_allocate_to_pool(graph_a, StreamFilter{});
  ASSERT_FALSE(no_filter.ok());
  EXPECT_EQ(no_filter.error().code, Errc::invalid_argument);
  auto not_active = allocator_->end_allocate_to_pool(graph_a);
  ASSERT_FALSE(not_active.ok());
  EXPECT_NE(not_active.error().message.find("pool (1, 1)"), std::string::npos) << not_active.error().message;
  must(allocator_->begin_allocate_to_pool(graph_a, only(default_stream)));
  auto active = allocator_->release_pool(graph_a);
  ASSERT_FALSE(active.ok());
  EXPECT_EQ(active.error().code, Errc::invalid_argument);
  const Address block = allocate(4 * KiB);  // still allocating into the pool
  must(allocator_->end_allocate_to_pool(graph_a));
  free(block);
  EXPECT_NE(allocate(4 * KiB), block) << "the block was the pool's";
  must(allocator_->release_pool(graph_a));
}

TEST_F(PrivatePoolingTest, AFailedUnmapInAReleaseLeavesTheAllocatorWhole) {
  make(8);
  const Address in_pool = allocate_in(graph_a, 6 * granule);
  free(in_pool);
  faults_->fail(DriverCall::unmap, 1);
  auto released = allocator_->release_pool(graph_a);
  ASSERT_FALSE(released.ok());
  EXPECT_NE(released.error().message.find("pool (1, 1) is released"), std::string::npos) << released.error().message;
  EXPECT_EQ(allocator_->check(), std::nullopt);
  faults_->clear_all();
  // Released all the same: what stayed cached is the shared cache's now, and the request fits.
  const Address shared = allocate(4 * granule);
  free(shared);
  must(allocator_->empty_cache());
}

TEST_F(PrivatePoolingTest, AFilterThatThrowsFailsTheAllocationAndChangesNothing) {
  must(allocator_->begin_allocate_to_pool(graph_a, [](StreamId) -> bool { throw std::runtime_error("no capture"); }));
  EXPECT_THROW((void)allocator_->allocate(4 * KiB, default_stream), std::runtime_error);
  EXPECT_EQ(allocator_->check(), std::nullopt);
  EXPECT_EQ(allocator_->stats().allocated_bytes, 0u);
  must(allocator_->end_allocate_to_pool(graph_a));
  free(allocate(4 * KiB));  // the lock was let go, and the allocator serves
  must(allocator_->release_pool(graph_a));
}

TEST_F(PrivatePoolingTest, APoolsBlocksKeepTheirBytes) {
  const Bytes size = 3 * granule + 512;
  const Address in_pool = allocate_in(graph_a, size);
  std::vector<unsigned char> written(size);
  for (std::size_t i = 0; i < size; ++i) written[i] = static_cast<unsigned char>(i * 7 + 3);
  must(driver_->write(in_pool, written.data(), size));
  std::vector<Address> others;
  for (int i = 0; i < 6; ++i) others.push_back(allocate(size));
  for (Address other : others) free(other);
  std::vector<unsigned char> read(size);
  must(driver_->read(in_pool, read.data(), size));
  EXPECT_EQ(read, written);
  free(in_pool);
  must(allocator_->release_pool(graph_a));
}

TEST_F(PrivatePoolingTest, PausingTheTagOfAGraphPoolGivesItsPagesBackAndResumeMapsEveryAddressItUsed) {
  const Bytes size = 3 * granule;
  Address live = 0;
  Address freed = 0;
  {
    TagScope scope("graph");
    must(allocator_->begin_allocate_to_pool(graph_a, only(default_stream)));
    freed = allocate(size);  // a temporary of the capture
    live = allocate(size);   // the graph's output
    must(allocator_->end_allocate_to_pool(graph_a));
  }
  free(freed);
  std::vector<unsigned char> written(size);
  for (std::size_t i = 0; i < size; ++i) written[i] = static_cast<unsigned char>(i * 5 + 1);
  must(driver_->write(live, written.data(), size));
  const Bytes mapped_before = driver_->census().mapped_bytes;

  must(allocator_->pause("graph", true));
  EXPECT_EQ(allocator_->check(), std::nullopt);
  EXPECT_LE(driver_->census().mapped_bytes + 2 * size, mapped_before) << "the pool's pages stayed mapped";
  EXPECT_EQ(driver_->census().pages, 0u) << "the pool's chunks went back to the device";

  must(allocator_->resume("graph"));
  EXPECT_EQ(allocator_->check(), std::nullopt);
  std::vector<unsigned char> read(size);
  must(driver_->read(live, read.data(), size));
  EXPECT_EQ(read, written) << "the live block's bytes came back";
  // The freed temporary's address is mapped again: a replay of the graph writes there.
  EXPECT_TRUE(driver_->write(freed, written.data(), size).ok()) << "the graph's freed block lost its pages";
  // And the pool goes on as before: its freed block is its own.
  {
    TagScope scope("graph");
    EXPECT_EQ(allocate_in(graph_a, size), freed);
  }
  free(freed);
  free(live);
  must(allocator_->release_pool(graph_a));
}

TEST_F(PrivatePoolingTest, AResumeOfAGraphPoolThatFailsLeavesTheTagPausedAndASecondResumeMapsItAll) {
  const Bytes size = 2 * granule;
  Address freed = 0;
  Address live = 0;
  {
    TagScope scope("graph");
    must(allocator_->begin_allocate_to_pool(graph_a, only(default_stream)));
    freed = allocate(size);
    live = allocate(size);
    must(allocator_->end_allocate_to_pool(graph_a));
  }
  free(freed);
  must(allocator_->pause("graph", false));
  faults_->fail(DriverCall::map, 2);
  auto failed = allocator_->resume("graph");
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(allocator_->check(), std::nullopt);
  faults_->clear_all();
  must(allocator_->resume("graph"));
  std::vector<unsigned char> bytes(size, 0x33);
  EXPECT_TRUE(driver_->write(freed, bytes.data(), size).ok());
  EXPECT_TRUE(driver_->write(live, bytes.data(), size).ok());
  free(live);
  must(allocator_->release_pool(graph_a));
}

}  // namespace
}  // namespace tessera
