// The policy (layer 4) for requests: which arena, where a block goes, streams and events, the
// out-of-memory ladder. Where a block's pages come from is in page_backing.cpp; every driver call goes
// through the mapper (mapper.hpp).
//
// One allocation, end to end (docs/allocator.md walks it through every layer):
//   1. round the request (512 B, or PyTorch's power-of-two divisions) and pick the pool: small up to
//      small_max, large above; each (stream, pool) has its own arena of reserved virtual space;
//   2. best fit among the arena's free blocks (smallest that holds it, lowest address among equals) and
//      carve the block from its low end — the rest stays free; large arenas grow down instead (a good fit:
//      the highest free block up to twice the best fit's size, carved at its high end), so that their
//      frontier is a tail sliver where a small arena's is a head (placement.hpp, docs/allocator.md);
//   3. fast path: every granule slot under the block already has a page (cached memory): done, no driver
//      call — unless the fit is a large hole worth sparing (spare_hole below);
//   4. otherwise back the missing slots (page_backing.cpp);
//   5. no page can be created: build the block over the free edges of half-used granules (slivers,
//      sliver_sharing.cpp), unless the contiguous placement lacks far fewer pages than that block would map
//      (sliver_middle_before_idle); then take the pages of idle cached blocks; then wait for pending
//      cross-stream frees and try both once more; then fail with the figures, everything as it was (pages
//      obtained on the way stay pooled: nothing is lost).
#include "core/tessera_allocator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "support/power2_divisions.hpp"

