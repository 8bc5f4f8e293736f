// Bookkeeping (layer 2) for one (stream, pool): the virtual regions reserved for it, the blocks that tile
// them, and the page table — which page is mapped at which granule slot. Pure host code: the allocator
// makes the driver calls and tells the arena what it did.
//
// Invariant: every slot that a live block touches has a page mapped. Free blocks may sit over mapped
// slots (cached memory, reused with no driver call) or unmapped ones. A slot lying wholly inside a free
// block is idle: its page can be taken back without touching live data.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <vector>

#include "core/block.hpp"
#include "core/free_index.hpp"
#include "core/page_pool.hpp"
#include "tessera/allocator_observer.hpp"
#include "tessera/driver.hpp"

namespace tessera::core {

struct SlotRange {
  std::size_t first = 0;
  std::size_t count = 0;  // 0: empty

  std::size_t end() const noexcept { return first + count; }
  // The part inside [low, high): slots outside a region's page table are never mapped.
  SlotRange within(std::size_t low, std::size_t high) const noexcept {
    const std::size_t from = std::max(first, low);
    const std::size_t to = std::min(end(), high);
    return to > from ? SlotRange{from, to - from} : SlotRange{};
  }
};

struct Region {
  Address base = 0;
  Bytes span = 0;
  // The page table: one entry per granule slot of [table_low, table_low + pages.size()), the window from
  // the lowest to the highest slot ever mapped (regions are sized for the whole device and mostly
  // untouched, at their low end where the arena grows up, at their high end where it grows down);
  // PageId{0} where nothing is mapped. A page of k granules fills k slots; its first slot (the head)
  // records k in page_granules, the others 0. Indexed through the accessors below, by slot.
  std::size_t table_low = 0;  // a multiple of 64, so that a slot's bit keeps its place in its word
  std::vector<PageId> pages;  // the chunk whose part is mapped at each slot
  std::vector<std::uint32_t> page_granules;
  std::vector<std::uint32_t> page_offsets;  // at a head: where in its chunk the page starts, in granules
  // Bit per slot: mapped *and* accessible, for the fast path's whole-range check a word at a time. A page
  // whose access could not be set (and which could not be unmapped either) keeps its slots in `pages`
  // with the bits clear, so that no block is handed out over it before access is set.
  std::vector<std::uint64_t> mapped_bits;
  std::size_t mapped = 0;
  Block* first_block = nullptr;
  Block* last_block = nullptr;

  std::size_t table_begin() const noexcept { return table_low; }
  std::size_t table_end() const noexcept { return table_low + pages.size(); }
  bool in_table(std::size_t slot) const noexcept { return slot >= table_low && slot < table_end(); }
  SlotRange within_table(SlotRange range) const noexcept { return range.within(table_begin(), table_end()); }

  bool is_mapped(std::size_t slot) const noexcept { return in_table(slot) && pages[slot - table_low] != PageId{0}; }
  bool is_accessible(std::size_t slot) const noexcept {
    if (!in_table(slot)) return false;
    const std::size_t index = slot - table_low;
    return (mapped_bits[index / 64] >> (index % 64) & 1u) != 0;
  }
  // The page size in granules if a page starts at `slot`, else 0.
  std::uint32_t page_at(std::size_t slot) const noexcept { return in_table(slot) ? page_granules[slot - table_low] : 0; }
  // The chunk mapped at `slot` (PageId{0}: none), and, at a page's head, where in the chunk the page starts.
  PageId page_id(std::size_t slot) const noexcept { return in_table(slot) ? pages[slot - table_low] : PageId{0}; }
  std::uint32_t page_offset(std::size_t slot) const noexcept { return in_table(slot) ? page_offsets[slot - table_low] : 0; }

  // Whether every slot of the range has a page: the allocator's fast-path test.
  bool all_mapped(SlotRange range) const noexcept {
    if (range.first < table_low || range.end() > table_end()) return false;
    std::size_t index = range.first - table_low;
    const std::size_t end = range.end() - table_low;
    while (index < end) {
      const std::size_t word = index / 64;
      const std::size_t bit = index % 64;
      const std::size_t width = std::min<std::size_t>(64 - bit, end - index);
      const std::uint64_t mask = (width == 64 ? ~std::uint64_t{0} : ((std::uint64_t{1} << width) - 1)) << bit;
      if ((mapped_bits[word] & mask) != mask) return false;
      index += width;
    }
    return true;
  }
  Address slot_address(std::size_t slot, Bytes granule) const noexcept { return base + slot * granule; }

