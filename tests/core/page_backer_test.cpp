// The page backer over the mapper, the budget and the placements on the sim driver, without the allocator:
// a block gets a page under every slot it touches, pooled pages before new ones; a new chunk grows past the
// block while the device has room, and the surplus serves the next block with no create call; near the
// limit the chunk is the block's need again; far from the limit a run of the block's own slots is mapped as
// one page (its shared edges as granules), and a map that fails on the way leaves nothing mapped and every
// page pooled; out of memory leaves nothing mapped and loses no page; idle pages of a freed block are
// reclaimed into the pool; a shared block's pages come pooled, else new, within the limit.
#include "core/page_backer.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <initializer_list>

#include "driver/driver_fixtures.hpp"
#include "support/must.hpp"
#include "tessera/driver_decorators.hpp"
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
  EXPECT_EQ(mapper.held(), 3 * granule) << "no growth: a quarter of the 2 granules held is none";
  EXPECT_EQ(mapper.pool().granules(), 0u);
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

std::size_t slots_mapped_in(const Region& region) {
  std::size_t count = 0;
  for (std::size_t slot = region.table_begin(); slot < region.table_end(); ++slot) {
    count += region.is_mapped(slot) ? 1 : 0;
  }
  return count;
}

// A large device (far from the limit) behind a fault injector: runs of at least 16 of a block's own slots merge
// into one page. Its arena grows up unless asked to grow down (as with the default page_max).
struct CoalescingRig {
  SimDriverHandle sim;
  SimClock* clock = sim.clock;
  FaultInjectingDriver faults{std::move(sim.driver)};
  AllocatorConfig config;
  Observers observers;
  Mapper mapper{faults, observers};
  Budget budget{mapper};
  Placements placements;
  PageBacker backer{mapper, budget, placements, observers, config};
  Placement& placement;

  explicit CoalescingRig(bool grows_down = false, PrivatePoolIndex private_pool = shared_cache,
                         AllocatorConfig::Reclaim reclaim = AllocatorConfig::Reclaim::when_full,
                         Bytes capacity = 256 * granule)
      : sim(must(make_sim_driver({.capacity = capacity, .granularity = granule}))),
        config{.chunk_max = 64 * granule, .reclaim = reclaim},
        placements{granule, grows_down},
        placement(placements.find_or_add(Placements::key(default_stream, SizePool::large, default_tag, private_pool))) {
    placement.add_region(must(mapper.reserve(128 * granule)), 128 * granule);
  }

  Block* take(Bytes size) { return placement.take(placement.fit(size), size, size); }
  const Region& region() { return placement.arena().region(0); }
  std::size_t mapped_slots() { return slots_mapped_in(region()); }
  std::uint64_t calls(DriverCall call) const { return clock->modelled().calls_of(call); }
};

TEST(PageBackerCoalescing, FarFromTheLimitABlocksOwnSlotsAreOnePageAndItsSharedEdgeAGranule) {
  CoalescingRig rig;
  // The block ends inside its last granule, which it shares with whatever comes next; the other nineteen are
  // its own.
  Block* block = rig.take(20 * granule - MiB);
  const SlotRange touched = rig.placement.arena().touched_slots(*block);
  const SlotRange inner = rig.placement.arena().inner_slots(*block);
  ASSERT_EQ(touched.count, 20u);
  ASSERT_EQ(inner.count, 19u);
  const std::size_t edge = inner.first == touched.first ? touched.end() - 1 : touched.first;
  TESSERA_OK(rig.backer.back(rig.placement.arena(), *block, false));
  EXPECT_TRUE(rig.region().all_accessible(touched));
  EXPECT_EQ(rig.faults.census().mappings, 2u) << "one mapping for the nineteen own slots, one for the shared edge";
  EXPECT_EQ(rig.region().page_granules_at(inner.first), 19u);
  EXPECT_EQ(rig.region().page_granules_at(edge), 1u);
  EXPECT_EQ(rig.faults.census().pages, 1u);
  EXPECT_EQ(rig.mapper.held() - rig.mapper.pool().granules() * granule, 20 * granule);
}

TEST(PageBackerCoalescing, FewerThanSixteenOwnSlotsKeepGranulePages) {
  CoalescingRig rig;
  Block* block = rig.take(15 * granule);
  TESSERA_OK(rig.backer.back(rig.placement.arena(), *block, false));
  EXPECT_EQ(rig.faults.census().mappings, 15u);
}

