// Sliver sharing, the last step of the out-of-memory ladder: a block whose first and last slots map the
// free edges of granules that live blocks half use. On the host driver (real memory, granules mapped at two
// addresses), with the data oracle: every live block keeps what was written into it.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <vector>

#include "support/must.hpp"
#include "tessera/allocator.hpp"
#include "tessera/driver_decorators.hpp"
#include "tessera/drivers.hpp"

namespace tessera {
namespace {

constexpr Bytes granule = 64 * KiB;
constexpr Bytes half = granule / 2;

using test_support::must;

class SliverSharingTest : public ::testing::Test {
 protected:
  // capacity in granules; every request above 4 KiB is large.
  void make(std::size_t granules, std::string_view extra = "") {
    auto faults = std::make_unique<FaultInjectingDriver>(
        must(make_host_driver({.capacity = granules * granule, .granularity = granule})));
    faults_ = faults.get();
    driver_ = std::make_unique<CountingDriver>(std::move(faults));
    std::string conf = "small_max_kb:4";
    if (!extra.empty()) conf += "," + std::string(extra);
    allocator_ = must(make_tessera_allocator(*driver_, must(parse_allocator_config(conf))));
  }

  void TearDown() override {
    if (!allocator_) return;
    EXPECT_EQ(allocator_->check(), std::nullopt);
    faults_->clear_all();
    if (StreamControl* streams = driver_->stream_control()) {
      for (std::uintptr_t stream : {1, 2, 5}) streams->complete(StreamId{stream});
    }
    for (const auto& [address, seed] : live_) EXPECT_TRUE(holds(address, seed)) << "block " << std::hex << address;
    for (const auto& [address, seed] : std::map(live_)) free(address);
    must(allocator_->empty_cache());
    EXPECT_EQ(allocator_->check(), std::nullopt);
    EXPECT_EQ(driver_->census().pages, 0u);
    EXPECT_EQ(driver_->census().mappings, 0u);
    allocator_.reset();
    EXPECT_EQ(driver_->census(), DriverCensus{}) << "left behind by the allocator";
  }

  Address allocate(Bytes size, StreamId stream = default_stream) {
    const Address block = must(allocator_->allocate(size, stream));
    const auto seed = static_cast<unsigned char>(live_.size() * 37 + 11);
    sizes_[block] = size;
    fill(block, seed);
    live_[block] = seed;
    return block;
  }
  void free(Address block) {
    must(allocator_->deallocate(block));
    live_.erase(block);
    sizes_.erase(block);
  }
  void fill(Address at, unsigned char seed) {
    std::vector<unsigned char> bytes(sizes_.at(at));
    for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(seed + i * 13);
    must(driver_->write(at, bytes.data(), bytes.size()));
  }
  bool holds(Address at, unsigned char seed) {
    std::vector<unsigned char> bytes(sizes_.at(at));
    must(driver_->read(at, bytes.data(), bytes.size()));
    for (std::size_t i = 0; i < bytes.size(); ++i) {
      if (bytes[i] != static_cast<unsigned char>(seed + i * 13)) return false;
    }
    return true;
  }
  void expect_all_intact() {
    for (const auto& [address, seed] : live_) EXPECT_TRUE(holds(address, seed)) << "block " << std::hex << address;
  }

  Address build_mostly_mapped_fit(std::size_t mapped);

  // Five granules mapped under three live blocks, with a head sliver (the second half of slot 1) and a tail
  // sliver (the first half of slot 3) between them:
  //   slot  0    1    2    3    4
  //        [L1 ][L1|h][L2 ][t|L3][L3 ]
  // Large arenas grow down: the blocks are asked for from the right of the picture to the left.
  void build_slivers(StreamId stream = default_stream) {
    l3_ = allocate(3 * half, stream);
    const Address tail_sliver = allocate(half, stream);
    l2_ = allocate(granule, stream);
    const Address head_sliver = allocate(half, stream);
    l1_ = allocate(3 * half, stream);
    ASSERT_EQ(head_sliver, l1_ + 3 * half);
    ASSERT_EQ(tail_sliver, l2_ + granule);
    free(head_sliver);
    free(tail_sliver);
    head_ = head_sliver;
    tail_ = tail_sliver;
    ASSERT_EQ(allocator_->stats().reserved_bytes, 5 * granule);
  }

