// The mapper on its own, over the sim driver wrapped in a call counter, a fault injector and a capacity
// limit: create_chunk halves the size while the device is out of memory, down to one granule, and counts what
// it holds; release_pooled gives back only wholly pooled chunks, the largest first, keeping at most what is
// asked; map_pages maps each assignment and sets access once per run of consecutive slots, and when a map or
// a set_access fails leaves nothing mapped and accessible (each page pooled again, or kept mapped without
// access where its unmap fails too); unmap_idle synchronizes the streams first and unmaps nothing when that
// proof fails; a destroy_event or free_backup that fails is retried later. After every failure the driver's
// census matches what the mapper accounts for (nothing leaked), and the observers' statistics agree with
// held() and the pool.
#include "core/mapper.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "driver/driver_fixtures.hpp"
#include "support/must.hpp"
#include "tessera/driver_decorators.hpp"
#include "tessera/drivers.hpp"

namespace tessera::core {
namespace {

using test_support::must;
using Repeat = FaultInjectingDriver::Repeat;

constexpr Bytes granule = 2 * MiB;
constexpr std::size_t region_slots = 64;
const StreamId side_stream{0x5eed'0000};
const StreamId other_stream{0x5eed'1000};

// The sim driver (a large device) under a capacity limit, a fault injector and a call counter, outermost.
struct Rig {
  explicit Rig(Bytes limit = 32 * granule, SimPlatform platform = SimPlatform::cuda)
      : driver(make_stack(limit, platform, faults)), mapper(*driver, observers) {
    arena.add_region(must(mapper.reserve(region_slots * granule)), region_slots * granule);
  }

  static std::unique_ptr<CountingDriver> make_stack(Bytes limit, SimPlatform platform, FaultInjectingDriver*& faults) {
    SimDriverHandle sim =
        must(make_sim_driver({.capacity = 256 * granule, .granularity = granule, .platform = platform}));
    auto limited = std::make_unique<CapacityLimitDriver>(std::move(sim.driver), limit);
    auto injecting = std::make_unique<FaultInjectingDriver>(std::move(limited));
    faults = injecting.get();
    return std::make_unique<CountingDriver>(std::move(injecting));
  }

  FaultInjectingDriver* faults = nullptr;
  std::unique_ptr<CountingDriver> driver;
  Observers observers;
  Mapper mapper;
  Arena arena{0, side_stream, SizePool::large, default_tag, granule};

  Region& region() { return arena.region(0); }
  DriverCensus census() const { return driver->census(); }
  std::uint64_t calls(DriverCall call) const { return driver->tally().calls_of(call); }

  // A new chunk of exactly `granules`, none of it pooled.
  ChunkId chunk(std::uint32_t granules) {
    std::uint32_t created = granules;
    const ChunkId chunk = must(mapper.create_chunk(created));
    EXPECT_EQ(created, granules);
    return chunk;
  }

  std::size_t slots_where(bool (Region::*test)(std::size_t) const noexcept) {
    std::size_t count = 0;
    for (std::size_t slot = region().table_begin(); slot < region().table_end(); ++slot) {
      if ((region().*test)(slot)) ++count;
    }
    return count;
  }

  // What the driver holds is what the mapper accounts for, and the observers were told as much: every page
  // byte is held, every held granule is mapped in the region's page table or pooled, every mapping is a page
  // of the table, and the statistics follow.
  void expect_accounts_agree() {
    const DriverCensus now = census();
    const TesseraStats stats = observers.stats();
    EXPECT_EQ(now.page_bytes, mapper.held()) << "page bytes held and not accounted for";
    EXPECT_EQ(now.pages, mapper.pool().chunk_count()) << "chunks the mapper forgot";
    EXPECT_EQ(now.mapped_bytes, slots_where(&Region::is_mapped) * granule) << "mappings the page table lacks";
    EXPECT_EQ(mapper.held(), now.mapped_bytes + mapper.pool().granules() * granule)
        << "a page neither mapped nor pooled";
    std::size_t heads = 0;
    for (std::size_t slot = region().table_begin(); slot < region().table_end(); ++slot) {
      if (region().page_granules_at(slot) > 0) ++heads;
    }
    EXPECT_EQ(now.mappings, heads);
    EXPECT_EQ(stats.common.reserved_bytes, mapper.held());
    EXPECT_EQ(stats.common.num_device_alloc - stats.common.num_device_free, now.pages);
    EXPECT_EQ(stats.pooled_bytes, mapper.pool().granules() * granule);
    EXPECT_EQ(stats.mapped_bytes, now.mapped_bytes);
    EXPECT_EQ(stats.pages_mapped - stats.pages_unmapped, now.mappings);
  }

  // Everything given back: what the mapper held was all it knew of (nothing leaked).
  void expect_nothing_left() {
    faults->clear_all();
    mapper.retry_stale_events();
    mapper.unmap_all(region());
    mapper.release_all_pooled();
    const DriverCensus left = census();
    EXPECT_EQ(left, DriverCensus{}) << left.pages << " pages, " << left.mappings << " mappings, " << left.events
                                    << " events, " << left.host_buffers << " host buffers, " << left.reservations
                                    << " reservations left";
  }
};

// --- chunks ---------------------------------------------------------------------------------------------

TEST(Mapper, CreateChunkHalvesTheSizeWhileTheDeviceIsOutOfMemoryDownToOneGranule) {
  Rig rig(5 * granule);
  std::uint32_t granules = 8;
  const ChunkId first = must(rig.mapper.create_chunk(granules));
  EXPECT_EQ(granules, 4u) << "8 granules do not fit in 5; 4 do";
  EXPECT_EQ(rig.calls(DriverCall::create_chunk), 2u);
  EXPECT_EQ(rig.mapper.held(), 4 * granule);
  EXPECT_EQ(rig.mapper.pool().chunk_granules(first), 4u);
  EXPECT_EQ(rig.mapper.pool().granules(), 0u) << "none of a new chunk is pooled";
  granules = 8;
  const ChunkId second = must(rig.mapper.create_chunk(granules));
  EXPECT_EQ(granules, 1u) << "8, 4 and 2 do not fit in the granule left";
  EXPECT_EQ(rig.calls(DriverCall::create_chunk), 6u);
  EXPECT_EQ(rig.mapper.held(), 5 * granule);
  granules = 8;
  const Result<ChunkId> refused = rig.mapper.create_chunk(granules);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, Errc::out_of_memory);
  EXPECT_EQ(granules, 1u) << "down to one granule, and no further";
  EXPECT_EQ(rig.calls(DriverCall::create_chunk), 10u);
  EXPECT_EQ(rig.mapper.held(), 5 * granule) << "a refusal holds nothing more";
  EXPECT_EQ(rig.census().pages, 2u);
  EXPECT_EQ(rig.observers.stats().common.num_device_alloc, 2u);
  rig.mapper.pool_page(Page{first, 4, 0});
  rig.mapper.pool_page(Page{second, 1, 0});
  rig.expect_accounts_agree();
  rig.expect_nothing_left();
}

TEST(Mapper, ACreateChunkFailureOtherThanOutOfMemoryIsNotRetriedSmaller) {
  Rig rig;
  rig.faults->fail(DriverCall::create_chunk, 1);
  std::uint32_t granules = 4;
  const Result<ChunkId> refused = rig.mapper.create_chunk(granules);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, Errc::platform);
  EXPECT_EQ(granules, 4u);
  EXPECT_EQ(rig.calls(DriverCall::create_chunk), 1u);
  EXPECT_EQ(rig.mapper.held(), 0u);
  EXPECT_EQ(rig.census().pages, 0u);
  rig.expect_accounts_agree();
}

TEST(Mapper, ReleasePooledGivesBackWhollyPooledChunksLargestFirstKeepingAtMostWhatIsAsked) {
  Rig rig;
  const ChunkId one = rig.chunk(1);
  const ChunkId two = rig.chunk(2);
  const ChunkId four = rig.chunk(4);
  const ChunkId partly = rig.chunk(3);  // two granules pooled, one mapped
  rig.mapper.pool_page(Page{one, 1, 0});
  rig.mapper.pool_page(Page{two, 2, 0});
  rig.mapper.pool_page(Page{four, 4, 0});
  rig.mapper.pool_page(Page{partly, 2, 0});
  const Assignment mapped{0, Page{partly, 1, 2}};
  TESSERA_OK(rig.mapper.map_pages(rig.region(), std::span(&mapped, 1)));
  ASSERT_EQ(rig.mapper.pool().granules(), 9u);
  rig.expect_accounts_agree();

  // 9 pooled, keep at most 5: the largest chunk (4) goes and leaves 5. Smallest first would have given
  // back the chunks of 1 and 2 and then the 4, keeping 2.
  TESSERA_OK(rig.mapper.release_pooled(5));
  EXPECT_EQ(rig.mapper.pool().granules(), 5u);
  EXPECT_EQ(rig.mapper.pool().chunk_granules(four), 0u) << "the largest went";
  EXPECT_EQ(rig.mapper.pool().chunk_granules(two), 2u);
  EXPECT_EQ(rig.mapper.pool().chunk_granules(one), 1u);
  EXPECT_EQ(rig.mapper.held(), 6 * granule);
  EXPECT_EQ(rig.census().pages, 3u);
  EXPECT_EQ(rig.observers.stats().common.num_device_free, 1u);
  rig.expect_accounts_agree();

  // Keep none: the chunks of 2 and 1 go; the partly mapped chunk's pooled granules stay.
  TESSERA_OK(rig.mapper.release_pooled(0));
  EXPECT_EQ(rig.mapper.pool().granules(), 2u);
  EXPECT_EQ(rig.mapper.pool().pooled_of(partly), 2u);
  EXPECT_EQ(rig.mapper.pool().chunk_count(), 1u);
  EXPECT_EQ(rig.mapper.held(), 3 * granule);
  EXPECT_EQ(rig.census().pages, 1u);
  EXPECT_TRUE(rig.region().is_accessible(0)) << "the mapped part is untouched";
  rig.expect_accounts_agree();
  rig.expect_nothing_left();
}

TEST(Mapper, AChunkWhoseReleaseFailsStaysPooledAndHeld) {
  Rig rig;
  const ChunkId two = rig.chunk(2);
  const ChunkId one = rig.chunk(1);
  rig.mapper.pool_page(Page{two, 2, 0});
  rig.mapper.pool_page(Page{one, 1, 0});
  rig.faults->fail(DriverCall::release_chunk, 1);
  const Result<void> released = rig.mapper.release_pooled(0);
  ASSERT_FALSE(released);
  EXPECT_EQ(rig.calls(DriverCall::release_chunk), 1u) << "it stops at the failure";
  EXPECT_EQ(rig.mapper.held(), 3 * granule);
  EXPECT_EQ(rig.mapper.pool().pooled_of(two), 2u) << "pooled again, whole";
  EXPECT_EQ(rig.census().pages, 2u);
  rig.expect_accounts_agree();
  TESSERA_OK(rig.mapper.release_pooled(0));
  EXPECT_EQ(rig.census().pages, 0u);
  EXPECT_EQ(rig.mapper.held(), 0u);
  rig.expect_accounts_agree();
}

// --- mapping --------------------------------------------------------------------------------------------

TEST(Mapper, MapPagesMapsEachAssignmentAndSetsAccessOncePerRunOfConsecutiveSlots) {
  Rig rig;
  const ChunkId a = rig.chunk(4);
  const ChunkId b = rig.chunk(1);
  const ChunkId c = rig.chunk(2);
  // Slots [0, 5) in three pages, then [8, 10) in one: two runs.
  const std::vector<Assignment> pages{
      {0, Page{a, 2, 0}}, {2, Page{a, 2, 2}}, {4, Page{b, 1, 0}}, {8, Page{c, 2, 0}}};
  rig.driver->reset();
  TESSERA_OK(rig.mapper.map_pages(rig.region(), pages));
  EXPECT_EQ(rig.calls(DriverCall::map), 4u) << "one map a page";
  EXPECT_EQ(rig.calls(DriverCall::set_access), 2u) << "one set_access a run of consecutive slots";
  EXPECT_EQ(rig.census().mappings, 4u);
  for (std::size_t slot = 0; slot < 12; ++slot) {
    const bool expected = slot < 5 || slot == 8 || slot == 9;
    EXPECT_EQ(rig.region().is_mapped(slot), expected) << "slot " << slot;
    EXPECT_EQ(rig.region().is_accessible(slot), expected) << "slot " << slot;
  }
  EXPECT_TRUE(rig.region().all_accessible({0, 5}));
  EXPECT_FALSE(rig.region().all_accessible({0, 6}));
  EXPECT_EQ(rig.region().page_granules_at(0), 2u);
  EXPECT_EQ(rig.region().page_granules_at(1), 0u) << "not a head";
  EXPECT_EQ(rig.region().page_granules_at(2), 2u);
  EXPECT_EQ(rig.region().page_offset_at(2), 2u);
  EXPECT_EQ(rig.region().chunk_at(3), a);
  EXPECT_EQ(rig.region().chunk_at(4), b);
  EXPECT_EQ(rig.region().chunk_at(9), c);
  const TesseraStats stats = rig.observers.stats();
  EXPECT_EQ(stats.pages_mapped, 4u);
  EXPECT_EQ(stats.mapped_bytes, 7 * granule);
  rig.expect_accounts_agree();
  rig.expect_nothing_left();
}

TEST(Mapper, APageThatIsAWholeChunkIsMappedWithoutMapPart) {
  // The ascend platform maps whole pages only: map_part is unsupported there.
  Rig rig(32 * granule, SimPlatform::ascend);
  const ChunkId whole = rig.chunk(2);
  const ChunkId split = rig.chunk(2);
  const std::vector<Assignment> pages{{0, Page{whole, 2, 0}}};
  TESSERA_OK(rig.mapper.map_pages(rig.region(), pages));
  EXPECT_TRUE(rig.region().all_accessible({0, 2}));
  // A part of a chunk needs map_part: refused, and rolled back.
  rig.mapper.pool_page(Page{split, 1, 1});
  const std::vector<Assignment> part{{4, Page{split, 1, 0}}};
  const Result<void> mapped = rig.mapper.map_pages(rig.region(), part);
  ASSERT_FALSE(mapped);
  EXPECT_EQ(mapped.error().code, Errc::unsupported);
  EXPECT_FALSE(rig.region().is_mapped(4));
  EXPECT_EQ(rig.mapper.pool().pooled_of(split), 2u) << "the page is pooled again";
  EXPECT_EQ(rig.census().mappings, 1u);
  rig.expect_accounts_agree();
  rig.expect_nothing_left();
}

// Three pages in two runs of slots: [0, 2) and [2, 3) from one chunk of 3 granules, [6, 7) from a chunk of 1.
struct FailedMapping {
  Rig rig;
  ChunkId a = rig.chunk(3);
  ChunkId b = rig.chunk(1);
  std::vector<Assignment> pages{{0, Page{a, 2, 0}}, {2, Page{a, 1, 2}}, {6, Page{b, 1, 0}}};
};

TEST(Mapper, AFailedMapLeavesNothingMappedAndEveryPagePooled) {
  for (const std::uint64_t nth : {1u, 2u, 3u}) {
    SCOPED_TRACE(nth);
    FailedMapping setup;
    Rig& rig = setup.rig;
    rig.faults->fail(DriverCall::map, nth);
    const Result<void> mapped = rig.mapper.map_pages(rig.region(), setup.pages);
    ASSERT_FALSE(mapped);
    EXPECT_EQ(rig.slots_where(&Region::is_mapped), 0u);
    EXPECT_EQ(rig.slots_where(&Region::is_accessible), 0u);
    EXPECT_EQ(rig.census().mappings, 0u);
    EXPECT_EQ(rig.calls(DriverCall::unmap), nth - 1) << "each page mapped before the failure, unmapped";
    EXPECT_EQ(rig.calls(DriverCall::set_access), 0u);
    EXPECT_EQ(rig.mapper.pool().granules(), 4u) << "every page pooled, mapped or not";
    EXPECT_EQ(rig.observers.stats().pages_mapped, 0u);
    rig.expect_accounts_agree();
    TESSERA_OK(rig.mapper.release_pooled(0));
    EXPECT_EQ(rig.census().pages, 0u) << "the chunks were whole again";
    rig.expect_nothing_left();
  }
}

TEST(Mapper, AFailedSetAccessUnmapsAndPoolsEveryPageOfTheCall) {
  for (const std::uint64_t nth : {1u, 2u}) {
    SCOPED_TRACE(nth);
    FailedMapping setup;
    Rig& rig = setup.rig;
    rig.faults->fail(DriverCall::set_access, nth);
    const Result<void> mapped = rig.mapper.map_pages(rig.region(), setup.pages);
    ASSERT_FALSE(mapped);
    EXPECT_EQ(rig.calls(DriverCall::set_access), nth) << "it stops at the failure";
    EXPECT_EQ(rig.calls(DriverCall::unmap), 3u) << "even the run whose access was set";
    EXPECT_EQ(rig.slots_where(&Region::is_mapped), 0u);
    EXPECT_EQ(rig.census().mappings, 0u);
    EXPECT_EQ(rig.mapper.pool().granules(), 4u);
    EXPECT_EQ(rig.observers.stats().pages_mapped, 0u);
    rig.expect_accounts_agree();
    rig.expect_nothing_left();
  }
}

TEST(Mapper, APageWhoseUnmapAlsoFailsStaysMappedWithoutAccess) {
  for (const DriverCall failing : {DriverCall::map, DriverCall::set_access}) {
    SCOPED_TRACE(to_string(failing));
    FailedMapping setup;
    Rig& rig = setup.rig;
    // The map of the third page (or the first set_access) fails, then the unmap of the first page.
    rig.faults->fail(failing, failing == DriverCall::map ? 3 : 1);
    rig.faults->fail(DriverCall::unmap, 1);
    const Result<void> mapped = rig.mapper.map_pages(rig.region(), setup.pages);
    ASSERT_FALSE(mapped);
    EXPECT_TRUE(rig.region().is_mapped(0));
    EXPECT_TRUE(rig.region().is_mapped(1));
    EXPECT_FALSE(rig.region().is_accessible(0)) << "kept, but never handed out before access is set";
    EXPECT_FALSE(rig.region().is_accessible(1));
    EXPECT_FALSE(rig.region().all_accessible({0, 2}));
    EXPECT_EQ(rig.region().page_granules_at(0), 2u);
    EXPECT_FALSE(rig.region().is_mapped(2)) << "unmapped and pooled";
    EXPECT_FALSE(rig.region().is_mapped(6));
    EXPECT_EQ(rig.slots_where(&Region::is_accessible), 0u);
    EXPECT_EQ(rig.census().mappings, 1u) << "the kept page only";
    EXPECT_EQ(rig.mapper.pool().granules(), 2u);
    EXPECT_EQ(rig.observers.stats().pages_mapped, 1u) << "the kept page is told as mapped";
    rig.expect_accounts_agree();
    // restore_access gives it access again.
    TESSERA_OK(rig.mapper.restore_access(rig.region(), SlotRange{0, 8}));
    EXPECT_TRUE(rig.region().all_accessible({0, 2}));
    EXPECT_FALSE(rig.region().is_accessible(2));
    rig.expect_accounts_agree();
    rig.expect_nothing_left();
  }
}

TEST(Mapper, UnmapRegionPoolsEveryPageUntilAnUnmapFails) {
  FailedMapping setup;
  Rig& rig = setup.rig;
  TESSERA_OK(rig.mapper.map_pages(rig.region(), setup.pages));
  rig.faults->fail(DriverCall::unmap, 2);
  ASSERT_FALSE(rig.mapper.unmap_region(rig.region()));
  EXPECT_FALSE(rig.region().is_mapped(0)) << "the first unmap was done";
  EXPECT_TRUE(rig.region().is_accessible(2)) << "the failed one is still mapped";
  EXPECT_TRUE(rig.region().is_accessible(6));
  EXPECT_EQ(rig.mapper.pool().granules(), 2u);
  rig.expect_accounts_agree();
  TESSERA_OK(rig.mapper.unmap_region(rig.region()));
  EXPECT_EQ(rig.slots_where(&Region::is_mapped), 0u);
  EXPECT_EQ(rig.mapper.pool().granules(), 4u);
  EXPECT_EQ(rig.observers.stats().pages_unmapped, 3u);
  rig.expect_accounts_agree();
  rig.expect_nothing_left();
}

// --- idle pages -----------------------------------------------------------------------------------------

TEST(Mapper, UnmapIdleSynchronizesTheStreamBeforeItUnmapsAndPoolsThePages) {
  FailedMapping setup;
  Rig& rig = setup.rig;
  TESSERA_OK(rig.mapper.map_pages(rig.region(), setup.pages));
  StreamControl* streams = rig.driver->stream_control();
  ASSERT_NE(streams, nullptr);
  streams->hold(side_stream);  // work queued on the arena's stream stays pending
  const EventId queued = must(rig.mapper.record_event(side_stream));
  ASSERT_FALSE(must(rig.mapper.query_event(queued)));
  rig.driver->reset();
  const std::vector<IdlePage> idle{{&rig.arena, 0, 0, 2}, {&rig.arena, 0, 6, 1}};
  std::vector<Page> taken;
  const Mapper::Unmapped unmapped = rig.mapper.unmap_idle(idle, &taken);
  EXPECT_TRUE(unmapped.proven);
  EXPECT_TRUE(unmapped.failure.ok());
  EXPECT_EQ(unmapped.granules, 3u);
  EXPECT_TRUE(must(rig.mapper.query_event(queued))) << "the proof waited for the stream's work";
  EXPECT_EQ(rig.calls(DriverCall::synchronize_stream), 1u) << "one stream, synchronized once";
  EXPECT_EQ(rig.calls(DriverCall::unmap), 2u);
  ASSERT_EQ(taken.size(), 2u);
  EXPECT_EQ(taken[0].chunk, setup.a);
  EXPECT_EQ(taken[0].granules, 2u);
  EXPECT_EQ(taken[0].offset, 0u);
  EXPECT_EQ(taken[1].chunk, setup.b);
  EXPECT_FALSE(rig.region().is_mapped(0));
  EXPECT_FALSE(rig.region().is_mapped(6));
  EXPECT_TRUE(rig.region().is_accessible(2)) << "not idle, not touched";
  EXPECT_EQ(rig.mapper.pool().granules(), 3u);
  const TesseraStats stats = rig.observers.stats();
  EXPECT_EQ(stats.pages_unmapped, 2u);
  EXPECT_EQ(stats.pages_reclaimed, 2u);
  EXPECT_EQ(stats.syncs, 1u);
  rig.expect_accounts_agree();
  rig.mapper.destroy_event(queued);
  EXPECT_EQ(rig.census().events, 0u);
  rig.expect_nothing_left();
}

TEST(Mapper, WhenTheProofOfIdlenessFailsUnmapIdleUnmapsNothing) {
  FailedMapping setup;
  Rig& rig = setup.rig;
  TESSERA_OK(rig.mapper.map_pages(rig.region(), setup.pages));
  rig.faults->fail(DriverCall::synchronize_stream, 1);
  rig.driver->reset();
  const std::vector<IdlePage> idle{{&rig.arena, 0, 0, 2}, {&rig.arena, 0, 2, 1}, {&rig.arena, 0, 6, 1}};
  std::vector<Page> taken;
  const Mapper::Unmapped unmapped = rig.mapper.unmap_idle(idle, &taken);
  EXPECT_FALSE(unmapped.proven);
  EXPECT_FALSE(unmapped.failure.ok());
  EXPECT_EQ(unmapped.granules, 0u);
  EXPECT_TRUE(taken.empty());
  EXPECT_EQ(rig.calls(DriverCall::unmap), 0u);
  EXPECT_EQ(rig.census().mappings, 3u);
  EXPECT_EQ(rig.slots_where(&Region::is_accessible), 4u);
  EXPECT_EQ(rig.mapper.pool().granules(), 0u);
  EXPECT_EQ(rig.observers.stats().pages_unmapped, 0u);
  EXPECT_EQ(rig.observers.stats().syncs, 0u);
  rig.expect_accounts_agree();
  rig.expect_nothing_left();
}

TEST(Mapper, UnmapIdleSynchronizesEachStreamOnceAndStopsAtTheFirstFailedUnmap) {
  FailedMapping setup;
  Rig& rig = setup.rig;
  TESSERA_OK(rig.mapper.map_pages(rig.region(), setup.pages));
  Arena other(1, other_stream, SizePool::large, default_tag, granule);
  other.add_region(must(rig.mapper.reserve(8 * granule)), 8 * granule);
  const ChunkId c = rig.chunk(1);
  const std::vector<Assignment> other_page{{3, Page{c, 1, 0}}};
  TESSERA_OK(rig.mapper.map_pages(other.region(0), other_page));
  rig.driver->reset();
  rig.faults->fail(DriverCall::unmap, 2);
  const std::vector<IdlePage> idle{{&rig.arena, 0, 0, 2}, {&other, 0, 3, 1}, {&rig.arena, 0, 6, 1}};
  const Mapper::Unmapped unmapped = rig.mapper.unmap_idle(idle, nullptr);
  EXPECT_TRUE(unmapped.proven);
  EXPECT_FALSE(unmapped.failure.ok());
  EXPECT_EQ(rig.calls(DriverCall::synchronize_stream), 2u) << "two streams, each once";
  EXPECT_EQ(unmapped.granules, 2u) << "the first page only";
  EXPECT_EQ(rig.calls(DriverCall::unmap), 2u) << "none after the failure";
  EXPECT_FALSE(rig.region().is_mapped(0));
  EXPECT_TRUE(other.region(0).is_accessible(3));
  EXPECT_TRUE(rig.region().is_accessible(6));
  EXPECT_EQ(rig.mapper.pool().granules(), 2u);
  EXPECT_EQ(rig.observers.stats().pages_unmapped, 1u);
  EXPECT_EQ(rig.census().mappings, 3u);
  rig.faults->clear_all();
  TESSERA_OK(rig.mapper.unmap_region(other.region(0)));
  TESSERA_OK(rig.mapper.release_range(other.region(0).base));
  rig.expect_accounts_agree();
  rig.expect_nothing_left();
}

// --- a shared block's range -----------------------------------------------------------------------------

// Released, a shared block's range is kept as a spare and handed to the next one of the same span, with no
// driver call; one of another span is reserved anew. release_spare_ranges gives every spare back.
TEST(Mapper, ASharedBlocksRangeIsKeptAsASpareForTheNextOfTheSameSpan) {
  Rig rig;
  const std::uint64_t reserved = rig.calls(DriverCall::reserve);
  const Address first = must(rig.mapper.reserve_shared(3 * granule));
  TESSERA_OK(rig.mapper.release_shared(first, 3 * granule));
  EXPECT_EQ(rig.calls(DriverCall::release_reservation), 0u);
  EXPECT_EQ(rig.mapper.spare_ranges(), 1u);
  EXPECT_EQ(must(rig.mapper.reserve_shared(3 * granule)), first) << "the spare, again";
  EXPECT_EQ(rig.calls(DriverCall::reserve), reserved + 1);
  const Address other = must(rig.mapper.reserve_shared(4 * granule));
  EXPECT_NE(other, first);
  EXPECT_EQ(rig.calls(DriverCall::reserve), reserved + 2) << "no spare of that span";
  TESSERA_OK(rig.mapper.release_shared(first, 3 * granule));
  TESSERA_OK(rig.mapper.release_shared(other, 4 * granule));
  EXPECT_EQ(rig.census().reservations, 3u) << "the region's and the two spares";
  // A release that fails keeps its spare, and says so; the next call releases it.
  rig.faults->fail(DriverCall::release_reservation, 1);
  EXPECT_FALSE(rig.mapper.release_spare_ranges().ok());
  EXPECT_EQ(rig.mapper.spare_ranges(), 1u);
  TESSERA_OK(rig.mapper.release_spare_ranges());
  EXPECT_EQ(rig.mapper.spare_ranges(), 0u);
  EXPECT_EQ(rig.census().reservations, 1u) << "the region's";
  rig.expect_nothing_left();
}

// Past max_spare_ranges_ spares, a released range goes back to the driver at once.
TEST(Mapper, PastTheMostSparesARangeGoesBackAtOnce) {
  Rig rig;
  std::vector<Address> ranges;
  for (int i = 0; i < 65; ++i) ranges.push_back(must(rig.mapper.reserve_shared(granule)));
  for (const Address range : ranges) TESSERA_OK(rig.mapper.release_shared(range, granule));
  EXPECT_EQ(rig.mapper.spare_ranges(), 64u);
  EXPECT_EQ(rig.calls(DriverCall::release_reservation), 1u);
  TESSERA_OK(rig.mapper.release_spare_ranges());
  rig.expect_nothing_left();
}

// --- events and host buffers ----------------------------------------------------------------------------

TEST(Mapper, AnEventWhoseDestroyFailsIsDestroyedAtTheNextRetry) {
  Rig rig;
  const EventId event = must(rig.mapper.record_event(side_stream));
  EXPECT_EQ(rig.census().events, 1u);
  EXPECT_FALSE(rig.mapper.has_stale_events());
  rig.faults->fail(DriverCall::destroy_event, 1, Repeat::from_then_on);
  rig.mapper.destroy_event(event);
  EXPECT_TRUE(rig.mapper.has_stale_events());
  EXPECT_EQ(rig.census().events, 1u) << "not destroyed, not forgotten";
  rig.mapper.retry_stale_events();
  EXPECT_TRUE(rig.mapper.has_stale_events()) << "the retry failed too";
  rig.faults->clear(DriverCall::destroy_event);
  rig.mapper.retry_stale_events();
  EXPECT_FALSE(rig.mapper.has_stale_events());
  EXPECT_EQ(rig.census().events, 0u);
  rig.expect_nothing_left();
}

TEST(Mapper, AnEventWhoseRecordFailsIsDestroyedOrKeptForTheRetry) {
  Rig rig;
  rig.faults->fail(DriverCall::record_event, 1);
  ASSERT_FALSE(rig.mapper.record_event(side_stream));
  EXPECT_EQ(rig.census().events, 0u) << "the event created for it is gone";
  EXPECT_FALSE(rig.mapper.has_stale_events());
  rig.faults->fail(DriverCall::record_event, 1);
  rig.faults->fail(DriverCall::destroy_event, 1);
  ASSERT_FALSE(rig.mapper.record_event(side_stream));
  EXPECT_EQ(rig.census().events, 1u);
  EXPECT_TRUE(rig.mapper.has_stale_events());
  rig.mapper.retry_stale_events();
  EXPECT_EQ(rig.census().events, 0u);
  EXPECT_FALSE(rig.mapper.has_stale_events());
  rig.expect_nothing_left();
}

TEST(Mapper, ABackupWhoseFreeFailsIsFreedAtTheNextRetry) {
  Rig rig;
  const HostBuffer backup = must(rig.mapper.allocate_backup(3 * granule));
  EXPECT_EQ(rig.census().host_buffers, 1u);
  rig.faults->fail(DriverCall::free_host, 1);
  rig.mapper.free_backup(backup);
  EXPECT_EQ(rig.census().host_buffers, 1u) << "not freed, not forgotten";
  EXPECT_FALSE(rig.mapper.has_stale_events()) << "a stale host buffer keeps nothing off the fast path";
  rig.mapper.retry_stale_events();
  EXPECT_EQ(rig.census().host_buffers, 0u);
  EXPECT_EQ(rig.census().host_bytes, 0u);
  rig.expect_nothing_left();
}

TEST(Mapper, AMapperThatGoesDestroysItsStaleEventsAndFreesItsStaleBackups) {
  Rig rig;
  {
    Mapper other(*rig.driver, rig.observers);
    const EventId event = must(other.record_event(side_stream));
    const HostBuffer backup = must(other.allocate_backup(granule));
    rig.faults->fail(DriverCall::destroy_event, 1);
    rig.faults->fail(DriverCall::free_host, 1);
    other.destroy_event(event);
    other.free_backup(backup);
    EXPECT_EQ(rig.census().events, 1u);
    EXPECT_EQ(rig.census().host_buffers, 1u);
  }
  EXPECT_EQ(rig.census().events, 0u);
  EXPECT_EQ(rig.census().host_buffers, 0u);
  rig.expect_nothing_left();
}

}  // namespace
}  // namespace tessera::core