TEST(PageBackerCoalescing, NearTheLimitEveryGranuleIsAPageOfItsOwn) {
  CoalescingRig rig;
  rig.budget.set_fraction(64.0 / 256);  // 64 granules: a 20-granule block passes a quarter of it
  Block* block = rig.take(20 * granule);
  TESSERA_OK(rig.backer.back(rig.placement.arena(), *block, false));
  EXPECT_GT(rig.mapper.held(), rig.budget.limit() / 4);
  EXPECT_EQ(rig.faults.census().mappings, 20u) << "each granule can go back on its own";
}

TEST(PageBackerCoalescing, AMapThatFailsAfterAMergedPageLeavesNothingMappedAndEveryPagePooled) {
  for (const std::uint64_t nth : {1u, 2u}) {
    SCOPED_TRACE(nth);
    CoalescingRig rig;
    Block* block = rig.take(20 * granule - MiB);
    rig.faults.fail(DriverCall::map, nth);
    const Result<void> backed = rig.backer.back(rig.placement.arena(), *block, false);
    ASSERT_FALSE(backed);
    EXPECT_EQ(rig.faults.census().mappings, 0u) << "the merged page mapped before the failure is unmapped";
    EXPECT_EQ(rig.mapped_slots(), 0u);
    EXPECT_EQ(rig.mapper.pool().granules() * granule, rig.mapper.held()) << "every page pooled";
    EXPECT_EQ(rig.faults.census().page_bytes, rig.mapper.held());
    rig.placements.give_back(block);
    rig.faults.clear_all();
    // Usable after: the same block is backed from the pool, with no create call.
    const std::size_t chunks = rig.faults.census().pages;
    Block* again = rig.take(20 * granule - MiB);
    TESSERA_OK(rig.backer.back(rig.placement.arena(), *again, false));
    EXPECT_EQ(rig.faults.census().pages, chunks);
    EXPECT_EQ(rig.faults.census().mappings, 2u);
  }
}

// A large arena that grows down (as with the default page_max), far from the limit, behind a fault injector:
// a block backed at the frontier also maps half the pooled granules just below itself, where the next
// blocks are carved, under its one set-access call.
struct AheadRig : CoalescingRig {
  explicit AheadRig(PrivatePoolIndex private_pool = shared_cache,
                    AllocatorConfig::Reclaim reclaim = AllocatorConfig::Reclaim::when_full,
                    Bytes capacity = 256 * granule)
      : CoalescingRig(true, private_pool, reclaim, capacity) {}
};

// 1,024 granules: the 16 a first 8-granule block holds are under 1/32 of it, so the granules below it are
// mapped as runs.
struct FarAheadRig : AheadRig {
  FarAheadRig() : AheadRig(shared_cache, AllocatorConfig::Reclaim::when_full, 1024 * granule) {}
};

TEST(PageBackerAhead, TheNextBlockAtTheFrontierFindsItsPagesMappedAndCostsNoCall) {
  AheadRig rig;
  Block* first = rig.take(8 * granule);
  TESSERA_OK(rig.backer.back(rig.placement.arena(), *first, false));
  EXPECT_EQ(rig.mapper.held(), 16 * granule) << "the chunk grew by as much again as the block needs";
  EXPECT_EQ(rig.mapped_slots(), 12u) << "the block's 8 granules and 4 below it: half of the 8 pooled";
  EXPECT_EQ(rig.mapper.pool().granules(), 4u) << "the other half stays pooled for the other arenas";
  EXPECT_EQ(rig.calls(DriverCall::set_access), 1u) << "one set-access call over the block and the granules below";
  const SlotRange touched = rig.placement.arena().touched_slots(*first);
  for (std::size_t slot = touched.first - 4; slot < touched.first; ++slot) {
    EXPECT_TRUE(rig.region().is_accessible(slot)) << slot;
    EXPECT_EQ(rig.region().page_granules_at(slot), 1u) << "granule pages: a block over one pins no more";
  }
  EXPECT_FALSE(rig.region().is_mapped(touched.first - 5));

  Block* frontier = rig.placement.fit(4 * granule);
  ASSERT_NE(frontier, nullptr);
  EXPECT_TRUE(rig.placement.is_cached(*frontier, 4 * granule)) << "the fast path's test holds";
  const CallTally before = rig.clock->modelled();
  Block* second = rig.take(4 * granule);
  TESSERA_OK(rig.backer.back(rig.placement.arena(), *second, false));
  EXPECT_EQ(rig.clock->modelled().calls, before.calls) << "no driver call for the next block";
}