  FaultInjectingDriver* faults_ = nullptr;
  std::unique_ptr<CountingDriver> driver_;
  std::unique_ptr<TesseraAllocator> allocator_;
  std::map<Address, unsigned char> live_;
  std::map<Address, Bytes> sizes_;
  Address l1_ = 0, l2_ = 0, l3_ = 0, head_ = 0, tail_ = 0;
};

// Three granules asked with two left on the device: no contiguous placement fits, but half a granule at
// each end over the slivers and two whole pages between does.
TEST_F(SliverSharingTest, ARequestNoContiguousPlacementFitsIsBuiltOverTwoSlivers) {
  make(7);
  build_slivers();
  const Address shared = allocate(3 * granule);
  const TesseraStats stats = allocator_->tessera_stats();
  EXPECT_EQ(stats.shared_blocks, 1u);
  EXPECT_EQ(stats.slivers_shared, 2u);
  EXPECT_EQ(stats.common.reserved_bytes, 7 * granule) << "no more than the device has";
  EXPECT_EQ(stats.sliver_mappings, 2u);
  EXPECT_EQ(driver_->census().mapped_bytes, stats.mapped_bytes + 2 * granule) << "two granules mapped twice";
  expect_all_intact();

  // The snapshot shows the slivers lent to it at home, and the block in a segment of its own.
  const AllocatorSnapshot snapshot = allocator_->snapshot();
  std::map<Address, SnapshotBlock> blocks;
  for (const SnapshotSegment& segment : snapshot.segments) {
    for (const SnapshotBlock& block : segment.blocks) blocks[block.address] = block;
  }
  EXPECT_EQ(blocks.at(head_).lent_to, shared);
  EXPECT_EQ(blocks.at(head_).size, half);
  EXPECT_EQ(blocks.at(tail_).lent_to, shared);
  EXPECT_EQ(blocks.at(shared).state, SnapshotBlock::State::active_allocated);
  EXPECT_EQ(blocks.at(shared).mapped_bytes, 3 * granule);
  EXPECT_EQ(shared % granule, half) << "it starts where the head sliver starts in its granule";

  // Writing all of it reaches the slivers' bytes, never a neighbour's.
  fill(shared, 201);
  live_[shared] = 201;
  expect_all_intact();
}

// At the limit a request whose best fit is cached memory takes it where it is (the allocator's fast path):
// no shared block, no driver call.
// Inside a plain private pool the same block is built over the pool's own slivers; a graph pool builds none
// (a shared block's range goes when it is freed, and the graph would replay into it); and a pool's slivers
// never serve the shared cache.
TEST_F(SliverSharingTest, APlainPoolBuildsOverItsOwnSliversAndAGraphPoolOverNone) {
  const StreamFilter every_stream = [](StreamId) { return true; };
  for (const PoolKind kind : {PoolKind::plain, PoolKind::graph}) {
    allocator_.reset();  // the first round's, before its driver goes
    make(7);
    const PoolId pool{9, kind == PoolKind::plain ? 1u : 2u};
    must(allocator_->begin_allocate_to_pool(pool, every_stream, kind));
    build_slivers();
    auto placed = allocator_->allocate(3 * granule, default_stream);
    if (kind == PoolKind::plain) {
      ASSERT_TRUE(placed.ok()) << describe(placed.error());
      EXPECT_EQ(allocator_->tessera_stats().shared_blocks, 1u);
      must(allocator_->deallocate(*placed));
    } else {
      ASSERT_FALSE(placed.ok());
      EXPECT_EQ(placed.error().code, Errc::out_of_memory);
      EXPECT_EQ(allocator_->tessera_stats().shared_blocks, 0u);
    }
    must(allocator_->end_allocate_to_pool(pool));
    auto outside = allocator_->allocate(3 * granule, default_stream);  // the shared cache: the pool's slivers are not its
    ASSERT_FALSE(outside.ok());
    EXPECT_EQ(outside.error().code, Errc::out_of_memory);
    expect_all_intact();
    for (const auto& [address, seed] : std::map(live_)) free(address);
    must(allocator_->release_pool(pool));
    EXPECT_EQ(allocator_->check(), std::nullopt);
  }
}

TEST_F(SliverSharingTest, AtTheLimitACachedFitIsTakenInPlace) {
  make(5);
  build_slivers();
  const std::uint64_t calls = driver_->tally().total_calls();
  const Address block = must(allocator_->allocate(half, default_stream));
  EXPECT_EQ(driver_->tally().total_calls(), calls);
  EXPECT_EQ(block, tail_) << "the smallest free block that holds it, the highest address first (a large "
                            "arena grows down)";
  EXPECT_EQ(allocator_->tessera_stats().shared_blocks, 0u);
  must(allocator_->deallocate(block));
  expect_all_intact();
}

// Why large arenas grow down: each pool's frontier is then the other kind of sliver. The small arena's last
// granule has a free end (a head), the large arena's lowest live block leaves a free start below it (a
// tail), and one request can take both. Were both arenas growing up, both frontiers would be heads.
TEST_F(SliverSharingTest, TheSmallPoolsHeadAndTheLargePoolsTailMakeOneBlock) {
  make(5);
  allocate(4 * KiB);        // the small arena's first granule: a free end of 60 KiB
  allocate(3 * half);       // the large arena's top granule and a half below it: a free start of 32 KiB
  ASSERT_EQ(allocator_->stats().reserved_bytes, 3 * granule);
  const Address shared = allocate((granule - 4 * KiB) + 2 * granule + half);
  const TesseraStats stats = allocator_->tessera_stats();
  EXPECT_EQ(stats.shared_blocks, 1u);
  EXPECT_EQ(stats.slivers_shared, 2u);
  EXPECT_EQ(stats.common.reserved_bytes, 5 * granule);
  EXPECT_EQ(shared % granule, 4 * KiB) << "it starts where the small arena's free end starts";
  expect_all_intact();
}

// Below the limit, where the contiguous placement lacks few of the block's granules and far fewer than the
// block spans (tessera_allocator.cpp, sliver_middle_before_idle), that placement goes first and takes the idle
// pages it lacks: a block over slivers would take some 300 pages from idle blocks to save at most two granules.
// One chunk per page (chunk_max_mb:0): no chunk grows, nothing is pooled, so the room is what is asked.
//   top: the slivers' five granules | 4 x (idle: 25 granules, free | separator) | free (`mapped`) | frontier
// Answers where the free block ends; the room left is 4 granules.
Address SliverSharingTest::build_mostly_mapped_fit(std::size_t mapped) {
  allocator_.reset();
  live_.clear();
  sizes_.clear();
  make(512, "chunk_max_mb:0");
  build_slivers();
  std::vector<Address> idle;  // four blocks of 25 granules, each kept apart by a live granule
  for (int i = 0; i < 4; ++i) {
    idle.push_back(allocate(25 * granule));
    allocate(granule);
  }
  const Address fit = allocate(mapped * granule);
  for (const Address block : idle) free(block);
  free(fit);  // merged with the free frontier below it: its granules mapped at the top
  EXPECT_EQ(allocator_->tessera_stats().pooled_bytes, 0u);
  const Bytes limit = allocator_->stats().reserved_bytes + 4 * granule;
  must(allocator_->set_memory_fraction(static_cast<double>(limit) / static_cast<double>(512 * granule)));
  return fit + mapped * granule;
}

TEST_F(SliverSharingTest, AContiguousPlacementLackingFewPagesGoesBeforeABlockOverSlivers) {
  struct Case {
    std::size_t mapped, requested;
    bool contiguous;
    const char* why;
  };
  for (const Case& c : {Case{300, 310, true, "lacks 10 of 310"},
                        Case{50, 60, false, "spans only 50 granules more than it lacks"},
                        Case{100, 180, false, "lacks more than two fifths"}}) {
    SCOPED_TRACE(c.why);
    const Address end = build_mostly_mapped_fit(c.mapped);
    const std::uint64_t unmapped = driver_->tally().calls_of(DriverCall::unmap);
    const Address block = allocate(c.requested * granule);
    const std::uint64_t unmaps = driver_->tally().calls_of(DriverCall::unmap) - unmapped;
    EXPECT_EQ(allocator_->tessera_stats().shared_blocks, c.contiguous ? 0u : 1u);
    if (c.contiguous) {
      EXPECT_EQ(block + c.requested * granule, end) << "where the free block was";
      EXPECT_LE(unmaps, c.requested - c.mapped - 4) << "only the pages it lacked";
    }
    expect_all_intact();
  }
}

// The same request with each call it makes failing once: it fails or succeeds, and either way the
// allocator stays consistent and no live byte changes.
TEST_F(SliverSharingTest, AContiguousPlacementBeforeSliversSurvivesAFailureAtAnyCall) {
  std::set<DriverCall> refused_at;
  for (DriverCall call : {DriverCall::synchronize_stream, DriverCall::unmap, DriverCall::create_chunk,
                          DriverCall::map, DriverCall::set_access}) {
    for (std::uint64_t nth = 1; nth <= 3; ++nth) {
      SCOPED_TRACE(std::string(to_string(call)) + " failing at call " + std::to_string(nth));
      build_mostly_mapped_fit(300);
      faults_->fail(call, nth);
      auto placed = allocator_->allocate(310 * granule, default_stream);
      faults_->clear_all();
      ASSERT_EQ(allocator_->check(), std::nullopt);
      expect_all_intact();
      if (placed.ok()) {
        must(allocator_->deallocate(*placed));
      } else {
        refused_at.insert(call);
      }
      EXPECT_EQ(allocator_->check(), std::nullopt);
    }
  }
  EXPECT_EQ(refused_at.size(), 5u) << "every kind of call was reached, and its failure answered";
}

TEST_F(SliverSharingTest, OffTheSameRequestFailsWithNothingChanged) {
  make(7, "share_slivers:off");
  build_slivers();
  const DriverCensus before = driver_->census();
  auto refused = allocator_->allocate(3 * granule, default_stream);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, Errc::out_of_memory);
  EXPECT_EQ(allocator_->tessera_stats().shared_blocks, 0u);
  EXPECT_EQ(driver_->census().mappings, before.mappings);
  expect_all_intact();
}

TEST_F(SliverSharingTest, ParsedAndRefusedWithTheKeyNamed) {
  EXPECT_FALSE(must(parse_allocator_config("share_slivers:off")).share_slivers);
  EXPECT_TRUE(AllocatorConfig{}.share_slivers);
  auto bad = parse_allocator_config("share_slivers:maybe");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("share_slivers"), std::string::npos) << bad.error().message;
}