  // Widens the window to hold [first, end) (doubling, so that growing either way is amortized O(1)).
  void cover(std::size_t first, std::size_t end);
};

class Arena {
 public:
  // `reclaim_list` is shared by every arena of one allocator: free blocks that may hold idle pages, in the
  // order they were freed. The arena keeps it current as blocks are carved and merged.
  // `grows_down`: blocks are carved from the high end of free blocks (see grows_down_).
  Arena(StreamId stream, MemoryPool pool, Bytes granule, bool grows_down, ReclaimList& reclaim_list)
      : stream_(stream),
        pool_(pool),
        granule_(granule),
        granule_shift_(static_cast<unsigned>(__builtin_ctzll(granule))),
        grows_down_(grows_down),
        reclaim_list_(reclaim_list),
        free_(grows_down_) {}
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  StreamId stream() const noexcept { return stream_; }
  MemoryPool pool() const noexcept { return pool_; }
  Bytes granule() const noexcept { return granule_; }
  const std::vector<Region>& regions() const noexcept { return regions_; }
  Region& region(std::uint32_t index) { return regions_[index]; }
  Region& region_of(const Block& block) { return regions_[block.region]; }
  const Region& region_of(const Block& block) const { return regions_[block.region]; }
  // Every free block: those in the free index, then those of each region kept out of it.
  template <class Visit>
  void visit_free(Visit&& visit) const {
    free_.visit_all(visit);
    for (const Region& region : regions_) {
      if (region.first_block->is_free() && !indexed(region.first_block)) visit(region.first_block);
      if (region.last_block != region.first_block && region.last_block->is_free() && !indexed(region.last_block)) {
        visit(region.last_block);
      }
    }
  }

  // A region's frontier is its untouched end, where it grows: its last block in an arena that grows up (the
  // "top", as dlmalloc calls it), its first in one that grows down. A free frontier stays out of the free
  // index, so that growing and shrinking there costs no index update. Where the arena grows down, the
  // region's last block stays out too (the space its topmost blocks left when freed). Best fit weighs the
  // blocks kept out by size beside the index's answer, and takes one only when it is strictly smaller: on
  // ties the holes inside win (chosen by measurement, docs/allocator.md). Every other free block is indexed.
  bool kept_out_of_index(const Block* block) const noexcept {
    return grows_down_ ? (block->previous == nullptr || block->next == nullptr) : block->next == nullptr;
  }
  static bool indexed(const Block* block) { return FreeIndex::contains(block); }

  // A newly reserved range becomes one free block.
  void add_region(Address base, Bytes span);

  // Where the arena grows up: the smallest free block that holds `size`, the lowest address among equals;
  // the region's free top competes by size too. Where it grows down, good_fit().
  Block* best_fit(Bytes size) const {
    if (grows_down_) return good_fit(size);
    Block* found = free_.best_fit(size);
    for (const Region& region : regions_) {
      Block* top = region.last_block;
      if (top->is_free() && top->size >= size && (found == nullptr || top->size < found->size)) found = top;
    }
    return found;
  }

  // Among the free blocks that hold `size` and are at most good_fit_limit_ times the best fit's size, the
  // highest: the best fit (the blocks kept out of the index compete by size, and win only when strictly
  // smaller), then up to good_fit_candidates_ of the index's blocks in its order, then those kept out.
  Block* good_fit(Bytes size) const {
    auto fits = [size](const Block* block) { return block->is_free() && block->size >= size; };
    Block* edge_fit = nullptr;
    for (const Region& region : regions_) {
      Block* last = region.last_block;
      Block* first = region.first_block;
      if (fits(last) && (edge_fit == nullptr || last->size < edge_fit->size)) edge_fit = last;
      if (fits(first) && (edge_fit == nullptr || first->size < edge_fit->size)) edge_fit = first;
    }
    if (free_.empty()) return edge_fit;  // nothing to weigh against: a loop that carves from the frontier
    return good_fit_weighing(size, edge_fit);
  }
  Block* good_fit_weighing(Bytes size, Block* edge_fit) const;