TEST(PageBackerAhead, PastAQuarterOfTheLimitGranulesAreStillMappedAhead) {
  AheadRig rig;
  rig.budget.set_fraction(64.0 / 256);  // 64 granules: the 24-granule chunk below is past a quarter of it
  Block* block = rig.take(12 * granule);
  TESSERA_OK(rig.backer.back(rig.placement.arena(), *block, false));
  ASSERT_GT(rig.mapper.held(), rig.budget.limit() / 4);
  EXPECT_EQ(rig.mapper.held(), 24 * granule) << "mapping ahead holds nothing more";
  EXPECT_EQ(rig.mapped_slots(), 18u) << "the block's 12 granules and 6 below it: half of the 12 pooled";
  EXPECT_EQ(rig.mapper.pool().granules(), 6u);
  EXPECT_EQ(rig.calls(DriverCall::set_access), 1u);
}

// Pooled pages held beside the block: `held` granules of one chunk, the last `pooled` of them in the pool.
// A 2-granule block takes two of them, and half of the rest may be mapped ahead below it.
static void back_beside_pooled(AheadRig& rig, std::uint32_t held, std::uint32_t pooled) {
  rig.budget.set_fraction(64.0 / 256);  // 64 granules: 95% of it is 60.8
  std::uint32_t granules = held;
  const ChunkId chunk = must(rig.mapper.create_chunk(granules));
  rig.mapper.pool_page(Page{chunk, pooled, held - pooled});
  Block* block = rig.take(2 * granule);
  TESSERA_OK(rig.backer.back(rig.placement.arena(), *block, false));
  ASSERT_EQ(rig.mapper.held(), held * granule) << "nothing created";
}

TEST(PageBackerAhead, UpToNinetyFivePercentOfTheLimitGranulesAreMappedAhead) {
  AheadRig rig;
  back_beside_pooled(rig, 60, 4);
  EXPECT_EQ(rig.mapped_slots(), 3u) << "the block's 2 granules and 1 below it: half of the 2 left pooled";
  EXPECT_EQ(rig.mapper.pool().granules(), 1u);
}

TEST(PageBackerAhead, PastNinetyFivePercentOfTheLimitNothingIsMappedAhead) {
  AheadRig rig;
  back_beside_pooled(rig, 62, 4);
  EXPECT_EQ(rig.mapped_slots(), 2u);
  EXPECT_EQ(rig.mapper.pool().granules(), 2u) << "what is pooled stays pooled, for whichever block needs it";
}

// With reclaim:never no block takes idle pages: granules mapped ahead would be stranded in this arena.
TEST(PageBackerAhead, NotWhereBlocksNeverTakeIdlePages) {
  AheadRig rig(shared_cache, AllocatorConfig::Reclaim::never);
  Block* block = rig.take(8 * granule);
  TESSERA_OK(rig.backer.back(rig.placement.arena(), *block, false));
  EXPECT_EQ(rig.mapped_slots(), 8u);
  EXPECT_EQ(rig.mapper.pool().granules(), 8u) << "the surplus stays pooled, for any arena";
}

TEST(PageBackerAhead, NotInAPrivatePool) {
  AheadRig rig(PrivatePoolIndex{1});
  Block* block = rig.take(8 * granule);
  TESSERA_OK(rig.backer.back(rig.placement.arena(), *block, false));
  EXPECT_EQ(rig.mapped_slots(), 8u) << "a pool's free blocks keep their pages from every reclaim";
  EXPECT_EQ(rig.mapper.pool().granules(), 8u);
}

// The frontier was never freed, so it was in no reclaim list: it joins it when pages are mapped ahead there.
TEST(PageBackerAhead, PagesMappedAheadAreReclaimable) {
  AheadRig rig;
  Block* block = rig.take(8 * granule);
  TESSERA_OK(rig.backer.back(rig.placement.arena(), *block, false));
  std::vector<Page> taken;
  EXPECT_EQ(must(rig.backer.reclaim(8, &taken)), 4u) << "the four granules below the live block";
  EXPECT_EQ(taken.size(), 4u);
  EXPECT_EQ(rig.mapped_slots(), 8u);
  EXPECT_EQ(rig.mapper.pool().granules(), 8u);
  EXPECT_TRUE(rig.region().all_accessible(rig.placement.arena().touched_slots(*block))) << "the live block keeps its";
}