// A freed shared block is taken apart once its stream's work is done: its pages pooled, its slivers free
// at home again (and reused there in place), its range released.
TEST_F(SliverSharingTest, AFreedSharedBlockGivesItsSliversBack) {
  make(7);
  build_slivers();
  const std::size_t reservations = driver_->census().reservations;
  const Address shared = allocate(3 * granule);
  EXPECT_EQ(driver_->census().reservations, reservations + 1);
  free(shared);
  must(allocator_->empty_cache());  // processes the completed free, then gives idle pages back
  const TesseraStats stats = allocator_->tessera_stats();
  EXPECT_EQ(stats.sliver_mappings, 0u);
  EXPECT_EQ(driver_->census().reservations, reservations);
  EXPECT_EQ(driver_->census().mapped_bytes, stats.mapped_bytes);
  EXPECT_EQ(allocate(half), tail_) << "the tail sliver is free in its arena again (highest address first)";
  EXPECT_EQ(allocate(half), head_) << "and so is the head sliver";
  expect_all_intact();
}

// A block over slivers built again at the same size takes the range the last one left (Mapper::
// reserve_shared): no reserve or release call; empty_cache gives the spare range back.
TEST_F(SliverSharingTest, ABlockOverSliversBuiltAgainReusesTheRangeTheLastOneLeft) {
  make(7);
  build_slivers();
  const std::size_t reservations = driver_->census().reservations;
  free(allocate(3 * granule));  // taken apart at the next allocation, once its stream's event completed
  const std::uint64_t reserved = driver_->tally().calls_of(DriverCall::reserve);
  const std::uint64_t released = driver_->tally().calls_of(DriverCall::release_reservation);
  allocate(3 * granule);
  EXPECT_EQ(allocator_->tessera_stats().shared_blocks, 2u) << "built twice";
  EXPECT_EQ(driver_->tally().calls_of(DriverCall::reserve), reserved);
  EXPECT_EQ(driver_->tally().calls_of(DriverCall::release_reservation), released);
  EXPECT_EQ(driver_->census().reservations, reservations + 1);
  expect_all_intact();
}

