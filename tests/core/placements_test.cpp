// The placements without the allocator: one per (stream, size pool, tag, private pool) key, made once and kept, the one
// used last cached until a pause forgets it, large arenas growing down only when asked, and frees dated in
// the order they happen.
#include "core/placements.hpp"

#include <gtest/gtest.h>

namespace tessera::core {
namespace {

constexpr Bytes granule = 2 * MiB;
const StreamId side{0x7f00'0000'1234};

TEST(Placements, AKeyHoldsEveryBitOfTheStreamAndGivesBackItsPoolAndTag) {
  const Placements::Key key = Placements::key(side, SizePool::large, TagId{77});
  EXPECT_EQ(static_cast<StreamId>(key.first), side);
  EXPECT_EQ(Placements::pool_of(key), SizePool::large);
  EXPECT_EQ(Placements::tag_of(key), TagId{77});
  EXPECT_NE(key, Placements::key(side, SizePool::small, TagId{77}));
  EXPECT_NE(key, Placements::key(default_stream, SizePool::large, TagId{77}));
}

TEST(Placements, EachKeyHasOnePlacementAndTheLastUsedIsCachedUntilForgotten) {
  Placements placements(granule, true);
  const auto small = Placements::key(default_stream, SizePool::small, default_tag);
  const auto large = Placements::key(default_stream, SizePool::large, default_tag);
  EXPECT_EQ(placements.cached(small), nullptr);
  Placement& first = placements.find_or_add(small);
  EXPECT_EQ(placements.cached(small), &first);
  EXPECT_EQ(placements.cached(large), nullptr);
  Placement& second = placements.find_or_add(large);
  EXPECT_EQ(placements.cached(small), nullptr) << "one placement is cached: the last used";
  EXPECT_EQ(&placements.find_or_add(small), &first) << "made once";
  EXPECT_EQ(placements.size(), 2u);
  EXPECT_EQ(&placements.of(second.arena()), &second);
  EXPECT_EQ(first.arena().pool(), SizePool::small);
  placements.forget_cached();
  EXPECT_EQ(placements.cached(small), nullptr);
  EXPECT_EQ(placements.cached_placement(), nullptr);
}

TEST(Placements, OnlyLargeArenasGrowDownAndOnlyWhenAsked) {
  for (const bool grows_down : {true, false}) {
    Placements placements(granule, grows_down);
    Placement& large = placements.find_or_add(Placements::key(default_stream, SizePool::large, default_tag));
    Placement& small = placements.find_or_add(Placements::key(default_stream, SizePool::small, default_tag));
    large.add_region(Address{1} << 40, 64 * granule);
    small.add_region(Address{2} << 40, 64 * granule);
    const Block* high = large.take(large.fit(granule), granule, granule);
    const Block* low = small.take(small.fit(512), 512, 512);
    EXPECT_EQ(high->address == (Address{1} << 40) + 63 * granule, grows_down) << "the top of its region";
    EXPECT_EQ(low->address, Address{2} << 40);
  }
}

TEST(Placements, FreesAreDatedInTheOrderTheyHappen) {
  Placements placements(granule, false);
  Placement& placement = placements.find_or_add(Placements::key(default_stream, SizePool::large, default_tag));
  placement.add_region(Address{1} << 40, 64 * granule);
  Block* a = placement.take(placement.fit(granule), granule, granule);
  Block* b = placement.take(placement.fit(granule), granule, granule);
  Block* c = placement.take(placement.fit(granule), granule, granule);
  placements.give_back(c);
  placements.give_back(a);
  EXPECT_LT(c->freed_at, a->freed_at);
  const Address b_address = b->address;
  placements.give_back(b);  // merges with both neighbours: one free block, dated last
  const Block* merged = placement.fit(3 * granule);
  ASSERT_NE(merged, nullptr);
  EXPECT_LE(merged->address, b_address);
  EXPECT_EQ(merged->freed_at, 3u) << "the latest of the three frees that formed it";
}

TEST(Placements, APrivatePoolIsAPartOfTheKeyAndOfItsArena) {
  const Placements::Key key = Placements::key(side, SizePool::small, TagId{0xffffffff}, max_private_pools);
  EXPECT_EQ(Placements::tag_of(key), TagId{0xffffffff}) << "the pool's bits do not reach the tag";
  EXPECT_EQ(Placements::private_pool_of(key), max_private_pools);
  EXPECT_EQ(Placements::pool_of(key), SizePool::small);
  EXPECT_NE(key, Placements::key(side, SizePool::small, TagId{0xffffffff}, 1));
  Placements placements(granule, false);
  EXPECT_EQ(placements.find_or_add(Placements::key(side, SizePool::large, default_tag, 3)).arena().private_pool(), 3u);
  EXPECT_EQ(placements.find_or_add(Placements::key(side, SizePool::large, default_tag)).arena().private_pool(),
            shared_cache);
}

TEST(Placements, AHeldPoolsFreeBlocksLeaveTheReclaimListUntilLetGo) {
  Placements placements(granule, false);
  Placement& shared = placements.find_or_add(Placements::key(default_stream, SizePool::large, default_tag));
  Placement& pool = placements.find_or_add(Placements::key(default_stream, SizePool::large, default_tag, 1));
  shared.add_region(Address{1} << 40, 64 * granule);
  pool.add_region(Address{2} << 40, 64 * granule);
  Block* in_shared = shared.take(shared.fit(granule), granule, granule);
  Block* in_pool = pool.take(pool.fit(granule), granule, granule);
  Block* kept = pool.take(pool.fit(granule), granule, granule);  // keeps the freed block apart from the frontier
  placements.give_back(in_pool);
  auto listed = [&](const ReclaimList& list, const Block* block) {
    for (const Block& each : list) {
      if (&each == block) return true;
    }
    return false;
  };
  ASSERT_TRUE(listed(placements.reclaim_list(), in_pool));
  const ReclaimList& held = placements.hold_pages(1);
  EXPECT_FALSE(listed(placements.reclaim_list(), in_pool)) << "a held pool's free block is out of reclaim's reach";
  EXPECT_TRUE(listed(held, in_pool));
  EXPECT_EQ(placements.held_pages(1), &held);
  Block* later = pool.take(pool.fit(granule), granule, granule);
  placements.give_back(later);  // freed while held: the held list
  EXPECT_FALSE(listed(placements.reclaim_list(), later));
  placements.give_back(in_shared);  // the shared cache's own: the reclaim list
  ASSERT_TRUE(listed(placements.reclaim_list(), in_shared));
  placements.let_go_pages(1);
  EXPECT_EQ(placements.held_pages(1), nullptr);
  ASSERT_TRUE(listed(placements.reclaim_list(), later));
  EXPECT_NE(&placements.reclaim_list().front(), in_shared) << "the let-go blocks come first, as the oldest";
  placements.give_back(kept);
}

}  // namespace
}  // namespace tessera::core
