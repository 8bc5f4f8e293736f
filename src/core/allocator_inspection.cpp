// What the allocator can tell about itself: statistics, the snapshot, the out-of-memory report, and
// check(), which recomputes every invariant from scratch.
#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>

#include "core/tessera_allocator.hpp"

namespace tessera::core {

namespace {

// Appends `run` to `runs` less the ranges of `holes` (sorted, disjoint) that meet it; `next` walks `holes`.
void add_run(std::vector<MappedRange>& runs, MappedRange run, const std::vector<MappedRange>& holes, std::size_t& next) {
  const Address end = run.address + run.size;
  Address cursor = run.address;
  while (next < holes.size() && holes[next].address + holes[next].size <= cursor) ++next;
  for (std::size_t h = next; h < holes.size() && holes[h].address < end; ++h) {
    if (holes[h].address > cursor) runs.push_back({cursor, holes[h].address - cursor});
    cursor = std::max(cursor, holes[h].address + holes[h].size);
  }
  if (cursor < end) runs.push_back({cursor, end - cursor});
}

// Bytes of mapped slots wholly inside free blocks: cached memory no live block uses.
Bytes idle_mapped_bytes(const Placement& placement, Bytes granule) {
  const Arena& arena = placement.arena();
  Bytes idle = 0;
  placement.visit_free([&](const Block* block) {
    const Region& region = arena.region_of(*block);
    const SlotRange inner = region.within_table(arena.inner_slots(*block));
    for (std::size_t slot = inner.first; slot < inner.end(); ++slot) {
      if (region.is_mapped(slot)) idle += granule;
    }
  });
  return idle;
}

// Whether a block other than `block` that is in use (live, lent, or waiting for events) touches `slot`.
// Free neighbours are merged, so each loop looks at one or two blocks.
bool other_in_use_touches(const Block& block, const Region& region, std::size_t slot, Bytes granule) {
  const Address start = region.slot_address(slot, granule);
  for (const Block* other = block.previous; other != nullptr && other->end() > start; other = other->previous) {
    if (!other->is_free()) return true;
  }
  for (const Block* other = block.next; other != nullptr && other->address < start + granule; other = other->next) {
    if (!other->is_free()) return true;
  }
  return false;
}

// PyTorch's inactive_split in Tessera's terms: the bytes of free blocks in mapped granules that a block in
// use also touches, and the free blocks that hold any. Only a free block's first and last granule can hold
// another block; the granules between are wholly its own.
void add_inactive_split(const Arena& arena, PoolStats& pool) {
  const Bytes granule = arena.granule();
  for (const Region& region : arena.regions()) {
    for (const Block* block = region.first_block; block != nullptr; block = block->next) {
      if (!block->is_free()) continue;
      // The block's bytes in the granule at `slot` when that granule counts, else 0.
      auto split_in = [&](std::size_t slot) -> Bytes {
        if (!region.is_mapped(slot) || !other_in_use_touches(*block, region, slot, granule)) return 0;
        const Address start = region.slot_address(slot, granule);
        return std::min(block->end(), start + granule) - std::max(block->address, start);
      };
      const std::size_t first = arena.slot_of(region, block->address);
      const std::size_t last = arena.slot_of(region, block->end() - 1);
      const Bytes split = split_in(first) + (last != first ? split_in(last) : 0);
      pool.inactive_split_bytes += split;
      pool.inactive_split += split > 0 ? 1 : 0;
    }
  }
}

}  // namespace

AllocatorStats TesseraAllocatorImpl::stats() const {
  std::lock_guard lock(mutex_);
  return observers_.stats().common;
}

TesseraStats TesseraAllocatorImpl::tessera_stats() const {
  std::lock_guard lock(mutex_);
  TesseraStats stats = observers_.stats();
  stats.cached_bytes = 0;
  for (const auto& placement : placements_) stats.cached_bytes += idle_mapped_bytes(*placement, granule());
  stats.tags = tag_stats();
  stats.backup_cache_bytes = tags_.kept_buffer_bytes();
  for (const SizePool pool : {SizePool::small, SizePool::large}) {
    PoolStats& figures = stats.pools[static_cast<std::size_t>(pool)];
    const PoolHeld held = held_by(pool);
    figures.mapped_bytes = held.mapped_bytes;
    figures.segments = held.segments;
  }
  for (const auto& placement : placements_) {
    add_inactive_split(placement->arena(), stats.pools[static_cast<std::size_t>(placement->arena().pool())]);
  }
  stats.private_pools = pools_.size();
  for (const auto& placement : placements_) {
    if (placement->arena().private_pool() == shared_cache) continue;
    for (const Region& region : placement->arena().regions()) stats.private_pool_mapped_bytes += region.mapped_slots() * granule();
  }
  return stats;
}

Usage TesseraAllocatorImpl::usage() const {
  std::lock_guard lock(mutex_);
  return observers_.usage().usage();
}

void TesseraAllocatorImpl::reset_peak_usage() {
  std::lock_guard lock(mutex_);
  observers_.usage().reset_peaks();
}

// A shared block's segment counts its own pages: the slivers' granules are its home segment's.
PoolHeld TesseraAllocatorImpl::held_by(SizePool pool) const {
  PoolHeld held;
  for (const auto& placement : placements_) {
    if (placement->arena().pool() != pool) continue;
    for (const Region& region : placement->arena().regions()) {
      held.mapped_bytes += region.mapped_slots() * granule();
      held.segments += region.mapped_slots() > 0 ? 1 : 0;
    }
  }
  for (const auto& shared : shared_) {
    if (shared->pool != pool) continue;
    const Bytes own = shared->own_mapped_granules() * granule();
    held.mapped_bytes += own;
    held.segments += own > 0 ? 1 : 0;
  }
  return held;
}

std::vector<TagStats> TesseraAllocatorImpl::tag_stats() const {
  std::vector<TagStats> tags;
  const std::vector<TagBook::State>& states = tags_.states();
  for (const TagBook::State& state : states) tags.push_back({tag_name(state.tag), state.paused});
  auto of = [&](TagId tag) -> TagStats& {
    std::size_t index = 0;
    while (states[index].tag != tag) ++index;
    return tags[index];
  };
  for (const auto& placement : placements_) {
    const Arena& arena = placement->arena();
    TagStats& stats = of(arena.tag());
    for (const Region& region : arena.regions()) {
      stats.reserved_bytes += region.mapped_slots() * granule();
      for (const Block* block = region.first_block; block != nullptr; block = block->next) {
        stats.allocated_bytes += block->live && !block->lent ? block->size : 0;
      }
    }
  }
  for (const auto& shared : shared_) {
    TagStats& stats = of(shared->tag);
    stats.allocated_bytes += shared->block.live ? shared->block.size : 0;
    stats.reserved_bytes += shared->own_mapped_granules() * granule();
  }
  for (TagStats& stats : tags) stats.paused_bytes = stats.paused ? stats.allocated_bytes : 0;
  tags_.visit_backups([&](const Block* block, const HostBuffer& backup) { of(tag_of(block)).backup_bytes += backup.size; });
  return tags;
}

AllocatorSnapshot TesseraAllocatorImpl::snapshot() const {
  std::lock_guard lock(mutex_);
  return snapshot_locked();
}

void TesseraAllocatorImpl::record_history(std::size_t max_events) {
  std::lock_guard lock(mutex_);
  observers_.history().resize(max_events);
  stacks_.set_recording(max_events != 0);
  observers_.history().clear_next_stack();
}

void TesseraAllocatorImpl::set_history_stacks(StackCapture capture) {
  std::lock_guard lock(mutex_);
  stacks_.set(std::move(capture), observers_.history().recording());
  observers_.history().clear_next_stack();
}

AllocationHistory TesseraAllocatorImpl::history() const {
  std::lock_guard lock(mutex_);
  return observers_.history().build(snapshot_locked());
}

AllocatorSnapshot TesseraAllocatorImpl::snapshot_locked() const {
  AllocatorSnapshot snapshot;
  snapshot.pooled_bytes = mapper_.pool().granules() * granule();
  std::unordered_map<const Block*, Address> lent_to;
  for (const auto& shared : shared_) {
    for (const SharedMapping& mapping : shared->mappings) {
      if (mapping.lent != nullptr) lent_to.emplace(mapping.lent, shared->block.address);
    }
  }
  for (const auto& placement : placements_) {
    const Arena* arena = &placement->arena();
    for (const Region& region : arena->regions()) {
      SnapshotSegment segment{region.base, region.span, region.mapped_slots() * granule(), arena->stream(), arena->pool(), {}};
      segment.tag = tag_name(arena->tag());
      segment.paused = tags_.is_paused(arena->tag());
      // Mapped runs, less the bytes lent to shared blocks: those are shown where they are used.
      std::vector<MappedRange> lent_ranges;
      for (const Block* block = region.first_block; block != nullptr; block = block->next) {
        if (block->lent) lent_ranges.push_back({block->address, block->size});
      }
      std::size_t next_lent = 0;
      for (std::size_t slot = region.table_begin(); slot < region.table_end();) {
        if (!region.is_mapped(slot)) {
          ++slot;
          continue;
        }
        const std::size_t first = slot;
        while (slot < region.table_end() && region.is_mapped(slot)) ++slot;
        add_run(segment.mapped, {region.slot_address(first, granule()), (slot - first) * granule()}, lent_ranges, next_lent);
      }
      for (const Block* block = region.first_block; block != nullptr; block = block->next) {
        using State = SnapshotBlock::State;
        const State state = block->live ? State::active_allocated : block->pending ? State::active_pending_free : State::inactive;
        Bytes mapped = 0;
        const SlotRange touched = region.within_table(arena->touched_slots(*block));
        for (std::size_t slot = touched.first; slot < touched.end(); ++slot) {
          if (!region.is_mapped(slot)) continue;
          const Address start = std::max(block->address, region.slot_address(slot, granule()));
          const Address end = std::min(block->end(), region.slot_address(slot, granule()) + granule());
          mapped += end - start;
        }
        const auto lent = block->lent ? lent_to.find(block) : lent_to.end();
        segment.blocks.push_back(
            {block->address, block->size, block->requested, state, mapped, lent != lent_to.end() ? lent->second : 0});
      }
      snapshot.segments.push_back(std::move(segment));
    }
  }
  // A shared block is a segment of its own: its range, the block, and the unused start and end around it.
  for (const auto& shared : shared_) {
    const Block& block = shared->block;
    // Its own pages only: the slivers' granules are counted once, in their home segments.
    const Bytes mapped = shared->own_mapped_granules() * granule();
    const bool all_mapped = std::all_of(shared->mappings.begin(), shared->mappings.end(),
                                        [](const SharedMapping& mapping) { return mapping.mapped; });
    SnapshotSegment segment{shared->base, shared->span, mapped, shared->stream, shared->pool, {}};
    segment.tag = tag_name(shared->tag);
    segment.paused = tags_.is_paused(shared->tag);
    // Its own pages, and of each sliver the bytes it uses (mappings are in slot order).
    for (const SharedMapping& mapping : shared->mappings) {
      if (!mapping.mapped) continue;
      const Address at = shared->base + mapping.slot * granule();
      MappedRange run{at, mapping.page.granules * granule()};
      if (mapping.is_sliver()) run = {at + mapping.lent->address % granule(), mapping.lent->size};
      if (!segment.mapped.empty() && segment.mapped.back().address + segment.mapped.back().size == run.address) {
        segment.mapped.back().size += run.size;
      } else {
        segment.mapped.push_back(run);
      }
    }
    using State = SnapshotBlock::State;
    if (block.address > shared->base) segment.blocks.push_back({shared->base, block.address - shared->base, 0, State::inactive, 0, 0});
    const State state = block.live ? State::active_allocated : State::active_pending_free;
    segment.blocks.push_back({block.address, block.size, block.requested, state, all_mapped ? block.size : 0, 0});
    if (block.end() < shared->base + shared->span) {
      segment.blocks.push_back({block.end(), shared->base + shared->span - block.end(), 0, State::inactive, 0, 0});
    }
    snapshot.segments.push_back(std::move(segment));
  }
  return snapshot;
}

Error TesseraAllocatorImpl::out_of_memory(Bytes requested, std::string_view why) {
  notify([&](AllocatorObserver& observer) { observer.out_of_memory(requested); });
  const TesseraStats stats = observers_.stats();
  Bytes cached = mapper_.pool().granules() * granule();
  for (const auto& placement : placements_) cached += idle_mapped_bytes(*placement, granule());
  return make_error(Errc::out_of_memory,
                    fmt::format("tessera: out of memory allocating {} bytes ({}): {} bytes allocated, {} reserved, "
                                "{} cached and unused, {} free on the device (limit {})",
                                requested, why, stats.common.allocated_bytes, mapper_.held(), cached,
                                budget_.free_bytes(), budget_.limit()));
}

namespace {

// The page table of one region: every mapped slot belongs to exactly one page that starts at a head slot.
std::optional<std::string> check_page_table(const Region& region, std::size_t& mapped_slots,
                                            std::unordered_map<std::uint64_t, std::size_t>& mapped_of_chunk) {
  std::size_t counted = 0;
  for (std::size_t slot = region.table_begin(); slot < region.table_end();) {
    const std::uint32_t size = region.page_granules_at(slot);
    if (size == 0) {
      if (region.is_mapped(slot) || region.is_accessible(slot)) {
        return fmt::format("region {:#x}: slot {} is mapped outside any page", region.base, slot);
      }
      ++slot;
      continue;
    }
    for (std::size_t inside = slot; inside < slot + size; ++inside) {
      if (inside >= region.table_end() || region.chunk_at(inside) != region.chunk_at(slot) ||
          (inside > slot && region.page_granules_at(inside) != 0)) {
        return fmt::format("region {:#x}: the page at slot {} is broken at slot {}", region.base, slot, inside);
      }
    }
    counted += size;
    mapped_of_chunk[static_cast<std::uint64_t>(region.chunk_at(slot))] += size;
    slot += size;
  }
  if (counted != region.mapped_slots()) {
    return fmt::format("region {:#x}: mapped count {} but {} slots mapped", region.base, region.mapped_slots(), counted);
  }
  mapped_slots += counted;
  return std::nullopt;
}

}  // namespace

std::optional<std::string> TesseraAllocatorImpl::check() const {
  std::lock_guard lock(mutex_);
  Bytes requested = 0;
  Bytes allocated = 0;
  std::size_t live_blocks = 0;
  std::size_t lent_blocks = 0;
  std::size_t mapped_slots = 0;
  std::unordered_map<std::uint64_t, std::size_t> mapped_of_chunk;
  for (const auto& placement : placements_) {
    const Arena* arena = &placement->arena();
    const TagBook::State* tag = tags_.state_of(arena->tag());
    if (tag == nullptr) return fmt::format("arena {}: its tag {} is unknown", arena->index(), arena->tag());
    for (const Region& region : arena->regions()) {
      if (auto broken = check_page_table(region, mapped_slots, mapped_of_chunk)) return broken;
      Address expected = region.base;
      const Block* previous = nullptr;
      for (const Block* block = region.first_block; block != nullptr; block = block->next) {
        if (block->address != expected) return fmt::format("region {:#x}: gap or overlap at {:#x}", region.base, expected);
        if (block->previous != previous) return fmt::format("block {:#x}: broken back link", block->address);
        const bool is_free = block->is_free();
        if ((is_free && !placement->kept_out_of_index(block)) != Placement::indexed(block)) {
          return fmt::format("block {:#x}: free index disagrees", block->address);
        }
        if (is_free && !block->reclaim_hook.is_linked() && arena->holds_whole_page(*block)) {
          return fmt::format("free block {:#x} holds idle pages but is not in the reclaim list", block->address);
        }
        if (!is_free && block->reclaim_hook.is_linked()) {
          return fmt::format("block {:#x} is in use but in the reclaim list", block->address);
        }
        if (is_free && previous != nullptr && previous->is_free()) {
          return fmt::format("blocks {:#x} and {:#x}: free neighbours not merged", previous->address, block->address);
        }
        // A paused tag's blocks may have pages or not (a pause that failed half way leaves some).
        if (!is_free && !tag->paused) {
          const SlotRange touched = arena->touched_slots(*block);
          for (std::size_t slot = touched.first; slot < touched.end(); ++slot) {
            if (!region.is_accessible(slot)) {
              return fmt::format("block {:#x}: slot {} has no accessible page", block->address, slot);
            }
          }
        }
        if (block->lent) {
          if (!block->live) return fmt::format("block {:#x}: lent but not live", block->address);
          ++lent_blocks;
        } else if (block->live) {
          Block* const* found = live_.find(block->address);
          if (found == nullptr || *found != block) return fmt::format("block {:#x}: not in the live map", block->address);
          requested += block->requested;
          allocated += block->size;
          ++live_blocks;
        }
        expected = block->end();
        previous = block;
      }
      if (expected != region.base + region.span) return fmt::format("region {:#x}: blocks end at {:#x}", region.base, expected);
      if (previous != region.last_block) return fmt::format("region {:#x}: last block is not the tail", region.base);
    }
  }
  if (auto broken = check_shared(requested, allocated, live_blocks, lent_blocks, mapped_slots, mapped_of_chunk)) {
    return broken;
  }
  const TesseraStats stats = observers_.stats();
  if (live_blocks != live_.size()) return fmt::format("{} live blocks but {} in the live map", live_blocks, live_.size());
  if (requested != stats.common.requested_bytes) return fmt::format("requested {} but stats say {}", requested, stats.common.requested_bytes);
  if (allocated != stats.common.allocated_bytes) return fmt::format("allocated {} but stats say {}", allocated, stats.common.allocated_bytes);
  const PagePool& pool = mapper_.pool();
  const Bytes holds = mapper_.held();
  const Bytes pooled = pool.granules() * granule();
  const Bytes retired = pool.retired() * granule();  // an exported block's pages after its free
  const Bytes held = mapped_slots * granule() + pooled + retired;
  if (held != holds) return fmt::format("pages held {} but counted {}", holds, held);
  if (held != stats.common.reserved_bytes) return fmt::format("reserved {} but stats say {}", held, stats.common.reserved_bytes);
  if (mapped_slots * granule() != stats.mapped_bytes) return fmt::format("mapped {} but stats say {}", mapped_slots * granule(), stats.mapped_bytes);
  // The statistics count a retired page as pooled: unmapped and held.
  if (pooled + retired != stats.pooled_bytes) {
    return fmt::format("pooled {} and retired {} but stats say {} pooled", pooled, retired, stats.pooled_bytes);
  }
  // Every granule of every chunk is mapped at exactly one slot, pooled or retired.
  std::size_t chunk_granules = 0;
  std::optional<std::string> broken_chunk;
  pool.visit_chunks([&](ChunkId chunk, std::uint32_t granules) {
    chunk_granules += granules;
    const auto found = mapped_of_chunk.find(static_cast<std::uint64_t>(chunk));
    const std::size_t mapped = found == mapped_of_chunk.end() ? 0 : found->second;
    if (!broken_chunk && mapped + pool.pooled_of(chunk) + pool.retired_of(chunk) != granules) {
      broken_chunk = fmt::format("chunk {}: {} granules, but {} mapped, {} pooled and {} retired",
                                 static_cast<std::uint64_t>(chunk), granules, mapped, pool.pooled_of(chunk),
                                 pool.retired_of(chunk));
    }
  });
  if (broken_chunk) return broken_chunk;
  if (mapped_of_chunk.size() > pool.chunk_count()) return std::string("a mapped page belongs to no chunk");
  if (chunk_granules * granule() != holds) return fmt::format("chunks hold {} granules but {} bytes counted", chunk_granules, holds);
  if (holds > mapper_.capacity()) return fmt::format("holds {} bytes, above the capacity {}", holds, mapper_.capacity());
  if (auto broken = check_tags()) return broken;
  for (Address exported : ipc_.exported()) {
    if (live_.find(exported) == nullptr) return fmt::format("exported block {:#x} is not live", exported);
  }
  return check_private_pools();
}

// Paused tags: counted, never the placement a fast path may reuse; a backup only for a paused live block.
std::optional<std::string> TesseraAllocatorImpl::check_tags() const {
  std::size_t paused = 0;
  for (const TagBook::State& state : tags_.states()) paused += state.paused ? 1 : 0;
  if (paused != tags_.paused_count()) return fmt::format("{} tags paused but {} counted", paused, tags_.paused_count());
  if (const Placement* cached = placements_.cached_placement(); cached != nullptr && tags_.is_paused(cached->arena().tag())) {
    return std::string("the placement the fast path reuses is a paused tag's");
  }
  std::optional<std::string> broken;
  tags_.visit_backups([&](const Block* block, const HostBuffer& backup) {
    if (broken) return;
    if (!block->live || block->lent || !is_paused(block)) {
      broken = fmt::format("block {:#x} has a backup but is not a paused live block", block->address);
    } else if (backup.size < block->requested) {
      broken = fmt::format("block {:#x}: its backup of {} bytes is smaller than its {} bytes", block->address,
                           backup.size, block->requested);
    }
  });
  return broken;
}

// Shared blocks: live ones in the live map and counted; freed ones pending; every lent granule still mapped
// at its home slot with a lent block over the sliver; their own pages counted with the arenas'.
std::optional<std::string> TesseraAllocatorImpl::check_shared(
    Bytes& requested, Bytes& allocated, std::size_t& live_blocks, std::size_t lent_blocks, std::size_t& mapped_slots,
    std::unordered_map<std::uint64_t, std::size_t>& mapped_of_chunk) const {
  std::size_t lent = 0;
  for (const auto& shared : shared_) {
    const Block& block = shared->block;
    if (block.live) {
      Block* const* found = live_.find(block.address);
      if (found == nullptr || *found != &block) return fmt::format("shared block {:#x}: not in the live map", block.address);
      requested += block.requested;
      allocated += block.size;
      ++live_blocks;
    } else {
      if (!pending_.waits(&block)) return fmt::format("shared block {:#x}: neither live nor pending", block.address);
    }
    if (block.address < shared->base || block.end() > shared->base + shared->span) {
      return fmt::format("shared block {:#x}: outside its range", block.address);
    }
    const bool paused = tags_.is_paused(shared->tag);
    for (const SharedMapping& mapping : shared->mappings) {
      if (block.live && !paused && !mapping.mapped) return fmt::format("shared block {:#x}: slot {} unmapped", block.address, mapping.slot);
      if (!mapping.is_sliver()) {
        if (mapping.mapped) {
          mapped_slots += mapping.page.granules;
          mapped_of_chunk[static_cast<std::uint64_t>(mapping.page.chunk)] += mapping.page.granules;
        }
        continue;
      }
      ++lent;
      const Block& home = *mapping.lent;
      if (!home.live || !home.lent) return fmt::format("shared block {:#x}: its sliver {:#x} is not lent", block.address, home.address);
      if (mapping.home->tag() != shared->tag) {
        return fmt::format("shared block {:#x}: its sliver {:#x} is under another tag", block.address, home.address);
      }
      if (!mapping.mapped) continue;
      const Region& region = mapping.home->region_of(home);
      const std::size_t slot = (home.address - region.base) / granule();
      std::size_t head = slot;
      while (head > 0 && region.page_granules_at(head) == 0) --head;
      if (!region.is_accessible(slot) || region.chunk_at(head) != mapping.page.chunk ||
          region.page_offset_at(head) + (slot - head) != mapping.page.offset ||
          (home.end() - 1 - region.base) / granule() != slot) {
        return fmt::format("shared block {:#x}: its sliver {:#x} is not on the granule it maps", block.address, home.address);
      }
    }
  }
  if (lent != lent_blocks) return fmt::format("{} lent blocks in the arenas but {} slivers shared", lent_blocks, lent);
  return std::nullopt;
}

}  // namespace tessera::core