// The free waits for every stream the block was used on: until the other stream's work is done the
// mappings stay, and the slivers stay lent.
TEST_F(SliverSharingTest, TakenApartOnlyAfterEveryStreamThatUsedItIsDone) {
  make(16);
  must(allocator_->set_memory_fraction(7.0 / 16.0));  // 7 granules: the request must share
  StreamControl* streams = driver_->stream_control();
  ASSERT_NE(streams, nullptr);
  build_slivers();
  const Address shared = allocate(3 * granule);
  ASSERT_EQ(allocator_->tessera_stats().shared_blocks, 1u);
  const StreamId other{5};
  must(allocator_->record_stream(shared, other));
  streams->hold(other);
  free(shared);
  must(allocator_->set_memory_fraction(1.0));
  allocate(granule);  // room again: placed without waiting, after looking at the pending free's events
  EXPECT_EQ(allocator_->tessera_stats().sliver_mappings, 2u) << "unmapped while the other stream may use it";
  streams->complete(other);
  allocate(granule);
  EXPECT_EQ(allocator_->tessera_stats().sliver_mappings, 0u) << "taken apart once the events completed";
  expect_all_intact();
}

// Slivers of another stream are not used: reusing them would need an event.
TEST_F(SliverSharingTest, SliversOfAnotherStreamAreNotShared) {
  make(7);
  build_slivers(StreamId{1});
  auto refused = allocator_->allocate(3 * granule, StreamId{2});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, Errc::out_of_memory);
  EXPECT_EQ(allocator_->tessera_stats().shared_blocks, 0u);
}

