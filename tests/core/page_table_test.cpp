// A region's page table is a window over the slots ever mapped, which grows toward whichever end the arena
// grows to: a region spans twice the device and an arena that grows down maps its highest slots first.
// Checked against a plain map of slot -> page over random maps and unmaps at both ends.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "core/arena.hpp"
#include "core/region.hpp"

namespace tessera::core {
namespace {

constexpr Bytes granule = 2 * MiB;
constexpr std::size_t slots = std::size_t{1} << 24;  // a 32 TiB region: only a window of it may be held

TEST(PageTable, AWindowAtTheTopOfAHugeRegionHoldsOnlyWhatWasMapped) {
  Arena arena(0, default_stream, SizePool::large, default_tag, granule);
  arena.add_region(Address{1} << 44, slots * granule);
  Region& region = arena.region(0);
  region.set_page(slots - 3, Page{ChunkId{7}, 3, 0});
  EXPECT_EQ(region.table_end(), slots);
  EXPECT_LE(region.table_end() - region.table_begin(), 64u) << "not one entry per slot of the region";
  EXPECT_EQ(region.table_begin() % 64, 0u);
  EXPECT_TRUE(region.all_accessible({slots - 3, 3}));
  EXPECT_FALSE(region.all_accessible({slots - 4, 4}));
  EXPECT_FALSE(region.is_mapped(0));
  EXPECT_EQ(region.page_granules_at(slots - 3), 3u);
  EXPECT_EQ(region.chunk_at(slots - 1), ChunkId{7});
  // Growing down keeps what is there.
  region.set_page(slots - 200, Page{ChunkId{8}, 2, 5});
  EXPECT_LE(region.table_begin(), slots - 200);
  EXPECT_TRUE(region.all_accessible({slots - 3, 3}));
  EXPECT_TRUE(region.all_accessible({slots - 200, 2}));
  EXPECT_EQ(region.page_offset_at(slots - 200), 5u);
  EXPECT_EQ(region.within_table(SlotRange{0, slots}).count, region.table_end() - region.table_begin());
  const Page page = region.clear_page(slots - 200);
  EXPECT_EQ(page.chunk, ChunkId{8});
  EXPECT_EQ(page.granules, 2u);
  EXPECT_FALSE(region.is_mapped(slots - 199));
}

TEST(PageTable, AgreesWithAPlainMapThroughRandomMapsAtBothEnds) {
  Arena arena(0, default_stream, SizePool::large, default_tag, granule);
  arena.add_region(Address{1} << 44, 4096 * granule);
  Region& region = arena.region(0);
  std::map<std::size_t, std::uint32_t> heads;  // head -> granules
  std::mt19937_64 random(42);
  for (int step = 0; step < 4000; ++step) {
    const std::size_t head = random() % 4090;
    const auto granules = static_cast<std::uint32_t>(1 + random() % 4);
    auto overlaps = [&] {
      auto next = heads.lower_bound(head);
      if (next != heads.end() && next->first < head + granules) return true;
      if (next != heads.begin() && std::prev(next)->first + std::prev(next)->second > head) return true;
      return false;
    };
    if (random() % 3 != 0 && !overlaps()) {
      region.set_page(head, Page{ChunkId{head + 1}, granules, 0});
      heads[head] = granules;
    } else if (!heads.empty()) {
      auto victim = heads.lower_bound(head);
      if (victim == heads.end()) victim = heads.begin();
      EXPECT_EQ(region.clear_page(victim->first).granules, victim->second);
      heads.erase(victim);
    }
    if (step % 97 != 0) continue;
    for (std::size_t slot = 0; slot < 4096; ++slot) {
      auto at = heads.upper_bound(slot);
      const bool mapped = at != heads.begin() && std::prev(at)->first + std::prev(at)->second > slot;
      ASSERT_EQ(region.is_mapped(slot), mapped) << "slot " << slot << " at step " << step;
      ASSERT_EQ(region.is_accessible(slot), mapped) << "slot " << slot;
      ASSERT_EQ(region.page_granules_at(slot), heads.contains(slot) ? heads[slot] : 0u) << "slot " << slot;
    }
  }
}

}  // namespace
}  // namespace tessera::core