// Each failure on a fresh rig, while an 8-granule block is backed with 4 granules ahead: nothing stays
// mapped, every page is pooled, and the block is then backed again from the pool, the granules ahead included.
template <class Rig>
void expect_failures_lose_nothing(std::initializer_list<std::pair<DriverCall, std::uint64_t>> failures) {
  for (const auto& [call, nth] : failures) {
    SCOPED_TRACE(fmt::format("{} #{}", to_string(call), nth));
    Rig rig;
    Block* block = rig.take(8 * granule);
    rig.faults.fail(call, nth);
    ASSERT_FALSE(rig.backer.back(rig.placement.arena(), *block, false));
    EXPECT_EQ(rig.faults.census().mappings, 0u);
    EXPECT_EQ(rig.mapped_slots(), 0u);
    EXPECT_EQ(rig.mapper.pool().granules() * granule, rig.mapper.held()) << "every page pooled";
    rig.faults.clear_all();
    TESSERA_OK(rig.backer.back(rig.placement.arena(), *block, false));
    EXPECT_EQ(rig.mapped_slots(), 12u) << "backed again from the pool, pages ahead included";
    EXPECT_EQ(rig.faults.census().pages, 1u) << "no new chunk";
  }
}

TEST(PageBackerAhead, ACallThatFailsLeavesNothingMappedAndEveryPagePooled) {
  // The first granule ahead, the last, the block's first, its last, and the one set-access call.
  expect_failures_lose_nothing<AheadRig>({{DriverCall::map, 1},
                                          {DriverCall::map, 4},
                                          {DriverCall::map, 5},
                                          {DriverCall::map, 12},
                                          {DriverCall::set_access, 1}});
}

TEST(PageBackerAhead, FarFromTheLimitTheGranulesBelowAreOneRunMappedWithOneCall) {
  FarAheadRig rig;
  Block* first = rig.take(8 * granule);
  TESSERA_OK(rig.backer.back(rig.placement.arena(), *first, false));
  ASSERT_LE(rig.mapper.held(), rig.budget.limit() / 32) << "at most 1/32 of the limit held";
  EXPECT_EQ(rig.mapped_slots(), 12u) << "the block's 8 granules and 4 below it, as with granule pages";
  EXPECT_EQ(rig.mapper.pool().granules(), 4u);
  const SlotRange touched = rig.placement.arena().touched_slots(*first);
  EXPECT_EQ(rig.region().page_granules_at(touched.first - 4), 4u) << "one page for the four";
  EXPECT_EQ(rig.calls(DriverCall::map), 8u + 1u) << "the block's granule pages, then one call for the run";
  EXPECT_EQ(rig.calls(DriverCall::set_access), 1u);
  EXPECT_EQ(rig.faults.census().mappings, 9u);

  // The next block there finds its pages mapped, and reclaim takes the run back whole once it is idle.
  const CallTally before = rig.clock->modelled();
  Block* second = rig.take(4 * granule);
  TESSERA_OK(rig.backer.back(rig.placement.arena(), *second, false));
  EXPECT_EQ(rig.clock->modelled().calls, before.calls) << "no driver call for the next block";
  rig.placements.give_back(second);
  std::vector<Page> taken;
  EXPECT_EQ(must(rig.backer.reclaim(4, &taken)), 4u);
  ASSERT_EQ(taken.size(), 1u) << "the run is one page";
  EXPECT_EQ(taken.front().granules, 4u);
  EXPECT_EQ(rig.mapped_slots(), 8u);
  EXPECT_TRUE(rig.region().all_accessible(rig.placement.arena().touched_slots(*first))) << "the live block keeps its";
}

TEST(PageBackerAhead, ARunThatFailsToMapLeavesNothingMappedAndEveryPagePooled) {
  // The run ahead (the first map call), the block's first granule and its last, and the set-access call.
  expect_failures_lose_nothing<FarAheadRig>(
      {{DriverCall::map, 1}, {DriverCall::map, 2}, {DriverCall::map, 9}, {DriverCall::set_access, 1}});
}