// A small-pool request with no page left goes into a large block's sliver: that granule is mapped once
// more, and the rest of the sliver stays free.
TEST_F(SliverSharingTest, ASmallRequestTakesPartOfOneSliver) {
  make(5);
  build_slivers();
  const Address small = allocate(2 * KiB);
  const TesseraStats stats = allocator_->tessera_stats();
  EXPECT_EQ(stats.shared_blocks, 1u);
  EXPECT_EQ(stats.slivers_shared, 1u);
  EXPECT_EQ(stats.common.reserved_bytes, 5 * granule);
  // Both slivers are halves: it takes the start of one, at that sliver's offset in its granule.
  const Address sliver = small % granule == half ? head_ : tail_;
  EXPECT_EQ(small % granule, sliver % granule);
  expect_all_intact();
  // The rest of that sliver is still free where it is.
  EXPECT_EQ(allocate(half - 2 * KiB), sliver + 2 * KiB);
  expect_all_intact();
}

// Every driver call the shared path makes, failing once: the request fails or succeeds, and either way
// the allocator stays consistent, no live byte changes, and after the drain nothing is held.
TEST_F(SliverSharingTest, AFailureAtAnyCallLeavesEverythingConsistent) {
  std::set<DriverCall> reached;
  int refused = 0;
  for (DriverCall call : {DriverCall::reserve, DriverCall::map, DriverCall::set_access, DriverCall::create_chunk,
                          DriverCall::unmap, DriverCall::release_reservation, DriverCall::create_event,
                          DriverCall::record_event}) {
    for (std::uint64_t nth = 1; nth <= 4; ++nth) {
      SCOPED_TRACE(std::string(to_string(call)) + " failing at call " + std::to_string(nth));
      make(7);
      build_slivers();
      faults_->fail(call, nth);
      auto shared = allocator_->allocate(3 * granule, default_stream);
      ASSERT_EQ(allocator_->check(), std::nullopt);
      expect_all_intact();
      if (shared.ok()) {
        sizes_[*shared] = 3 * granule;
        fill(*shared, 99);
        live_[*shared] = 99;
        auto freed = allocator_->deallocate(*shared);
        if (freed.ok()) {
          live_.erase(*shared);
          sizes_.erase(*shared);
        }
        (void)allocator_->empty_cache();  // may fail on the injected call: tried again at the drain
        ASSERT_EQ(allocator_->check(), std::nullopt);
        expect_all_intact();
      }
      if (faults_->injected(call) > 0) reached.insert(call);
      refused += shared.ok() ? 0 : 1;
      TearDown();
      live_.clear();
      sizes_.clear();
    }
  }
  EXPECT_EQ(reached.size(), 8u) << "every kind of call the shared path makes must have failed once";
  // reserve, each of the four maps, set_access, create_chunk: the request fails, nothing half-built stays.
  EXPECT_EQ(refused, 7);
}

}  // namespace
}  // namespace tessera