namespace tessera {

namespace core {

namespace {

constexpr Bytes minimum_block = 512;

}  // namespace

TesseraAllocatorImpl::TesseraAllocatorImpl(Driver& driver, const AllocatorConfig& config)
    : config_(config),
      mapper_(driver, observers_),
      budget_(mapper_),
      pending_(mapper_),
      // Large arenas grow down (placement.hpp says why), except where pages run on past a block into the free
      // space above it (page_max above the granule), which needs the space above free.
      placements_(granule(), config.page_max / granule() <= 1, !mapper_.capabilities().partial_map),
      tags_(mapper_, config.backup_cache),
      backer_(mapper_, budget_, placements_, observers_, config_) {
  observers_.set_pool_probe(*this);
}

TesseraAllocatorImpl::~TesseraAllocatorImpl() {
  std::lock_guard lock(mutex_);
  // Work may still be queued on blocks freed in stream order, or on streams a pending free waits for: no
  // page is unmapped without proof that it finished. Without that proof the mapped pages are left to the
  // process's end (a leak, not a corruption). A chunk goes back once, when all of it is unmapped.
  std::vector<StreamId> streams;
  for (const auto& placement : placements_) streams.push_back(placement->arena().stream());
  for (StreamId user : pending_.user_streams()) streams.push_back(user);
  const std::vector<EventId> events = pending_.all_events();
  if (mapper_.prove_idle(streams, events)) {
    for (auto& [address, imported] : ipc_.imports()) (void)mapper_.close_import(imported);
    for (auto& shared : shared_) mapper_.unmap_all(*shared);
    for (auto& placement : placements_) {
      Arena& arena = placement->arena();
      for (std::uint32_t index = 0; index < arena.regions().size(); ++index) mapper_.unmap_all(arena.region(index));
    }
  }
  (void)mapper_.release_spare_ranges();  // virtual space only: no proof needed
  mapper_.release_all_pooled();
  mapper_.destroy_events(events);
  // The tag book frees the backups' host buffers as it goes.
}

Bytes TesseraAllocatorImpl::round_size(Bytes size) const {
  if (size < minimum_block) return minimum_block;
  const unsigned divisions = config_.roundup_power2_divisions;
  if (divisions > 1 && size > minimum_block * divisions) return *support::round_up_to_power2_division(size, divisions);  // size <= the limit: no overflow
  return align_up(size, minimum_block);
}

Address TesseraAllocatorImpl::hand_out(Block* block, StreamId stream, SizePool pool) {
  const Address address = block->address;
  block->on_pause = current_on_pause();
  live_.insert(address, block);
  const BlockEvent event = block_event(*block, stream, pool);
  notify_block([&](AllocatorObserver& observer) { observer.block_allocated(event); });
  return address;
}

Result<Address> TesseraAllocatorImpl::do_allocate(Bytes size, StreamId stream) {
  // The history's stack for this allocation is taken before the lock (set_history_stacks says why); off, this
  // is one relaxed load.
  if (stacks_.on()) [[unlikely]] return allocate_with_stack(size, stream);
  std::lock_guard lock(mutex_);
  // The fast path: the fit is cached memory, a page under each of its slots, and no free waits. The ladder
  // (allocate_slow) would take the same block (slivers are tried first only when the contiguous placement
  // lacks pages), through more branches; kept out of line, so that this path saves and restores little.
  // While a private pool is active the ladder routes the request (its filter is a call).
  if (size <= budget_.limit() && pending_.empty() && !mapper_.has_stale_events() && !pools_.any_active()) [[likely]] {
    const Bytes rounded = round_size(size);
    const SizePool pool = pool_for(rounded);
    if (Placement* placement = placement_for(stream, pool, current_tag(), shared_cache); placement != nullptr) [[likely]] {
      Block* fit = placement->fit(rounded);
      if (fit != nullptr && placement->is_cached(*fit, rounded) && !placement->may_spare(*fit)) {
        return hand_out(placement->take(fit, rounded, size), stream, pool);
      }
    }
  }
  return allocate_slow(size, stream);
}

Result<Address> TesseraAllocatorImpl::allocate_with_stack(Bytes size, StreamId stream) {
  std::shared_ptr<const Stack> stack = stacks_.take();  // outside the lock
  std::lock_guard lock(mutex_);
  // Set under the lock for every allocation while on (null: none), so that no stack of an allocation that
  // failed goes with a later one.
  if (stacks_.on()) observers_.history().set_next_stack(std::move(stack));
  return allocate_slow(size, stream);
}

// The whole ladder, under the lock; it begins with the fast path's test, for the callers that skipped it.
Result<Address> TesseraAllocatorImpl::allocate_slow(Bytes size, StreamId stream) {
  if (size > budget_.limit()) return out_of_memory(size, "larger than the memory this allocator may hold");
  const Bytes rounded = round_size(size);
  const SizePool pool = pool_for(rounded);
  const TagId tag = current_tag();
  const PrivatePoolIndex private_pool = pools_.pool_for(stream);
  Placement* found = placement_for(stream, pool, tag, private_pool);
  if (found == nullptr) {
    return make_error(Errc::invalid_argument,
                      fmt::format("tessera: allocating {} bytes under tag '{}', which is paused (resume it first)",
                                  size, tag_name(tag)));
  }
  Placement& placement = *found;
  // The free block the request goes into, handed down the ladder until something changes the free blocks.
  Block* fit = nullptr;
  if (pending_.empty() && !mapper_.has_stale_events()) {
    fit = placement.fit(rounded);
    if (fit != nullptr && placement.is_cached(*fit, rounded)) {
      Block* frontier = spare_hole(placement, *fit, rounded);
      if (frontier == nullptr) return hand_out(placement.take(fit, rounded, size), stream, pool);
      fit = frontier;
    }
  } else if (auto done = process_pending(false); !done) {
    return std::move(done).error();
  }
  // Slivers go before the pages of idle cached blocks: those stay usable later, a sliver beside a live block
  // does not.
  const bool share = can_share_slivers() && slivers_allowed_in(private_pool);
  auto over_slivers = [&](std::size_t max_middle) -> std::optional<Result<Address>> {
    if (!share) return std::nullopt;
    auto shared = place_over_slivers(rounded, size, stream, tag, private_pool, max_middle);
    if (shared || shared.error().code != Errc::out_of_memory) return shared;
    return std::nullopt;
  };
  constexpr std::size_t any_middle = std::numeric_limits<std::size_t>::max();
  // At the limit, where pages are scarce, slivers go first when they leave more pages for what follows.
  if (share && budget_.room() == 0) {
    if (fit == nullptr) fit = placement.fit(rounded);
    if (const std::size_t contiguous = pages_to_place(placement, fit, rounded); contiguous > 0) {
      if (auto shared = over_slivers(contiguous - 1)) return std::move(*shared);
      fit = nullptr;  // a block over slivers that failed half way gave its slivers back: blocks merged
    }
  }
  const std::size_t first_middle = share ? sliver_middle_before_idle(placement, fit, rounded) : any_middle;
  auto placed = place(placement, fit, rounded, size, stream, !share);
  if (placed || placed.error().code != Errc::out_of_memory) return placed;
  if (auto shared = over_slivers(first_middle)) return std::move(*shared);
  if (share) {
    placed = place(placement, nullptr, rounded, size, stream, true);
    if (placed || placed.error().code != Errc::out_of_memory) return placed;
  }
  notify([](AllocatorObserver& observer) { observer.alloc_retried(); });
  if (auto done = process_pending(true); !done) return std::move(done).error();
  // A freed exported block's chunk whose last pages the tries above took back into the pool goes now.
  mapper_.release_retired();
  placed = place(placement, nullptr, rounded, size, stream, true);
  if (placed || placed.error().code != Errc::out_of_memory) return placed;
  if (auto shared = over_slivers(any_middle)) return std::move(*shared);
  return out_of_memory(size, placed.error().message);
}

Result<void> TesseraAllocatorImpl::do_deallocate(Address address) {
  std::lock_guard lock(mutex_);
  // The fast path: a live block of an arena that no other stream used, while no tag is paused.
  if (const std::size_t slot = live_.slot_of(address); slot != live_.npos) [[likely]] {
    Block* block = live_.value_at(slot);
    Arena* arena = block->arena;
    if (!tags_.any_paused() && !ipc_.any_exported() && arena != nullptr && pending_.users_of(block) == nullptr)
        [[likely]] {
      const BlockEvent event = block_event(*arena, *block);
      live_.erase_slot(slot);
      placements_.give_back(block);
      notify_block([&](AllocatorObserver& observer) { observer.block_freed(event); });
      return {};
    }
  }
  return deallocate_slow(address);
}

// Every case, under the lock: a paused block, a shared one, one other streams used, or none at all.
Result<void> TesseraAllocatorImpl::deallocate_slow(Address address) {
  const std::size_t slot = live_.slot_of(address);
  if (slot == live_.npos) {
    return make_error(Errc::not_found, fmt::format("tessera: deallocate of {:#x}, which is not a live block of this "
                                                   "allocator (a double free, or memory from elsewhere)",
                                                   address));
  }
  Block* block = live_.value_at(slot);
  if (tags_.any_paused() && is_paused(block)) return free_paused(block);
  Arena* arena = block->arena;
  if (arena == nullptr) return free_shared(block);
  if (ipc_.any_exported() && ipc_.is_exported(address)) {
    if (auto retired = retire_exported(block); !retired) return retired;
  }
  BlockEvent event = block_event(*arena, *block);
  const std::vector<StreamId>* users = pending_.users_of(block);
  if (users == nullptr) {
    live_.erase_slot(slot);
    placements_.give_back(block);
    notify([&](AllocatorObserver& observer) { observer.block_freed(event); });
    return {};
  }
  // Other streams used the block: it waits until the work they had queued at this moment is done. On a
  // failure the block stays live: the caller may free it again.
  event.pending = true;
  if (auto waiting = pending_.wait_for(arena, block, *users, event); !waiting) return waiting;
  live_.erase_slot(slot);
  notify([&](AllocatorObserver& observer) { observer.block_freed(event); });
  return {};
}

Result<void> TesseraAllocatorImpl::do_record_stream(Address address, StreamId stream) {
  std::lock_guard lock(mutex_);
  Block* const* found = live_.find(address);
  if (found == nullptr) {
    return make_error(Errc::not_found, fmt::format("tessera: record_stream on {:#x}, which is not a live block", address));
  }
  Block* block = *found;
  Arena* arena = block->arena;
  if (stream == (arena != nullptr ? arena->stream() : shared_.of(block)->stream)) return {};
  pending_.record_stream(block, stream);
  return {};
}

Result<void> TesseraAllocatorImpl::empty_cache() {
  std::lock_guard lock(mutex_);
  if (auto done = process_pending(true); !done) return done;
  mapper_.release_spare_events();  // every event completed now: none is kept past an empty_cache
  if (auto taken = backer_.reclaim(std::numeric_limits<std::size_t>::max(), nullptr); !taken) return std::move(taken).error();
  tags_.free_kept_buffers();
  auto released = mapper_.release_pooled(0);
  auto ranges = mapper_.release_spare_ranges();
  return released ? ranges : released;
}

Result<void> TesseraAllocatorImpl::set_memory_fraction(double fraction) {
  if (!(fraction > 0.0 && fraction <= 1.0)) {
    return make_error(Errc::invalid_argument, fmt::format("tessera: memory fraction {} is not in (0, 1]", fraction));
  }
  std::lock_guard lock(mutex_);
  // The limit holds from now on even when giving back fails below (live blocks may exceed it anyway, as
  // in PyTorch); the pages that could not go back stay cached and consistent.
  budget_.set_fraction(fraction);
  (void)process_pending(false);  // frees whose events completed can give their pages back too
  if (auto given = backer_.give_back_above(budget_.limit()); !given) {
    return make_error(given.error().code, fmt::format("tessera: memory limit lowered to {} bytes, but giving back "
                                                      "the cached pages above it failed: {}",
                                                      budget_.limit(), given.error().message));
  }
  return {};
}

void TesseraAllocatorImpl::add_observer(AllocatorObserver& observer) {
  std::lock_guard lock(mutex_);
  observers_.add(observer);
}

Placement* TesseraAllocatorImpl::find_or_add_placement(Placements::Key key) {
  if (tags_.note_used(Placements::tag_of(key)).paused) return nullptr;
  return &placements_.find_or_add(key);
}

// A product past 2^64 saturates to the largest granule multiple, which the driver then refuses to reserve.
Bytes TesseraAllocatorImpl::region_span(Bytes at_least) const {
  const Bytes capacity = std::max<Bytes>(mapper_.capacity() / granule() * granule(), granule());
  Bytes span = 0;
  if (__builtin_mul_overflow(capacity, Bytes{config_.virtual_factor}, &span)) {
    span = std::numeric_limits<Bytes>::max() / granule() * granule();
  }
  return std::max(span, align_up(at_least, granule()));
}

std::size_t TesseraAllocatorImpl::pages_to_place(Placement& placement, const Block* fit, Bytes rounded) const {
  if (fit == nullptr) return (rounded + granule() - 1) / granule();
  const Arena& arena = placement.arena();
  const Region& region = arena.region_of(*fit);
  const Address at = placement.carve_address(*fit, rounded);
  const std::size_t first = arena.slot_of(region, at);
  const std::size_t end = arena.slot_of(region, at + rounded - 1) + 1;
  std::size_t missing = 0;
  for (std::size_t slot = first; slot < end; ++slot) missing += region.is_accessible(slot) ? 0 : 1;
  return missing;
}

// A small request whose cached fit is a hole that the largest request so far fits, and would no longer fit
// once carved, goes to the frontier instead — where that costs no chunk: the pages it lacks there are pooled
// (a chunk's growth), mapped with one set-access call. Otherwise the next large request would create a chunk
// of its own beside a hole of nearly its size, idle (the attention micro-benchmark: 514 MiB more created at
// unlimited capacity). Far from the limit only, where a pooled page spent here is not one a later block
// lacks; where pages are cut from chunks (a pooled granule maps anywhere); in the shared cache of the
// default tag, whose frontier map_ahead() and growth serve.
Block* TesseraAllocatorImpl::spare_hole(Placement& placement, const Block& fit, Bytes rounded) const {
  if (!backer_.pages_split() || placement.arena().tag() != default_tag ||
      placement.arena().private_pool() != shared_cache || mapper_.held() > budget_.share(spare_holes_while_held)) {
    return nullptr;
  }
  Block* frontier = placement.frontier_sparing(fit, rounded);
  if (frontier == nullptr || pages_to_place(placement, frontier, rounded) > mapper_.pool().granules()) return nullptr;
  return frontier;
}

Result<Address> TesseraAllocatorImpl::place(Placement& placement, Block* fit, Bytes rounded, Bytes requested,
                                            StreamId stream, bool take_idle) {
  if (fit == nullptr) fit = placement.fit(rounded);
  if (fit == nullptr) {
    const Bytes span = region_span(rounded);
    auto base = mapper_.reserve(span);
    if (!base) {
      // Address space, not device memory: say so, with what sized the region.
      Error error = std::move(base).error();
      error.message = fmt::format("no virtual address space for a new region of {} bytes (virtual_factor {} x "
                                  "capacity {}): {}",
                                  span, config_.virtual_factor, mapper_.capacity(), error.message);
      return error;
    }
    placement.add_region(*base, span);
    fit = placement.fit(rounded);
  }
  Block* block = placement.take(fit, rounded, requested);
  if (auto backed = backer_.back(placement.arena(), *block, take_idle); !backed) {
    placement.give_back(block, block->freed_at);
    return std::move(backed).error();
  }
  return hand_out(block, stream, placement.arena().pool());
}


// Gives back the blocks whose frees completed (all of them, waiting, when `wait`).
Result<void> TesseraAllocatorImpl::process_pending(bool wait) {
  PendingFrees::Drained drained = pending_.drain(wait);
  for (PendingFrees::Entry& entry : drained.completed) {
    if (entry.arena != nullptr) {
      placements_.give_back(entry.block);
    } else if (!take_apart(entry.block)) {  // a driver call failed: tried again at the next drain
      pending_.requeue(std::move(entry));
      continue;
    }
    if (entry.freed) notify([&](AllocatorObserver& observer) { observer.free_completed(*entry.freed); });
  }
  return std::move(drained.failure);
}

}  // namespace core

Result<std::unique_ptr<TesseraAllocator>> make_tessera_allocator(Driver& driver, const AllocatorConfig& config) {
  if (auto valid = check_allocator_config(config); !valid) return std::move(valid).error();
  return std::unique_ptr<TesseraAllocator>(std::make_unique<core::TesseraAllocatorImpl>(driver, config));
}

}  // namespace tessera
