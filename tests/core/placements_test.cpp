// The placements without the allocator: one per (stream, size pool, tag) key, made once and kept, the one
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

}  // namespace
}  // namespace tessera::core
