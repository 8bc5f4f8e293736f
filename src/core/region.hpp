// A region and its page table (bookkeeping, layer 2): which page is mapped at which slot of one reserved
// virtual range. Pure host code: the mapper (mapper.hpp) makes the driver calls and records them here.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/block.hpp"
#include "core/page_pool.hpp"

namespace tessera::core {

// A run of slots: [first, first + count).
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

// A region: its range and its blocks (the arena's bookkeeping, public), and its page table (private: the
// mapper records each map and unmap through set_page, set_accessible and clear_page; others read it).
class Region {
 public:
  Address base = 0;
  Bytes span = 0;
  Block* first_block = nullptr;
  Block* last_block = nullptr;

  std::size_t table_begin() const noexcept { return table_low_; }
  std::size_t table_end() const noexcept { return table_low_ + chunks_.size(); }
  bool in_table(std::size_t slot) const noexcept { return slot >= table_low_ && slot < table_end(); }
  SlotRange within_table(SlotRange range) const noexcept { return range.within(table_begin(), table_end()); }
  // Slots with a page.
  std::size_t mapped_slots() const noexcept { return mapped_; }

  // Whether a page is mapped at the slot (accessible or not).
  bool is_mapped(std::size_t slot) const noexcept { return in_table(slot) && chunks_[slot - table_low_] != ChunkId{0}; }
  bool is_accessible(std::size_t slot) const noexcept {
    if (!in_table(slot)) return false;
    const std::size_t index = slot - table_low_;
    return (accessible_bits_[index / 64] >> (index % 64) & 1u) != 0;
  }
  // The granules of the page whose head is `slot`; 0 when no page starts there.
  std::uint32_t page_granules_at(std::size_t slot) const noexcept {
    return in_table(slot) ? page_granules_[slot - table_low_] : 0;
  }
  // The chunk mapped at `slot` (ChunkId{0}: none), and, at a page's head, where in the chunk the page starts.
  ChunkId chunk_at(std::size_t slot) const noexcept { return in_table(slot) ? chunks_[slot - table_low_] : ChunkId{0}; }
  std::uint32_t page_offset_at(std::size_t slot) const noexcept {
    return in_table(slot) ? page_offsets_[slot - table_low_] : 0;
  }
  // Whether a page mapped over [first, last] runs on past either end: the page at `first` starts below it,
  // or the slot after `last` belongs to the page at `last`.
  bool page_runs_past(std::size_t first, std::size_t last) const noexcept {
    return (is_mapped(first) && page_granules_at(first) == 0) || (is_mapped(last + 1) && page_granules_at(last + 1) == 0);
  }
  // The head of the page mapped at `slot` (which must be mapped).
  std::size_t head_of(std::size_t slot) const noexcept {
    while (page_granules_at(slot) == 0) --slot;
    return slot;
  }
  // The one granule mapped at `slot`, as a page of its chunk (the slot must be mapped).
  Page granule_at(std::size_t slot) const noexcept {
    const std::size_t head = head_of(slot);
    return Page{chunk_at(head), 1, page_offset_at(head) + static_cast<std::uint32_t>(slot - head)};
  }

  // Whether every slot of the range has an accessible page: the allocator's fast-path test.
  bool all_accessible(SlotRange range) const noexcept {
    if (range.first < table_low_ || range.end() > table_end()) return false;
    std::size_t index = range.first - table_low_;
    const std::size_t end = range.end() - table_low_;
    while (index < end) {
      const std::size_t word = index / 64;
      const std::size_t bit = index % 64;
      const std::size_t width = std::min<std::size_t>(64 - bit, end - index);
      const std::uint64_t mask = (width == 64 ? ~std::uint64_t{0} : ((std::uint64_t{1} << width) - 1)) << bit;
      if ((accessible_bits_[word] & mask) != mask) return false;
      index += width;
    }
    return true;
  }
  Address slot_address(std::size_t slot, Bytes granule) const noexcept { return base + slot * granule; }

  // Records a page mapped (and accessible) from slot `head` on.
  void set_page(std::size_t head, Page page);
  // Marks the page at slot `head` as mapped without access (or with it again).
  void set_accessible(std::size_t head, bool accessible);
  // Forgets the page that starts at slot `head`, and answers it.
  Page clear_page(std::size_t head);

 private:
  // Widens the window to hold [first, end) (doubling, so that growing either way is amortized O(1)).
  void cover(std::size_t first, std::size_t end);

  // The page table: one entry per slot of [table_low_, table_low_ + chunks_.size()), the window from the
  // lowest to the highest slot ever mapped (regions are sized for the whole device and mostly untouched, at
  // their low end where the arena grows up, at their high end where it grows down). A page of k granules
  // fills k slots; its first slot (the head) records k in page_granules_ and the page's offset into its
  // chunk in page_offsets_, the others 0.
  std::size_t table_low_ = 0;  // a multiple of 64, so that a slot's bit keeps its place in its word
  std::vector<ChunkId> chunks_;  // the chunk whose page is mapped at each slot; ChunkId{0}: none
  std::vector<std::uint32_t> page_granules_;
  std::vector<std::uint32_t> page_offsets_;  // in granules
  // Bit per slot: mapped *and* accessible, for the fast path's whole-range check a word at a time. A page
  // whose access could not be set (and which could not be unmapped either) keeps its slots in chunks_
  // with the bits clear, so that no block is handed out over it before access is set.
  std::vector<std::uint64_t> accessible_bits_;
  std::size_t mapped_ = 0;  // slots with a page
};

}  // namespace tessera::core