  // Whether the `size` bytes that take() would carve from a free block have a page under every slot:
  // carving them needs no driver call. The allocator's fast-path test.
  bool is_cached(const Block& free_block, Bytes size) const noexcept {
    const Region& region = regions_[free_block.region];
    const Address at = carve_address(free_block, size);
    const std::size_t first = (at - region.base) >> granule_shift_;
    const std::size_t last = (at + size - 1 - region.base) >> granule_shift_;
    return region.all_mapped({first, last - first + 1});
  }

  // Where in a free block a block of `size` bytes is carved.
  Address carve_address(const Block& free_block, Bytes size) const noexcept {
    return grows_down_ ? free_block.end() - size : free_block.address;
  }
  // Carves `size` bytes from a free block at carve_address(); the rest stays free. The block returned is live.
  Block* take(Block* free_block, Bytes size, Bytes requested);
  // Carves `size` bytes from the low end of a free block.
  Block* take_low(Block* free_block, Bytes size, Bytes requested);
  // Carves `size` bytes from the high end of a region's free first block, which stays the frontier.
  Block* take_below_frontier(Block* frontier, Bytes size, Bytes requested);
  // Carves [at, at + size) from inside a free block.
  Block* take_at(Block* free_block, Address at, Bytes size, Bytes requested);
  // Carves [at, at + size) from inside a free block as a lent block; what lies before and after stays free.
  Block* lend(Block* free_block, Address at, Bytes size);
  // Makes a live or pending block free again and merges it with its free neighbours.
  Block* give_back(Block* block, std::uint64_t clock);
  // A freed block that must wait for events: neither live nor reusable.
  void mark_pending(Block* block);

  // Slots a block touches, and slots wholly inside it (its idle slots when it is free).
  SlotRange touched_slots(const Block& block) const;
  SlotRange inner_slots(const Block& block) const;

  // Records a page (a part of a chunk) mapped from slot `head` on.
  void set_page(Region& region, std::size_t head, Page page);
  // Marks the page at slot `head` as mapped without access (or with it again).
  void set_accessible(Region& region, std::size_t head, bool accessible);
  // Forgets the page that starts at slot `head`, and answers it.
  Page clear_page(Region& region, std::size_t head);

 private:
  Block* new_block();
  void recycle(Block* block);
  void make_newest_freed(Block* block);
  void index_insert(Block* block);  // no-op for a block kept out of the index
  void index_erase(Block* block);

  StreamId stream_;
  MemoryPool pool_;
  Bytes granule_;  // a power of two (the driver contract): slot arithmetic shifts instead of dividing
  unsigned granule_shift_;
  // Large arenas are the mirror image of small ones: blocks are carved from the high end of a free block,
  // the highest address among equal fits, so the region fills from its top down. The frontier of each pool
  // is then the opposite kind of sliver — a large arena's ends where its lowest live block starts (a tail),
  // a small arena's starts where its highest live block ends (a head) — and a request built over slivers at
  // the limit (sliver_sharing.cpp) can take one of each, where two heads could not be combined.
  bool grows_down_;
  // A large arena takes, among the free blocks up to this many times the best fit's size, the highest: an
  // address-ordered good fit. Blocks that outlive an iteration (optimizer state created in the first step,
  // say) then settle at the top, beside the parameters, instead of in whichever hole fits best amid the
  // activations, and the next iteration's activations find longer runs of free space below them.
  static constexpr Bytes good_fit_limit_ = 2;
  // How many indexed free blocks, smallest first, the good fit weighs at most (with 8, every shared trace
  // has the min_capacity it has with no bound; with 4, one does not).
  static constexpr std::size_t good_fit_candidates_ = 16;
  ReclaimList& reclaim_list_;
  std::deque<Block> storage_;  // before free_: the index unlinks its blocks before they are destroyed
  std::vector<Block*> spare_;
  std::vector<Region> regions_;
  FreeIndex free_;
};

}  // namespace tessera::core
