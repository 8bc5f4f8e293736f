// Where a block's pages come from, and when pages go back.
//
// A block whose slots are not all backed gets, for each run of slots without a page, cheapest first:
//   1. pooled pages (created earlier, unmapped now), the largest that fits the hole — or, where the driver
//      maps parts of a chunk, a piece of a larger pooled run;
//   2. with reclaim:first, the pages of idle cached blocks (below), then the pool again;
//   3. new pages while the memory held stays within the limit: one page of up to page_max for the slots
//      wholly inside the block (only this block touches them), one granule at the block's shared edges —
//      all cut from one new chunk (up to chunk_max) where the driver maps parts of a chunk;
//   4. with reclaim:when_full, the pages of idle cached blocks, then the pool again (where slivers are shared,
//      only after a block over slivers could not be built: sliver_sharing.cpp);
//   5. where pooled pages cannot be split and are too large for the holes, they go back to the device and
//      granule pages replace them.
// Taking idle pages is stitching: pages freed in scattered places become one contiguous block. A page is
// idle when it lies wholly inside a free block; the reclaim list holds those blocks oldest freed first.
// The proof that the device is done with them: a synchronize of every stream they were freed on, before
// any unmap.
#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "core/tessera_allocator.hpp"

namespace tessera::core {

std::size_t TesseraAllocatorImpl::gap_granules() const {
  std::size_t missing = 0;
  for (const Gap& gap : gaps_) missing += gap.end - gap.next;
  return missing;
}

std::size_t TesseraAllocatorImpl::fill_gaps_from_pool() {
  std::size_t filled = 0;
  for (Gap& gap : gaps_) {
    while (gap.next < gap.end) {
      auto page = pool_.take_at_most(std::min<std::size_t>(gap.end - gap.next, page_max_granules_), pages_split());
      if (!page) break;
      assignments_.push_back({gap.next, *page});
      gap.next += page->granules;
      filled += page->granules;
    }
  }
  return filled;
}

// How far past the block's last slot a new page may reach: through the unmapped start of the free block
// after it, when the device has room to spare (at most half of the limit held) — growth at the end of a
// region then maps whole large pages, as expandable segments do, instead of a granule at each block's
// edge. Near the limit pages stay within the block, so that no page is left pinned by a neighbour.
std::size_t TesseraAllocatorImpl::growth_room(const Arena& arena, const Block& block, const SlotRange& touched) const {
  const Block* after = block.next;
  if (page_max_granules_ == 1 || after == nullptr || !after->is_free() || held_ > limit_ / 2) return 0;
  const Region& region = arena.region_of(block);
  const std::size_t end = std::min(arena.inner_slots(*after).end(), touched.end() + page_max_granules_);
  std::size_t reach = touched.end();
  while (reach < end && !region.is_mapped(reach)) ++reach;
  return reach;
}

// A new chunk of at most `granules` (lowered to what was created): the size asked first, then halves of
// it down to one granule, while the device itself runs out of memory below the limit.
Result<PageId> TesseraAllocatorImpl::create_chunk(std::uint32_t& granules) {
  while (true) {
    auto chunk = driver_.create_page(granules * granule_);
    if (chunk || chunk.error().code != Errc::out_of_memory || granules == 1) return chunk;
    granules = std::max<std::uint32_t>(1, granules / 2);
  }
}

Result<void> TesseraAllocatorImpl::create_for_gaps(const SlotRange& inner, std::size_t extend_to) {
  std::uint64_t created = 0;
  Bytes created_bytes = 0;
  Result<void> failure;
  // The chunk pages are cut from: [next, end) of it still unassigned.
  PageId chunk{0};
  std::uint32_t chunk_next = 0;
  std::uint32_t chunk_end = 0;
  std::size_t still_needed = gap_granules();
  if (!gaps_.empty() && extend_to > gaps_.back().end) {
    // Growth past the block stays within half the limit, and its pages run in page_max steps from the
    // last gap's start: what they cover beyond the gap is what the chunk must hold more.
    const Gap& last = gaps_.back();
    const std::size_t half_room = limit_ / 2 > held_ ? (limit_ / 2 - held_) / granule_ : 0;
    extend_to = std::min(extend_to, last.end + (half_room > still_needed ? half_room - still_needed : 0));
    const std::size_t length = last.end - last.next;
    const std::size_t steps = (length + page_max_granules_ - 1) / page_max_granules_;
    still_needed += std::min(extend_to - last.next, steps * page_max_granules_) - length;
  }
  for (Gap& gap : gaps_) {
    const bool extends = &gap == &gaps_.back() && extend_to > gap.end;
    while (gap.next < gap.end) {
      // The widest page that may start here: on into the free space after the block, or over the slots
      // only this block touches, or one granule at a shared edge.
      const std::size_t owned_end =
          gap.next >= inner.first && gap.next < inner.end() ? std::min(gap.end, inner.end()) : gap.next + 1;
      const std::size_t page_end = extends ? std::max(extend_to, owned_end) : owned_end;
      auto granules = static_cast<std::uint32_t>(std::min<std::size_t>(page_end - gap.next, page_max_granules_));
      if (chunk_next == chunk_end) {
        const std::size_t room = (limit_ - std::min(limit_, held_)) / granule_;
        if (room == 0) break;
        // One chunk for what the block still needs, where pages can be cut from it; else one page.
        auto size = static_cast<std::uint32_t>(std::min<std::size_t>(
            {pages_split() ? std::max<std::size_t>(still_needed, granules) : granules, chunk_max_granules_, room}));
        auto made = create_chunk(size);
        if (!made) {
          if (made.error().code != Errc::out_of_memory) failure = std::move(made).error();
          break;
        }
        chunk = *made;
        pool_.add_chunk(chunk, size);
        chunk_next = 0;
        chunk_end = size;
        held_ += size * granule_;
        ++created;
        created_bytes += size * granule_;
      }
      granules = std::min(granules, chunk_end - chunk_next);
      assignments_.push_back({gap.next, Page{chunk, granules, chunk_next}});
      chunk_next += granules;
      still_needed -= std::min<std::size_t>(still_needed, granules);
      gap.next = std::min<std::size_t>(gap.next + granules, gap.end);
    }
    if (!failure.ok() || gap.next < gap.end) break;
  }
  if (chunk_next < chunk_end) pool_.put(Page{chunk, chunk_end - chunk_next, chunk_next});  // the rest waits
  if (created > 0) notify([&](AllocatorObserver& observer) { observer.pages_created(created, created_bytes); });
  return failure;
}

void TesseraAllocatorImpl::return_assignments_to_pool() {
  for (const Assignment& assignment : assignments_) pool_.put(assignment.page);
  assignments_.clear();
}

Result<void> TesseraAllocatorImpl::back_with_pages(Arena& arena, const Block& block, bool take_idle_when_full) {
  Region& region = arena.region_of(block);
  const SlotRange touched = arena.touched_slots(block);
  if (region.all_mapped(touched)) return {};  // the fast path: cached memory

  // Pages left mapped without access by an earlier failure get their access now, or the block fails.
  for (std::size_t slot = touched.first; slot < touched.end(); ++slot) {
    if (!region.is_mapped(slot) || region.is_accessible(slot)) continue;
    std::size_t head = slot;
    while (region.page_at(head) == 0) --head;
    const Bytes size = region.page_at(head) * granule_;
    if (auto done = driver_.set_access(region.slot_address(head, granule_), size); !done) return done;
    arena.set_accessible(region, head, true);
  }

  gaps_.clear();
  assignments_.clear();
  reclaimed_.clear();
  for (std::size_t slot = touched.first; slot < touched.end(); ++slot) {
    if (region.is_mapped(slot)) continue;
    if (!gaps_.empty() && gaps_.back().end == slot) {
      gaps_.back().end += 1;
    } else {
      gaps_.push_back({slot, slot + 1});
    }
  }
  const SlotRange inner = arena.inner_slots(block);
  using Reclaim = AllocatorConfig::Reclaim;
  auto take_idle = [&]() -> Result<void> {
    const std::size_t missing = gap_granules();
    if (missing == 0) return {};
    auto taken = reclaim(missing);
    if (!taken) return std::move(taken).error();
    fill_gaps_from_pool();
    return {};
  };
  auto fail = [&](Error error) -> Result<void> {
    return_assignments_to_pool();
    return error;
  };

  fill_gaps_from_pool();
  if (config_.reclaim == Reclaim::first) {
    if (auto done = take_idle(); !done) return fail(std::move(done).error());
  }
  if (gap_granules() > 0) {
    const std::size_t extend_to = gaps_.back().end == touched.end() ? growth_room(arena, block, touched) : 0;
    if (auto done = create_for_gaps(inner, extend_to); !done) return fail(std::move(done).error());
  }
  if (gap_granules() > 0 && config_.reclaim == Reclaim::when_full && take_idle_when_full) {
    if (auto done = take_idle(); !done) return fail(std::move(done).error());
  }
  if (gap_granules() > 0 && !pool_.empty() && !pages_split()) {
    // What is pooled does not fit the holes and cannot be cut: trade it for granule pages.
    if (auto done = release_pooled_pages(0); !done) return fail(std::move(done).error());
    if (auto done = create_for_gaps(SlotRange{}, 0); !done) return fail(std::move(done).error());
  }
  if (const std::size_t missing = gap_granules(); missing > 0) {
    return fail(make_error(Errc::out_of_memory, fmt::format("needs {} more granule(s) of {} bytes", missing, granule_)));
  }

  // Map in address order, then enable access once per run of consecutive new pages.
  std::sort(assignments_.begin(), assignments_.end(),
            [](const Assignment& a, const Assignment& b) { return a.head < b.head; });
  std::size_t mapped = 0;
  Bytes mapped_bytes = 0;
  Result<void> failure;
  for (const Assignment& assignment : assignments_) {
    const Page& page = assignment.page;
    const Address at = region.slot_address(assignment.head, granule_);
    auto done = page.offset == 0 && page.granules == pool_.chunk_granules(page.id)
                    ? driver_.map(at, page.id)
                    : driver_.map_part(at, page.id, page.offset * granule_, page.granules * granule_);
    if (!done) {
      failure = std::move(done);
      break;
    }
    arena.set_page(region, assignment.head, assignment.page);
    ++mapped;
    mapped_bytes += assignment.page.granules * granule_;
  }
  for (std::size_t start = 0; start < mapped && failure.ok();) {
    std::size_t end = start + 1;
    while (end < mapped && assignments_[end - 1].head + assignments_[end - 1].page.granules == assignments_[end].head) {
      ++end;
    }
    const std::size_t first = assignments_[start].head;
    const std::size_t last = assignments_[end - 1].head + assignments_[end - 1].page.granules;
    if (auto done = driver_.set_access(region.slot_address(first, granule_), (last - first) * granule_); !done) {
      failure = std::move(done);
    }
    start = end;
  }
  if (!failure.ok()) {
    // No page may stay mapped without access: every page mapped here goes back to the pool.
    std::size_t kept = 0;
    Bytes kept_bytes = 0;
    for (std::size_t i = 0; i < mapped; ++i) {
      const Assignment& assignment = assignments_[i];
      if (!driver_.unmap(region.slot_address(assignment.head, granule_))) {
        // Stays mapped, but maybe without access: marked so, it is never handed out before access is set.
        arena.set_accessible(region, assignment.head, false);
        ++kept;
        kept_bytes += assignment.page.granules * granule_;
        continue;
      }
      pool_.put(arena.clear_page(region, assignment.head));
    }
    for (std::size_t i = mapped; i < assignments_.size(); ++i) pool_.put(assignments_[i].page);
    assignments_.clear();
    if (kept > 0) notify([&](AllocatorObserver& observer) { observer.pages_mapped(kept, kept_bytes); });
    return std::move(failure).error();
  }
  // Stitched: the pages that reclaim took from other blocks during this call and that went into this one.
  // Pages are parts of chunks: a page moved when it overlaps a part that reclaim took (disjoint parts,
  // sorted, so only the neighbours of its place can overlap it).
  auto before = [](const Page& a, const Page& b) { return a.id != b.id ? a.id < b.id : a.offset < b.offset; };
  std::sort(reclaimed_.begin(), reclaimed_.end(), before);
  auto overlaps = [](const Page& a, const Page& b) {
    return a.id == b.id && a.offset < b.offset + b.granules && b.offset < a.offset + a.granules;
  };
  std::uint64_t moved = 0;
  for (const Assignment& assignment : assignments_) {
    const Page& page = assignment.page;
    const auto next = std::upper_bound(reclaimed_.begin(), reclaimed_.end(), page, before);
    const bool took = (next != reclaimed_.end() && overlaps(*next, page)) ||
                      (next != reclaimed_.begin() && overlaps(*std::prev(next), page));
    moved += took ? 1 : 0;
  }
  assignments_.clear();
  notify([&](AllocatorObserver& observer) { observer.pages_mapped(mapped, mapped_bytes); });
  if (moved > 0) notify([&](AllocatorObserver& observer) { observer.stitched(moved); });
  collect_garbage();
  return {};
}

Result<std::size_t> TesseraAllocatorImpl::reclaim(std::size_t granules) {
  idle_.clear();
  visited_.clear();
  std::size_t found = 0;
  for (Block& block : reclaim_list_) {
    if (found >= granules) break;
    const Region& region = block.arena->region_of(block);
    const SlotRange inner = region.within_table(block.arena->inner_slots(block));
    for (std::size_t slot = inner.first; slot < inner.end() && found < granules;) {
      const std::uint32_t size = region.page_at(slot);
      if (size > 0 && slot + size <= inner.end()) {
        idle_.push_back({block.arena, block.region, slot, size});
        found += size;
        slot += size;
      } else {
        ++slot;
      }
    }
    visited_.push_back(&block);
  }
  if (idle_.empty()) {
    drop_exhausted_candidates();
    return std::size_t{0};
  }
  // The proof: every stream whose freed blocks give pages has finished the work queued before now.
  std::vector<StreamId> streams;
  for (const IdlePage& idle : idle_) {
    if (std::find(streams.begin(), streams.end(), idle.arena->stream()) == streams.end()) {
      streams.push_back(idle.arena->stream());
    }
  }
  for (StreamId stream : streams) {
    if (auto done = driver_.synchronize_stream(stream); !done) return std::move(done).error();
    notify([](AllocatorObserver& observer) { observer.synchronized(false); });
  }
  std::size_t pages = 0;
  std::size_t taken = 0;
  Result<void> failure;
  for (const IdlePage& idle : idle_) {
    Region& region = idle.arena->region(idle.region);
    if (auto done = driver_.unmap(region.slot_address(idle.head, granule_)); !done) {
      failure = std::move(done);
      break;
    }
    const Page page = idle.arena->clear_page(region, idle.head);
    reclaimed_.push_back(page);
    pool_.put(page);
    ++pages;
    taken += idle.granules;
  }
  if (pages > 0) {
    notify([&](AllocatorObserver& observer) {
      observer.pages_unmapped(pages, taken * granule_);
      observer.reclaimed(pages);
    });
  }
  drop_exhausted_candidates();
  if (!failure.ok()) return std::move(failure).error();
  return taken;
}

// Blocks visited by reclaim that have no whole page left inside them leave the reclaim list until they are
// freed or merged again, so that the list stays short.
void TesseraAllocatorImpl::drop_exhausted_candidates() {
  for (Block* block : visited_) {
    const Region& region = block->arena->region_of(*block);
    const SlotRange inner = region.within_table(block->arena->inner_slots(*block));
    bool any = false;
    for (std::size_t slot = inner.first; slot < inner.end() && !any; ++slot) {
      const std::uint32_t size = region.page_at(slot);
      any = size > 0 && slot + size <= inner.end();
    }
    if (!any) reclaim_list_.erase(reclaim_list_.iterator_to(*block));
  }
  visited_.clear();
}

// Gives wholly pooled chunks back to the device, largest first, until at most `granules_to_keep` stay
// pooled or no chunk is wholly pooled (the pooled parts of a chunk still partly mapped stay).
Result<void> TesseraAllocatorImpl::release_pooled_pages(std::size_t granules_to_keep) {
  std::uint64_t released = 0;
  Bytes released_bytes = 0;
  Result<void> failure;
  while (pool_.granules() > granules_to_keep) {
    const std::optional<Page> chunk = pool_.take_whole_chunk();
    if (!chunk) break;
    if (auto done = driver_.release_page(chunk->id); !done) {
      pool_.put(*chunk);
      failure = std::move(done);
      break;
    }
    pool_.forget_chunk(chunk->id);
    held_ -= chunk->granules * granule_;
    ++released;
    released_bytes += chunk->granules * granule_;
  }
  if (released > 0) notify([&](AllocatorObserver& observer) { observer.pages_released(released, released_bytes); });
  return failure;
}

// Pooled chunks go back first; then idle pages are taken back, oldest first, until enough whole chunks
// are idle to go back too (a chunk partly under a live block stays, its idle pages pooled for reuse).
Result<void> TesseraAllocatorImpl::give_back_above(Bytes target) {
  while (held_ > target) {
    const std::size_t excess = (held_ - target + granule_ - 1) / granule_;
    const std::size_t pooled = pool_.granules();
    if (auto done = release_pooled_pages(pooled > excess ? pooled - excess : 0); !done) return done;
    if (held_ <= target) break;
    auto taken = reclaim((held_ - target + granule_ - 1) / granule_);
    reclaimed_.clear();  // only a backing counts what it stitches
    if (!taken) return std::move(taken).error();
    if (*taken == 0) return release_pooled_pages(0);
  }
  return {};
}

// PyTorch's garbage_collection_threshold: past it, idle pages go back to the device, oldest first. A
// failure here does not fail the allocation that triggered it; the pages simply stay held.
void TesseraAllocatorImpl::collect_garbage() {
  if (config_.garbage_collection_threshold <= 0.0) return;
  const auto target = static_cast<Bytes>(static_cast<double>(limit_) * config_.garbage_collection_threshold);
  if (held_ > target) (void)give_back_above(target);
}

}  // namespace tessera::core
