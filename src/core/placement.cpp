#include "core/placement.hpp"

#include <algorithm>
#include <cassert>
#include <vector>

namespace tessera::core {

Placement::~Placement() {
  arena_.visit_storage([&](Block& block) {
    if (block.reclaim_hook.is_linked()) reclaim_list_->erase(reclaim_list_->iterator_to(block));
  });
}

void Placement::move_reclaim_list(ReclaimList& to) {
  if (&to == reclaim_list_) return;
  // In the order of the list they leave (their freed order), then all before those already in `to`.
  std::vector<Block*> in_order;
  for (Block& block : *reclaim_list_) {
    if (block.arena == &arena_) in_order.push_back(&block);
  }
  for (Block* block : in_order) reclaim_list_->erase(reclaim_list_->iterator_to(*block));
  for (auto each = in_order.rbegin(); each != in_order.rend(); ++each) to.push_front(**each);
  reclaim_list_ = &to;
}

void Placement::recycle(Block* block) {
  if (block->reclaim_hook.is_linked()) reclaim_list_->erase(reclaim_list_->iterator_to(*block));
  arena_.recycle(block);
}

void Placement::index_insert(Block* block) {
  if (!kept_out_of_index(block)) free_.insert(block);
}

void Placement::index_erase(Block* block) {
  if (FreeIndex::contains(block)) free_.erase(block);
}

Block* Placement::good_fit_weighing(Bytes size, Block* edge_fit) const {
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
  for (const Region& region : arena_.regions()) {
    for (Block* edge : {region.last_block, region.first_block}) {
      if (edge->is_free() && edge->size >= size && edge->size <= high && edge->address > found->address) {
        found = edge;
      }
    }
  }
  return found;
}

Block* Placement::frontier_sparing(const Block& fit, Bytes size) const noexcept {
  if (!grows_down_ || !may_spare(fit) || fit.size < 2 * size || fit.size < largest_request_ ||
      fit.size - size >= largest_request_) {
    return nullptr;
  }
  for (const Region& region : arena_.regions()) {
    Block* frontier = region.first_block;
    if (frontier != &fit && frontier->is_free() && frontier->size > size) return frontier;
  }
  return nullptr;
}

Block* Placement::take(Block* free_block, Bytes size, Bytes requested) {
  largest_request_ = std::max(largest_request_, size);
  if (!grows_down_ || free_block->size == size) return take_low(free_block, size, requested);
  if (free_block->previous == nullptr) return take_below_frontier(free_block, size, requested);
  return take_at(free_block, free_block->end() - size, size, requested);
}

Block* Placement::take_below_frontier(Block* frontier, Bytes size, Bytes requested) {
  assert(frontier->is_free() && frontier->previous == nullptr && frontier->size > size);
  // The mirror of carving from the top (take_low): a new block behind the frontier, which keeps its object,
  // its place in the reclaim list and its place as the region's first block.
  Block* carved = arena_.new_block();
  carved->address = frontier->end() - size;
  carved->size = size;
  carved->arena = &arena_;
  carved->region = frontier->region;
  carved->freed_at = frontier->freed_at;
  carved->previous = frontier;
  carved->next = frontier->next;
  if (carved->next != nullptr) {
    carved->next->previous = carved;
  } else {
    arena_.region(carved->region).last_block = carved;
  }
  frontier->next = carved;
  frontier->size -= size;
  carved->live = true;
  carved->requested = requested;
  return carved;
}

Block* Placement::take_low(Block* free_block, Bytes size, Bytes requested) {
  assert(!free_block->live && !free_block->pending && free_block->size >= size);
  if (!grows_down_ && free_block->next == nullptr && free_block->size > size) {
    // From the region's top, a new block in front of it: the top keeps its object, its place in the reclaim
    // list and its place as the region's tail, so that a block carved and merged back costs no list update.
    Block* carved = arena_.new_block();
    carved->address = free_block->address;
    carved->size = size;
    carved->arena = &arena_;
    carved->region = free_block->region;
    carved->freed_at = free_block->freed_at;
    carved->previous = free_block->previous;
    carved->next = free_block;
    if (carved->previous != nullptr) {
      carved->previous->next = carved;
    } else {
      arena_.region(carved->region).first_block = carved;
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
    Block* rest = arena_.new_block();
    rest->address = free_block->address + size;
    rest->size = free_block->size - size;
    rest->arena = &arena_;
    rest->region = free_block->region;
    rest->freed_at = free_block->freed_at;
    if (free_block->reclaim_hook.is_linked()) {  // the rest keeps the block's age
      reclaim_list_->insert(reclaim_list_->iterator_to(*free_block), *rest);
    }
    rest->previous = free_block;
    rest->next = free_block->next;
    if (rest->next != nullptr) rest->next->previous = rest;
    free_block->next = rest;
    free_block->size = size;
    if (rest->next == nullptr) arena_.region(rest->region).last_block = rest;
    index_insert(rest);
  }
  if (free_block->reclaim_hook.is_linked()) reclaim_list_->erase(reclaim_list_->iterator_to(*free_block));
  free_block->live = true;
  free_block->requested = requested;
  return free_block;
}

Block* Placement::lend(Block* free_block, Address at, Bytes size) {
  Block* lent = take_at(free_block, at, size, 0);
  lent->lent = true;
  return lent;
}

Block* Placement::take_at(Block* free_block, Address at, Bytes size, Bytes requested) {
  assert(free_block->is_free() && at >= free_block->address && at + size <= free_block->end());
  if (at > free_block->address) {
    // The front stays free where it is; the block is carved from the low end of the rest.
    index_erase(free_block);
    Block* rest = arena_.new_block();
    rest->address = at;
    rest->size = free_block->end() - at;
    rest->arena = &arena_;
    rest->region = free_block->region;
    rest->freed_at = free_block->freed_at;
    if (free_block->reclaim_hook.is_linked()) reclaim_list_->insert(reclaim_list_->iterator_to(*free_block), *rest);
    rest->previous = free_block;
    rest->next = free_block->next;
    if (rest->next != nullptr) rest->next->previous = rest;
    free_block->next = rest;
    free_block->size = at - free_block->address;
    if (rest->next == nullptr) arena_.region(rest->region).last_block = rest;
    index_insert(free_block);
    free_block = rest;
  }
  return take_low(free_block, size, requested);
}

Block* Placement::give_back(Block* block, std::uint64_t clock) {
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
    arena_.recycle(block);
    make_newest_freed(before);
    return before;
  }
  if (Block* before = block->previous; before != nullptr && !before->live && !before->pending) {
    index_erase(before);
    before->size += block->size;
    before->next = block->next;
    if (block->next != nullptr) block->next->previous = before;
    before->freed_at = std::max(before->freed_at, block->freed_at);
    if (before->next == nullptr) arena_.region(before->region).last_block = before;
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
    arena_.recycle(block);
    make_newest_freed(after);
    return after;
  }
  if (Block* after = block->next; after != nullptr && !after->live && !after->pending) {
    index_erase(after);
    block->size += after->size;
    block->next = after->next;
    if (after->next != nullptr) after->next->previous = block;
    block->freed_at = std::max(block->freed_at, after->freed_at);
    if (block->next == nullptr) arena_.region(block->region).last_block = block;
    recycle(after);
  }
  index_insert(block);
  make_newest_freed(block);
  return block;
}

// Freed now: the newest candidate for giving pages back (already so when a loop frees into the same block).
void Placement::make_newest_freed(Block* block) {
  if (block->reclaim_hook.is_linked()) {
    if (&reclaim_list_->back() == block) return;
    reclaim_list_->erase(reclaim_list_->iterator_to(*block));
  }
  reclaim_list_->push_back(*block);
}

}  // namespace tessera::core
