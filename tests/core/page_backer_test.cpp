// The page backer over the mapper, the budget and the placements on the sim driver, without the allocator:
// a block gets a page under every slot it touches, pooled pages before new ones; a new chunk grows past the
// block while the device has room, and the surplus serves the next block with no create call; near the
// limit the chunk is the block's need again; out of memory leaves nothing mapped and loses no page; idle
// pages of a freed block are reclaimed into the pool; a shared block's pages come pooled, else new, within
// the limit.
#include "core/page_backer.hpp"

#include <gtest/gtest.h>

#include "driver/driver_fixtures.hpp"
#include "support/must.hpp"
#include "tessera/drivers.hpp"

namespace tessera::core {
namespace {

using test_support::must;

constexpr Bytes granule = 2 * MiB;

struct PageBackerTest : ::testing::Test {
  SimDriverHandle sim = must(make_sim_driver({.capacity = 16 * granule, .granularity = granule}));
  AllocatorConfig config{.chunk_max = 4 * granule};
  Observers observers;
  Mapper mapper{*sim.driver, observers};
  Budget budget{mapper};
  Placements placements{granule, false};
  PageBacker backer{mapper, budget, placements, observers, config};
  Placement& placement = placements.find_or_add(Placements::key(default_stream, SizePool::large, default_tag));

  PageBackerTest() { placement.add_region(must(mapper.reserve(64 * granule)), 64 * granule); }

  Block* take(Bytes size) { return placement.take(placement.fit(size), size, size); }
  const Region& region() { return placement.arena().region(0); }
  DriverCensus census() const { return sim.driver->census(); }
};

TEST_F(PageBackerTest, ABlockGetsAPageUnderEverySlotItTouches) {
  Block* block = take(3 * granule);
  TESSERA_OK(backer.back(placement.arena(), *block, false));
  EXPECT_TRUE(region().all_accessible(placement.arena().touched_slots(*block)));
  EXPECT_EQ(census().pages, 1u) << "one create call";
  EXPECT_EQ(census().mappings, 3u) << "a granule page a slot (page_max: the granule; too few to merge)";
  EXPECT_EQ(mapper.held(), 4 * granule) << "what it needs, and growth up to the chunk's limit";
  EXPECT_EQ(mapper.pool().granules(), 1u) << "the surplus is pooled";
}

TEST_F(PageBackerTest, PooledPagesGoBeforeNewOnes) {
  std::uint32_t granules = 2;
  mapper.pool_page(Page{must(mapper.create_chunk(granules)), granules, 0});
  Block* block = take(3 * granule);
  TESSERA_OK(backer.back(placement.arena(), *block, false));
  EXPECT_EQ(census().pages, 2u) << "the pooled chunk and one new for the granule it lacked";
  EXPECT_EQ(mapper.held(), 4 * granule) << "the new one grew by as much again as the block lacked";
  EXPECT_EQ(mapper.pool().granules(), 1u);
}

TEST_F(PageBackerTest, TheSurplusOfAGrownChunkServesTheNextBlockWithoutACreateCall) {
  Block* first = take(2 * granule);
  TESSERA_OK(backer.back(placement.arena(), *first, false));
  EXPECT_EQ(census().pages, 1u);
  EXPECT_EQ(mapper.held(), 4 * granule) << "as much again as the block needs";
  Block* second = take(2 * granule);
  TESSERA_OK(backer.back(placement.arena(), *second, false));
  EXPECT_EQ(census().pages, 1u) << "no create call: the surplus was pooled";
  EXPECT_EQ(mapper.pool().granules(), 0u);
  EXPECT_EQ(census().mappings, 4u);
}

TEST_F(PageBackerTest, NearTheLimitANewChunkIsWhatTheBlockNeeds) {
  budget.set_fraction(0.5);  // 8 granules
  Block* block = take(6 * granule);
  TESSERA_OK(backer.back(placement.arena(), *block, false));
  EXPECT_EQ(mapper.held(), 6 * granule) << "a quarter of the 2 granules left free is no whole granule";
  EXPECT_EQ(mapper.pool().granules(), 0u);
}

TEST_F(PageBackerTest, OutOfMemoryLeavesNothingMappedAndLosesNoPage) {
  budget.set_fraction(0.25);  // 4 granules
  Block* block = take(6 * granule);
  const Result<void> backed = backer.back(placement.arena(), *block, true);
  ASSERT_FALSE(backed);
  EXPECT_EQ(backed.error().code, Errc::out_of_memory);
  EXPECT_NE(backed.error().message.find("more granule"), std::string::npos) << backed.error().message;
  EXPECT_EQ(census().mappings, 0u);
  EXPECT_EQ(mapper.pool().granules() * granule, mapper.held()) << "what was created is pooled";
  EXPECT_LE(mapper.held(), budget.limit());
}

TEST_F(PageBackerTest, IdlePagesOfAFreedBlockAreReclaimedIntoThePool) {
  Block* block = take(4 * granule);
  TESSERA_OK(backer.back(placement.arena(), *block, false));
  EXPECT_EQ(mapper.held(), 4 * granule) << "the chunk's limit: no growth";
  Block* keep = take(granule);  // a live neighbour, so the freed block stays where it is
  TESSERA_OK(backer.back(placement.arena(), *keep, false));
  const std::size_t pooled = mapper.pool().granules();  // the surplus of the neighbour's chunk
  placements.give_back(block);
  std::vector<Page> taken;
  const std::size_t granules = must(backer.reclaim(3, &taken));
  EXPECT_EQ(granules, 3u) << "oldest freed first, up to what was asked";
  EXPECT_EQ(taken.size(), 3u);
  EXPECT_EQ(mapper.pool().granules(), pooled + 3);
  TESSERA_OK(backer.give_back_above(0));
  EXPECT_EQ(census().mappings, 1u) << "only the live neighbour's page stays mapped";
  EXPECT_LT(mapper.held(), 5 * granule) << "the freed block's chunk went back";
}

TEST_F(PageBackerTest, ASharedBlocksPagesArePooledElseNewWithinTheLimit) {
  std::vector<Assignment> pages;
  TESSERA_OK(backer.pages_for(1, 3, backer.page_max_granules(), pages));
  ASSERT_EQ(pages.size(), 3u);
  EXPECT_EQ(pages[0].head, 1u);
  EXPECT_EQ(pages[2].head, 3u) << "in slot order";
  EXPECT_EQ(mapper.held(), 3 * granule) << "made at the limit: no growth";
  for (const Assignment& page : pages) mapper.pool_page(page.page);
  const Page pooled = must(backer.page_of_at_most(2));
  EXPECT_EQ(pooled.granules, 2u);
  EXPECT_EQ(census().pages, 1u) << "from the pool";
  budget.set_fraction(4.0 / 16);  // 3 granules held: room for one more
  const Result<Page> rest = backer.page_of_at_most(8);
  ASSERT_TRUE(rest);
  EXPECT_EQ(rest->granules, 1u) << "the pooled rest of the chunk cut above";
  const Result<Page> last = backer.page_of_at_most(8);
  ASSERT_TRUE(last);
  EXPECT_EQ(last->granules, 1u) << "a new chunk, as large as the room";
  EXPECT_EQ(census().pages, 2u);
  const Result<Page> refused = backer.page_of_at_most(1);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, Errc::out_of_memory);
  EXPECT_NE(refused.error().message.find("no room under the limit"), std::string::npos) << refused.error().message;
}

}  // namespace
}  // namespace tessera::core