// The ascend platform maps whole handles only: far from the limit a block's own slots get one handle of
// their own (one create, one map call), its unbacked edges in it while the block is small and at most half
// the limit is held, else a granule handle each; near the limit every granule is a handle; a create that
// fails leaves nothing mapped or held.
struct WholeHandleRig {
  explicit WholeHandleRig(Bytes capacity = 256 * granule)
      : sim(must(make_sim_driver({.capacity = capacity, .granularity = granule, .platform = SimPlatform::ascend}))) {
    placement.add_region(must(mapper.reserve(128 * granule)), 128 * granule);
  }
  SimDriverHandle sim;
  FaultInjectingDriver faults{std::move(sim.driver)};
  AllocatorConfig config{.chunk_max = 64 * granule};
  Observers observers;
  Mapper mapper{faults, observers};
  Budget budget{mapper};
  Placements placements{granule, false, /*whole_pages=*/true};
  PageBacker backer{mapper, budget, placements, observers, config};
  Placement& placement = placements.find_or_add(Placements::key(default_stream, SizePool::large, default_tag));

  Block* take(Bytes size) { return placement.take(placement.fit(size), size, size); }
  const Region& region() { return placement.arena().regions().front(); }
};

TEST(PageBackerWholeHandles, FarFromTheLimitABlocksOwnSlotsAndUnbackedEdgesAreOneHandle) {
  WholeHandleRig rig(4096 * granule);  // room for blocks of up to 16 granules to take their edges
  ASSERT_FALSE(rig.backer.pages_split());
  Block* block = rig.take(12 * granule - MiB);
  TESSERA_OK(rig.backer.back(rig.placement.arena(), *block, false));
  EXPECT_EQ(rig.faults.census().pages, 1u) << "eleven granules and the shared edge in one handle";
  EXPECT_EQ(rig.faults.census().mappings, 1u);
  EXPECT_EQ(rig.mapper.held(), 12 * granule) << "no growth where pages cannot be cut";
  Block* next = rig.take(4 * granule);  // its first slot is the first block's edge, backed already
  TESSERA_OK(rig.backer.back(rig.placement.arena(), *next, false));
  EXPECT_EQ(rig.faults.census().pages, 2u) << "the next block's own handle, over the slots not yet backed";
  EXPECT_EQ(rig.mapper.held(), 16 * granule);
  EXPECT_TRUE(rig.region().page_runs_past(0, 10)) << "the first handle holds the edge both blocks touch";
  // Freed, the next block's slots are cached: the handle its first slot shares runs on under the live first
  // block, not into the free space, so the fast path carves the same block again.
  rig.placements.give_back(next);
  Block* frontier = rig.placement.fit(4 * granule);
  ASSERT_NE(frontier, nullptr);
  ASSERT_TRUE(rig.region().page_runs_past(11, 15));
  EXPECT_TRUE(rig.placement.is_cached(*frontier, 4 * granule));
}

TEST(PageBackerWholeHandles, ABlockLargeBesideTheRoomHasAGranuleHandleAtItsEdge) {
  WholeHandleRig rig;  // 256 granules: a block of 12 is more than 1/256 of the room
  Block* block = rig.take(12 * granule - MiB);
  TESSERA_OK(rig.backer.back(rig.placement.arena(), *block, false));
  EXPECT_EQ(rig.faults.census().pages, 2u) << "eleven granules in one handle, the shared edge in another";
  EXPECT_EQ(rig.faults.census().mappings, 2u);
  EXPECT_EQ(rig.mapper.held(), 12 * granule);
}

TEST(PageBackerWholeHandles, FromHalfTheLimitAnEdgeIsAGranuleHandle) {
  WholeHandleRig rig(2048 * granule);
  std::uint32_t held_elsewhere = 1025;  // past half the limit, room for 1,023 more
  TESSERA_OK(rig.mapper.create_chunk(held_elsewhere));
  Block* block = rig.take(granule + MiB);       // small beside the room: 2 x 256 <= 1,023
  TESSERA_OK(rig.backer.back(rig.placement.arena(), *block, false));
  EXPECT_EQ(rig.faults.census().pages, 3u) << "past half the limit: the shared edge a handle of its own";
  EXPECT_EQ(rig.mapper.held(), 1027 * granule);
  EXPECT_FALSE(rig.region().page_runs_past(0, 0)) << "the block's own granule is a handle apart from its edge's";
}

