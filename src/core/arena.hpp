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
  // The part below `limit`: slots past a region's page table are never mapped.
  SlotRange below(std::size_t limit) const noexcept {
    return first >= limit ? SlotRange{} : SlotRange{first, std::min(count, limit - first)};
  }
};

struct Region {
  Address base = 0;
  Bytes span = 0;
  // One entry per granule slot up to the highest slot ever mapped (regions are sized for the whole device
  // and mostly untouched); PageId{0} where nothing is mapped. A page of k granules fills k slots; its
  // first slot (the head) records k in page_granules, the others 0.
  std::vector<PageId> pages;  // the chunk whose part is mapped at each slot
  std::vector<std::uint32_t> page_granules;
  std::vector<std::uint32_t> page_offsets;  // at a head: where in its chunk the page starts, in granules
  // Bit per slot: mapped *and* accessible, for the fast path's whole-range check a word at a time. A page
  // whose access could not be set (and which could not be unmapped either) keeps its slots in `pages`
  // with the bits clear, so that no block is handed out over it before access is set.
  std::vector<std::uint64_t> mapped_bits;
  std::size_t mapped = 0;
  Block* first_block = nullptr;
  Block* last_block = nullptr;  // when free: the region's untouched tail, kept out of the free index

  bool is_mapped(std::size_t slot) const noexcept { return slot < pages.size() && pages[slot] != PageId{0}; }
  bool is_accessible(std::size_t slot) const noexcept {
    return slot < pages.size() && (mapped_bits[slot / 64] >> (slot % 64) & 1u) != 0;
  }
  // The page size in granules if a page starts at `slot`, else 0.
  std::uint32_t page_at(std::size_t slot) const noexcept { return slot < pages.size() ? page_granules[slot] : 0; }
  std::size_t table_size() const noexcept { return pages.size(); }

  // Whether every slot of the range has a page: the allocator's fast-path test.
  bool all_mapped(SlotRange range) const noexcept {
    if (range.end() > pages.size()) return false;
    std::size_t slot = range.first;
    const std::size_t end = range.end();
    while (slot < end) {
      const std::size_t word = slot / 64;
      const std::size_t bit = slot % 64;
      const std::size_t width = std::min<std::size_t>(64 - bit, end - slot);
      const std::uint64_t mask = (width == 64 ? ~std::uint64_t{0} : ((std::uint64_t{1} << width) - 1)) << bit;
      if ((mapped_bits[word] & mask) != mask) return false;
      slot += width;
    }
    return true;
  }
  Address slot_address(std::size_t slot, Bytes granule) const noexcept { return base + slot * granule; }
};

class Arena {
 public:
  // `reclaim_list` is shared by every arena of one allocator: free blocks that may hold idle pages, in the
  // order they were freed. The arena keeps it current as blocks are carved and merged.
  Arena(StreamId stream, MemoryPool pool, Bytes granule, ReclaimList& reclaim_list)
      : stream_(stream),
        pool_(pool),
        granule_(granule),
        granule_shift_(static_cast<unsigned>(__builtin_ctzll(granule))),
        reclaim_list_(reclaim_list) {}
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
  // Every free block: those in the free index, then each region's free tail.
  template <class Visit>
  void visit_free(Visit&& visit) const {
    free_.visit_all(visit);
    for (const Region& region : regions_) {
      if (region.last_block->is_free()) visit(region.last_block);
    }
  }

  // A free block in the index: every free block but a region's last. The tail (the "top", as dlmalloc
  // calls it) stays out so that growing and shrinking at the end of a region costs no index update.
  static bool indexed(const Block* block) { return FreeIndex::contains(block); }

  // A newly reserved range becomes one free block.
  void add_region(Address base, Bytes span);

  // The smallest indexed free block that holds `size`; failing that, the first region tail that does.
  Block* best_fit(Bytes size) const {
    if (Block* found = free_.best_fit(size)) return found;
    for (const Region& region : regions_) {
      if (region.last_block->is_free() && region.last_block->size >= size) return region.last_block;
    }
    return nullptr;
  }

  // Whether the first `size` bytes of a free block have a page under every slot: carving them needs no
  // driver call. The allocator's fast-path test.
  bool is_cached(const Block& free_block, Bytes size) const noexcept {
    const Region& region = regions_[free_block.region];
    const std::size_t first = (free_block.address - region.base) >> granule_shift_;
    const std::size_t last = (free_block.address + size - 1 - region.base) >> granule_shift_;
    return region.all_mapped({first, last - first + 1});
  }

  // Carves `size` bytes from the low end of a free block; the rest stays free. The block returned is live.
  Block* take(Block* free_block, Bytes size, Bytes requested);
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
  void index_insert(Block* block);  // no-op for a region's last block
  void index_erase(Block* block);

  StreamId stream_;
  MemoryPool pool_;
  Bytes granule_;  // a power of two (the driver contract): slot arithmetic shifts instead of dividing
  unsigned granule_shift_;
  ReclaimList& reclaim_list_;
  std::deque<Block> storage_;  // before free_: the index unlinks its blocks before they are destroyed
  std::vector<Block*> spare_;
  std::vector<Region> regions_;
  FreeIndex free_;
};

}  // namespace tessera::core
