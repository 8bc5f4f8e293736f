#include "core/arena.hpp"

#include <cassert>

namespace tessera::core {

Block* Arena::new_block() {
  if (!spare_.empty()) {
    Block* block = spare_.back();
    spare_.pop_back();
    *block = Block{};
    return block;
  }
  return &storage_.emplace_back();
}

void Arena::recycle(Block* block) {
  if (block->reclaim_hook.is_linked()) reclaim_list_.erase(reclaim_list_.iterator_to(*block));
  spare_.push_back(block);
}

void Arena::index_insert(Block* block) {
  if (!kept_out_of_index(block)) free_.insert(block);
}

void Arena::index_erase(Block* block) {
  if (FreeIndex::contains(block)) free_.erase(block);
}

Arena::~Arena() {
  for (Block& block : storage_) {
    if (block.reclaim_hook.is_linked()) reclaim_list_.erase(reclaim_list_.iterator_to(block));
  }
}

void Arena::add_region(Address base, Bytes span) {
  Region region;
  region.base = base;
  region.span = span;
  Block* block = new_block();
  block->address = base;
  block->size = span;
  block->arena = this;
  block->region = static_cast<std::uint32_t>(regions_.size());
  region.first_block = block;
  region.last_block = block;
  regions_.push_back(std::move(region));
}

Block* Arena::good_fit_weighing(Bytes size, Block* edge_fit) const {
  Block* found = nullptr;
  Bytes high = 0;
  std::size_t candidates = good_fit_candidates_;
  free_.visit_fits(size, [&](Block* block) {
    if (found == nullptr) {  // the index's best fit
      found = edge_fit != nullptr && edge_fit->size < block->size ? edge_fit : block;
      high = found->size * good_fit_limit_;
    }
    if (block->size > high || candidates-- == 0) return false;
    if (block->address > found->address) found = block;
    return true;
  });
  if (found == nullptr) return edge_fit;
  for (const Region& region : regions_) {
    for (Block* edge : {region.last_block, region.first_block}) {
      if (edge->is_free() && edge->size >= size && edge->size <= high && edge->address > found->address) {
        found = edge;
      }
    }
  }
  return found;
}

Block* Arena::take(Block* free_block, Bytes size, Bytes requested) {
  if (!grows_down_ || free_block->size == size) return take_low(free_block, size, requested);
  if (free_block->previous == nullptr) return take_below_frontier(free_block, size, requested);
  return take_at(free_block, free_block->end() - size, size, requested);
}

Block* Arena::take_below_frontier(Block* frontier, Bytes size, Bytes requested) {
  assert(frontier->is_free() && frontier->previous == nullptr && frontier->size > size);
  // The mirror of carving from the top (take_low): a new block behind the frontier, which keeps its object,
  // its place in the reclaim list and its place as the region's first block.
  Block* carved = new_block();
  carved->address = frontier->end() - size;
  carved->size = size;
  carved->arena = this;
  carved->region = frontier->region;
  carved->freed_at = frontier->freed_at;
  carved->previous = frontier;
  carved->next = frontier->next;
  if (carved->next != nullptr) {
    carved->next->previous = carved;
  } else {
    regions_[carved->region].last_block = carved;
  }
  frontier->next = carved;
  frontier->size -= size;
  carved->live = true;
  carved->requested = requested;
  return carved;
}

Block* Arena::take_low(Block* free_block, Bytes size, Bytes requested) {
  assert(!free_block->live && !free_block->pending && free_block->size >= size);
  if (!grows_down_ && free_block->next == nullptr && free_block->size > size) {
    // From the region's top, a new block in front of it: the top keeps its object, its place in the reclaim
    // list and its place as the region's tail, so that a block carved and merged back costs no list update.
    Block* carved = new_block();
    carved->address = free_block->address;
    carved->size = size;
    carved->arena = this;
    carved->region = free_block->region;
    carved->freed_at = free_block->freed_at;
    carved->previous = free_block->previous;
    carved->next = free_block;
    if (carved->previous != nullptr) {
      carved->previous->next = carved;
    } else {
      regions_[carved->region].first_block = carved;
    }
    free_block->previous = carved;
    free_block->address += size;
    free_block->size -= size;
    carved->live = true;
    carved->requested = requested;
    return carved;
  }
  index_erase(free_block);
  if (free_block->size > size) {
    Block* rest = new_block();
    rest->address = free_block->address + size;
    rest->size = free_block->size - size;
    rest->arena = this;
    rest->region = free_block->region;
    rest->freed_at = free_block->freed_at;
    if (free_block->reclaim_hook.is_linked()) {  // the rest keeps the block's age
      reclaim_list_.insert(reclaim_list_.iterator_to(*free_block), *rest);
    }
    rest->previous = free_block;
    rest->next = free_block->next;
    if (rest->next != nullptr) rest->next->previous = rest;
    free_block->next = rest;
    free_block->size = size;
    if (rest->next == nullptr) regions_[rest->region].last_block = rest;
    index_insert(rest);
  }
  if (free_block->reclaim_hook.is_linked()) reclaim_list_.erase(reclaim_list_.iterator_to(*free_block));
  free_block->live = true;
  free_block->requested = requested;
  return free_block;
}

Block* Arena::lend(Block* free_block, Address at, Bytes size) {
  Block* lent = take_at(free_block, at, size, 0);
  lent->lent = true;
  return lent;
}

Block* Arena::take_at(Block* free_block, Address at, Bytes size, Bytes requested) {
  assert(free_block->is_free() && at >= free_block->address && at + size <= free_block->end());
  if (at > free_block->address) {
    // The front stays free where it is; the block is carved from the low end of the rest.
    index_erase(free_block);
    Block* rest = new_block();
    rest->address = at;
    rest->size = free_block->end() - at;
    rest->arena = this;
    rest->region = free_block->region;
    rest->freed_at = free_block->freed_at;
    if (free_block->reclaim_hook.is_linked()) reclaim_list_.insert(reclaim_list_.iterator_to(*free_block), *rest);
    rest->previous = free_block;
    rest->next = free_block->next;
    if (rest->next != nullptr) rest->next->previous = rest;
    free_block->next = rest;
    free_block->size = at - free_block->address;
    if (rest->next == nullptr) regions_[rest->region].last_block = rest;
    index_insert(free_block);
    free_block = rest;
  }
  return take_low(free_block, size, requested);
}

void Arena::mark_pending(Block* block) {
  block->live = false;
  block->pending = true;
}

Block* Arena::give_back(Block* block, std::uint64_t clock) {
  block->live = false;
  block->pending = false;
  block->lent = false;
  block->requested = 0;
  block->freed_at = clock;
  if (Block* before = block->previous; grows_down_ && before != nullptr && before->previous == nullptr &&
                                       before->is_free() && block->next != nullptr && !block->next->is_free() &&
                                       !block->reclaim_hook.is_linked()) {
    // Into the region's frontier below, which keeps its object (see take_below_frontier()); it becomes the
    // newest freed.
    before->size += block->size;
    before->next = block->next;
    block->next->previous = before;
    before->freed_at = std::max(before->freed_at, clock);
    spare_.push_back(block);
    make_newest_freed(before);
    return before;
  }
  if (Block* before = block->previous; before != nullptr && !before->live && !before->pending) {
    index_erase(before);
    before->size += block->size;
    before->next = block->next;
    if (block->next != nullptr) block->next->previous = before;
    before->freed_at = std::max(before->freed_at, block->freed_at);
    if (before->next == nullptr) regions_[before->region].last_block = before;
    recycle(block);
    block = before;
  }
  if (Block* after = block->next; !grows_down_ && after != nullptr && after->next == nullptr && after->is_free() &&
                                   block->previous != nullptr && !block->previous->is_free() &&
                                   !block->reclaim_hook.is_linked()) {
    // Into the region's top, which keeps its object (see take()); it becomes the newest freed.
    after->address = block->address;
    after->size += block->size;
    after->previous = block->previous;
    block->previous->next = after;
    after->freed_at = std::max(after->freed_at, clock);
    spare_.push_back(block);
    make_newest_freed(after);
    return after;
  }
  if (Block* after = block->next; after != nullptr && !after->live && !after->pending) {
    index_erase(after);
    block->size += after->size;
    block->next = after->next;
    if (after->next != nullptr) after->next->previous = block;
    block->freed_at = std::max(block->freed_at, after->freed_at);
    if (block->next == nullptr) regions_[block->region].last_block = block;
    recycle(after);
  }
  index_insert(block);
  make_newest_freed(block);
  return block;
}

// Freed now: the newest candidate for giving pages back (already so when a loop frees into the same block).
void Arena::make_newest_freed(Block* block) {
  if (block->reclaim_hook.is_linked()) {
    if (&reclaim_list_.back() == block) return;
    reclaim_list_.erase(reclaim_list_.iterator_to(*block));
  }
  reclaim_list_.push_back(*block);
}

SlotRange Arena::touched_slots(const Block& block) const {
  const Region& region = regions_[block.region];
  const std::size_t first = (block.address - region.base) >> granule_shift_;
  const std::size_t last = (block.end() - 1 - region.base) >> granule_shift_;
  return {first, last - first + 1};
}

SlotRange Arena::inner_slots(const Block& block) const {
  const Region& region = regions_[block.region];
  const std::size_t first = (block.address - region.base + granule_ - 1) >> granule_shift_;
  const std::size_t end = (block.end() - region.base) >> granule_shift_;
  return end > first ? SlotRange{first, end - first} : SlotRange{};
}

void Region::cover(std::size_t first, std::size_t end) {
  if (pages.empty()) {
    table_low = first / 64 * 64;
    const std::size_t size = (end - table_low + 63) / 64 * 64;
    pages.assign(size, PageId{0});
    page_granules.assign(size, 0);
    page_offsets.assign(size, 0);
    mapped_bits.assign(size / 64, 0);
    return;
  }
  if (first < table_low) {
    const std::size_t reach = std::min(table_low, std::max(table_low - first, pages.size()));
    const std::size_t low = (table_low - reach) / 64 * 64;
    const std::size_t added = table_low - low;
    pages.insert(pages.begin(), added, PageId{0});
    page_granules.insert(page_granules.begin(), added, 0);
    page_offsets.insert(page_offsets.begin(), added, 0);
    mapped_bits.insert(mapped_bits.begin(), added / 64, 0);
    table_low = low;
  }
  if (end > table_end()) {
    const std::size_t size = (std::max(end - table_low, pages.size() * 2) + 63) / 64 * 64;
    pages.resize(size, PageId{0});
    page_granules.resize(size, 0);
    page_offsets.resize(size, 0);
    mapped_bits.resize(size / 64, 0);
  }
}

void Arena::set_page(Region& region, std::size_t head, Page page) {
  region.cover(head, head + page.granules);
  const std::size_t first = head - region.table_low;
  for (std::size_t index = first; index < first + page.granules; ++index) {
    assert(region.pages[index] == PageId{0});
    region.pages[index] = page.id;
    region.mapped_bits[index / 64] |= std::uint64_t{1} << (index % 64);
  }
  region.page_granules[first] = page.granules;
  region.page_offsets[first] = page.offset;
  region.mapped += page.granules;
}

void Arena::set_accessible(Region& region, std::size_t head, bool accessible) {
  const std::size_t first = head - region.table_low;
  for (std::size_t index = first; index < first + region.page_granules[first]; ++index) {
    const std::uint64_t bit = std::uint64_t{1} << (index % 64);
    region.mapped_bits[index / 64] = accessible ? region.mapped_bits[index / 64] | bit : region.mapped_bits[index / 64] & ~bit;
  }
}

Page Arena::clear_page(Region& region, std::size_t head) {
  const std::size_t first = head - region.table_low;
  const Page page{region.pages[first], region.page_granules[first], region.page_offsets[first]};
  assert(page.granules > 0);
  for (std::size_t index = first; index < first + page.granules; ++index) {
    region.pages[index] = PageId{0};
    region.mapped_bits[index / 64] &= ~(std::uint64_t{1} << (index % 64));
  }
  region.page_granules[first] = 0;
  region.mapped -= page.granules;
  return page;
}

}  // namespace tessera::core