TEST(PageBackerWholeHandles, NearTheLimitEveryGranuleIsAHandle) {
  WholeHandleRig rig;
  rig.budget.set_fraction(64.0 / 256);  // 64 granules: whole handles while at most 57.6 are held
  Block* first = rig.take(58 * granule);
  TESSERA_OK(rig.backer.back(rig.placement.arena(), *first, false));
  EXPECT_EQ(rig.faults.census().pages, 1u) << "nothing held yet: far from the limit";
  Block* second = rig.take(4 * granule);
  TESSERA_OK(rig.backer.back(rig.placement.arena(), *second, false));
  EXPECT_EQ(rig.faults.census().pages, 5u) << "58 granules held, past 90% of 64: one handle a granule";
}

// A block over part of a free handle would pin the rest of it whole. Where that rest is large beside the
// room left under the limit, the handle goes back to the device and the block gets a handle of its own;
// where it is small, the block shares the handle and costs no driver call.
struct StraddleRig : WholeHandleRig {
  Block* freed_handle = nullptr;  // 40 granules mapped as one handle, free again
  StraddleRig() {
    budget.set_fraction(64.0 / 256);  // 64 granules
    freed_handle = take(40 * granule);
    TESSERA_OK(backer.back(placement.arena(), *freed_handle, false));
    placements.give_back(freed_handle);
  }
};

TEST(PageBackerWholeHandles, ABlockOverPartOfAFreeHandleThatWouldPinMuchOfTheRoomGetsItsOwn) {
  StraddleRig rig;
  ASSERT_EQ(rig.faults.census().pages, 1u);
  EXPECT_FALSE(rig.placement.is_cached(*rig.placement.fit(8 * granule), 8 * granule))
      << "the handle runs on into the free block: the page backer decides";
  Block* block = rig.take(8 * granule);  // the low 8 of the handle's 40: 32 pinned, 24 left under the limit
  ASSERT_TRUE(rig.region().page_runs_past(0, 7));
  TESSERA_OK(rig.backer.back(rig.placement.arena(), *block, false));
  EXPECT_EQ(rig.faults.census().pages, 1u) << "the 40-granule handle went back; one of 8 made";
  EXPECT_EQ(rig.faults.census().page_bytes, 8 * granule);
  EXPECT_EQ(rig.mapper.held(), 8 * granule);
  EXPECT_EQ(rig.mapper.pool().granules(), 0u);
  EXPECT_EQ(rig.region().mapped_slots(), 8u);
  EXPECT_TRUE(rig.region().all_accessible({0, 8}));
  EXPECT_FALSE(rig.region().page_runs_past(0, 7));
}

TEST(PageBackerWholeHandles, ABlockOverPartOfAFreeHandleSharesItWhenWhatItPinsIsSmallBesideTheRoom) {
  WholeHandleRig rig;  // 256 granules
  Block* first = rig.take(4 * granule);
  TESSERA_OK(rig.backer.back(rig.placement.arena(), *first, false));
  rig.placements.give_back(first);
  Block* block = rig.take(2 * granule);  // pins 2 granules, 252 left: within 1/32 of the room
  TESSERA_OK(rig.backer.back(rig.placement.arena(), *block, false));
  EXPECT_EQ(rig.faults.census().pages, 1u) << "no handle made or released";
  EXPECT_EQ(rig.faults.census().mappings, 1u);
  EXPECT_EQ(rig.mapper.held(), 4 * granule);
}

TEST(PageBackerWholeHandles, AHandleUnderALiveNeighbourIsNeverReleased) {
  WholeHandleRig rig;  // 256 granules
  Block* first = rig.take(4 * granule);
  TESSERA_OK(rig.backer.back(rig.placement.arena(), *first, false));
  rig.placements.give_back(first);
  Block* low = rig.take(granule);  // shares the handle: 3 pinned, 252 left
  TESSERA_OK(rig.backer.back(rig.placement.arena(), *low, false));
  rig.budget.set_fraction(64.0 / 256);  // 60 left: 3 pinned would now be too many, but `low` lives on it
  Block* high = rig.take(granule);
  TESSERA_OK(rig.backer.back(rig.placement.arena(), *high, false));
  EXPECT_EQ(rig.faults.census().pages, 1u) << "shared again, not released";
  EXPECT_EQ(rig.faults.census().mappings, 1u);
  EXPECT_TRUE(rig.region().all_accessible(rig.placement.arena().touched_slots(*low)));
}

// A handle that cannot be taken back is shared, as far from the limit: the allocation still succeeds.
TEST(PageBackerWholeHandles, AFailedProofOrUnmapLeavesTheHandleSharedAndTheBlockBacked) {
  for (const DriverCall call : {DriverCall::synchronize_stream, DriverCall::unmap}) {
    SCOPED_TRACE(to_string(call));
    StraddleRig rig;
    Block* block = rig.take(8 * granule);
    rig.faults.fail(call, 1);
    TESSERA_OK(rig.backer.back(rig.placement.arena(), *block, false));
    EXPECT_EQ(rig.faults.injected(call), 1u);
    EXPECT_EQ(rig.faults.census().mappings, 1u) << "the handle stays mapped, under the block";
    EXPECT_EQ(rig.region().mapped_slots(), 40u);
    EXPECT_EQ(rig.mapper.held(), 40 * granule);
    EXPECT_EQ(rig.faults.census().page_bytes, rig.mapper.held());
    EXPECT_TRUE(rig.region().all_accessible({0, 8}));
  }
}

// A private pool's free blocks keep their pages (a graph replays into them): never taken back here.
TEST(PageBackerWholeHandles, APrivatePoolsHandleIsShared) {
  WholeHandleRig rig;
  rig.budget.set_fraction(64.0 / 256);
  Placement& pool = rig.placements.find_or_add(
      Placements::key(default_stream, SizePool::large, default_tag, PrivatePoolIndex{1}));
  pool.add_region(must(rig.mapper.reserve(128 * granule)), 128 * granule);
  Block* freed = pool.take(pool.fit(40 * granule), 40 * granule, 40 * granule);
  TESSERA_OK(rig.backer.back(pool.arena(), *freed, false));
  rig.placements.give_back(freed);
  Block* block = pool.take(pool.fit(8 * granule), 8 * granule, 8 * granule);
  TESSERA_OK(rig.backer.back(pool.arena(), *block, false));
  EXPECT_EQ(rig.faults.census().mappings, 1u);
  EXPECT_EQ(rig.mapper.held(), 40 * granule) << "shared, not released";
}

TEST(PageBackerWholeHandles, AFailedReleaseLeavesTheHandlePooledAndTheBlockBacked) {
  StraddleRig rig;
  Block* block = rig.take(8 * granule);
  rig.faults.fail(DriverCall::release_chunk, 1);
  TESSERA_OK(rig.backer.back(rig.placement.arena(), *block, false));
  EXPECT_EQ(rig.mapper.pool().granules(), 40u) << "pooled, still held";
  EXPECT_EQ(rig.mapper.held(), 48 * granule);
  EXPECT_EQ(rig.faults.census().page_bytes, rig.mapper.held());
  EXPECT_TRUE(rig.region().all_accessible({0, 8}));
  TESSERA_OK(rig.mapper.release_pooled(0));
  EXPECT_EQ(rig.mapper.held(), 8 * granule);
}

TEST(PageBackerWholeHandles, ACreateThatFailsLeavesNothingMappedOrHeld) {
  WholeHandleRig rig;
  rig.budget.set_fraction(64.0 / 256);
  Block* first = rig.take(33 * granule);  // past half the limit: the next block's edge is a handle of its own
  TESSERA_OK(rig.backer.back(rig.placement.arena(), *first, false));
  Block* block = rig.take(12 * granule - MiB);
  rig.faults.fail(DriverCall::create_chunk, 2);  // the edge's handle, after the inner run's
  const Result<void> backed = rig.backer.back(rig.placement.arena(), *block, false);
  ASSERT_FALSE(backed);
  EXPECT_EQ(rig.faults.census().mappings, 1u) << "the first block's only";
  EXPECT_EQ(rig.region().mapped_slots(), 33u);
  EXPECT_EQ(rig.mapper.pool().granules(), 11u) << "the handle made is pooled";
  EXPECT_EQ(rig.mapper.held(), 44 * granule);
  EXPECT_EQ(rig.faults.census().page_bytes, rig.mapper.held());
}

}  // namespace
}  // namespace tessera::core
