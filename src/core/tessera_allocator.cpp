// The policy (layer 4): which arena, where a block goes, where its pages come from, when pages go back.
//
// One allocation, end to end:
//   1. round the request (512 B, or PyTorch's power-of-two divisions) and pick the pool: small up to
//      small_max, large above; each (stream, pool) has its own arena of reserved virtual space;
//   2. best fit among the arena's free blocks (smallest that holds it, lowest address among equals) and
//      carve the block from its low end — the rest stays free;
//   3. fast path: every granule slot under the block already has a page (cached memory): done, no driver
//      call;
//   4. otherwise back the missing slots, cheapest source first: pooled pages (unmapped, ready), then new
//      pages while the capacity allows, then the pages of idle cached blocks anywhere, oldest freed first,
//      after proving their streams idle (stitching: scattered pages become one contiguous block);
//   5. out of memory: wait for pending cross-stream frees and try once more; then fail with the figures,
//      everything as it was (pages obtained on the way stay pooled: nothing is lost).
#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <mutex>
#include <unordered_map>

#include "core/address_table.hpp"
#include "core/arena.hpp"
#include "core/stats_observer.hpp"
#include "tessera/allocator.hpp"

namespace tessera {

namespace {

using core::Arena;
using core::Block;
using core::Region;
using core::SlotRange;

constexpr Bytes minimum_block = 512;

Bytes round_to_divisions(Bytes size, unsigned divisions) {
  if (is_power_of_two(size)) return size;
  Bytes floor = Bytes{1} << (63 - __builtin_clzll(size));
  const Bytes step = floor / divisions;
  if (step == 0) return floor << 1;
  const Bytes rounded_down = size & ~(step - 1);
  return rounded_down == size ? size : rounded_down + step;
}

// A page that can be taken back: a mapped slot wholly inside a free block.
struct IdleSlot {
  std::uint64_t freed_at;
  Arena* arena;
  std::uint32_t region;
  std::size_t slot;
};

class Allocator final : public TesseraAllocator {
 public:
  Allocator(Driver& driver, const AllocatorConfig& config)
      : driver_(driver), config_(config), granule_(driver.granularity()), limit_(driver.capacity() / granule_ * granule_) {}

  ~Allocator() override {
    std::lock_guard lock(mutex_);
    for (auto& arena : arenas_) {
      for (const Region& region : arena->regions()) {
        for (std::size_t slot = 0; slot < region.pages.size(); ++slot) {
          if (!region.is_mapped(slot)) continue;
          (void)driver_.unmap(region.slot_address(slot, granule_));
          (void)driver_.release_page(region.pages[slot]);
        }
        (void)driver_.release_reservation(region.base);
      }
    }
    for (PageId page : pool_) (void)driver_.release_page(page);
    for (Pending& pending : pending_) {
      for (EventId event : pending.events) (void)driver_.destroy_event(event);
    }
  }

  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  std::string_view name() const noexcept override { return "tessera"; }
  const AllocatorConfig& config() const noexcept override { return config_; }

  Result<Address> allocate(Bytes size, StreamId stream) override {
    if (size == 0) return make_error(Errc::invalid_argument, "tessera: allocate of 0 bytes");
    std::lock_guard lock(mutex_);
    if (size > limit_) return out_of_memory(size, "larger than the memory this allocator may hold");
    const Bytes rounded = round_size(size);
    if (!pending_.empty()) {
      if (auto done = process_pending(false); !done) return std::move(done).error();
    }
    auto placed = place(rounded, size, stream);
    if (placed || placed.error().code != Errc::out_of_memory) return placed;
    notify([](AllocatorObserver& observer) { observer.alloc_retried(); });
    if (auto done = process_pending(true); !done) return std::move(done).error();
    placed = place(rounded, size, stream);
    if (placed || placed.error().code != Errc::out_of_memory) return placed;
    return out_of_memory(size, placed.error().message);
  }

  Result<void> deallocate(Address address) override {
    std::lock_guard lock(mutex_);
    const LiveEntry* found = live_.find(address);
    if (found == nullptr) {
      return make_error(Errc::not_found, fmt::format("tessera: deallocate of {:#x}, which is not a live block of this "
                                                     "allocator (a double free, or memory from elsewhere)",
                                                     address));
    }
    auto [arena, block] = *found;
    const BlockEvent event = block_event(*arena, *block);
    auto extra = extra_streams_.empty() ? extra_streams_.end() : extra_streams_.find(block);
    if (extra == extra_streams_.end()) {
      live_.erase(address);
      arena->give_back(block, ++clock_);
      notify([&](AllocatorObserver& observer) { observer.block_freed(event); });
      return {};
    }
    // Other streams used the block: it waits until the work they had queued at this moment is done.
    Pending pending{arena, block, {}};
    for (StreamId user : extra->second) {
      auto recorded = record_event_on(user);
      if (!recorded) {
        for (EventId done : pending.events) (void)driver_.destroy_event(done);
        return std::move(recorded).error();  // the block stays live: the caller may free it again
      }
      pending.events.push_back(*recorded);
    }
    extra_streams_.erase(extra);
    live_.erase(address);
    arena->mark_pending(block);
    pending_.push_back(std::move(pending));
    notify([&](AllocatorObserver& observer) { observer.block_freed(event); });
    return {};
  }

  Result<void> record_stream(Address address, StreamId stream) override {
    std::lock_guard lock(mutex_);
    const LiveEntry* found = live_.find(address);
    if (found == nullptr) {
      return make_error(Errc::not_found,
                        fmt::format("tessera: record_stream on {:#x}, which is not a live block", address));
    }
    auto [arena, block] = *found;
    if (stream == arena->stream()) return {};
    auto& streams = extra_streams_[block];
    if (std::find(streams.begin(), streams.end(), stream) == streams.end()) streams.push_back(stream);
    return {};
  }

  Result<void> empty_cache() override {
    std::lock_guard lock(mutex_);
    if (auto done = process_pending(true); !done) return done;
    if (auto taken = reclaim(std::numeric_limits<std::size_t>::max()); !taken) return std::move(taken).error();
    return release_pool(0);
  }

  Result<void> set_memory_fraction(double fraction) override {
    if (!(fraction > 0.0 && fraction <= 1.0)) {
      return make_error(Errc::invalid_argument,
                        fmt::format("tessera: memory fraction {} is not in (0, 1]", fraction));
    }
    std::lock_guard lock(mutex_);
    const auto allowed = static_cast<Bytes>(static_cast<double>(driver_.capacity()) * fraction);
    limit_ = std::max(granule_, allowed / granule_ * granule_);
    return give_back_above(limit_);
  }

  AllocatorStats stats() const override {
    std::lock_guard lock(mutex_);
    return stats_.stats().common;
  }

  TesseraStats tessera_stats() const override {
    std::lock_guard lock(mutex_);
    TesseraStats stats = stats_.stats();
    stats.cached_bytes = 0;
    for (const auto& arena : arenas_) {
      arena->visit_free([&](const Block* block) {
        const Region& region = arena->region_of(*block);
        const SlotRange inner = arena->inner_slots(*block).below(region.table_size());
        for (std::size_t slot = inner.first; slot < inner.end(); ++slot) {
          if (region.is_mapped(slot)) stats.cached_bytes += granule_;
        }
      });
    }
    return stats;
  }

  AllocatorSnapshot snapshot() const override {
    std::lock_guard lock(mutex_);
    AllocatorSnapshot snapshot;
    snapshot.pooled_bytes = pool_.size() * granule_;
    for (const auto& arena : arenas_) {
      for (const Region& region : arena->regions()) {
        SnapshotSegment segment{region.base, region.span, region.mapped * granule_, arena->stream(), arena->pool(), {}};
        for (const Block* block = region.first_block; block != nullptr; block = block->next) {
          using State = SnapshotBlock::State;
          const State state = block->live ? State::active_allocated
                              : block->pending ? State::active_pending_free
                                               : State::inactive;
          Bytes mapped = 0;
          const SlotRange touched = arena->touched_slots(*block).below(region.table_size());
          for (std::size_t slot = touched.first; slot < touched.end(); ++slot) {
            if (!region.is_mapped(slot)) continue;
            const Address start = std::max(block->address, region.slot_address(slot, granule_));
            const Address end = std::min(block->end(), region.slot_address(slot, granule_) + granule_);
            mapped += end - start;
          }
          segment.blocks.push_back({block->address, block->size, block->requested, state, mapped});
        }
        snapshot.segments.push_back(std::move(segment));
      }
    }
    return snapshot;
  }

  void add_observer(AllocatorObserver& observer) override {
    std::lock_guard lock(mutex_);
    observers_.push_back(&observer);
  }

  std::optional<std::string> check() const override;

 private:
  struct LiveEntry {
    Arena* arena = nullptr;
    Block* block = nullptr;
  };

  struct Pending {
    Arena* arena;
    Block* block;
    std::vector<EventId> events;
  };

  template <class Notify>
  void notify(Notify&& call) {
    call(stats_);
    for (AllocatorObserver* observer : observers_) call(*observer);
  }

  BlockEvent block_event(const Arena& arena, const Block& block) const {
    return BlockEvent{block.address, block.size, block.requested, arena.stream(), arena.pool()};
  }

  Bytes round_size(Bytes size) const {
    if (size < minimum_block) return minimum_block;
    const unsigned divisions = config_.roundup_power2_divisions;
    if (divisions > 1 && size > minimum_block * divisions) return round_to_divisions(size, divisions);
    return align_up(size, minimum_block);
  }

  Error out_of_memory(Bytes requested, std::string_view why) {
    notify([&](AllocatorObserver& observer) { observer.out_of_memory(requested); });
    const TesseraStats& stats = stats_.stats();
    Bytes cached = 0;
    for (const auto& arena : arenas_) {
      for (const Region& region : arena->regions()) cached += region.mapped * granule_;
    }
    cached = cached - std::min(cached, stats.common.allocated_bytes) + pool_.size() * granule_;
    return make_error(Errc::out_of_memory,
                      fmt::format("tessera: out of memory allocating {} bytes ({}): {} bytes allocated, {} reserved, "
                                  "about {} cached and unused, {} free on the device (limit {})",
                                  requested, why, stats.common.allocated_bytes, held_, cached,
                                  limit_ - std::min(limit_, held_), limit_));
  }

  Arena* arena_for(StreamId stream, MemoryPool pool) {
    const std::uint64_t key = (static_cast<std::uint64_t>(stream) << 1) | (pool == MemoryPool::small ? 1u : 0u);
    auto found = arena_by_key_.find(key);
    if (found != arena_by_key_.end()) return found->second;
    arenas_.push_back(std::make_unique<Arena>(stream, pool, granule_, reclaim_list_));
    arena_by_key_.emplace(key, arenas_.back().get());
    return arenas_.back().get();
  }

  Bytes region_span(Bytes at_least) const {
    const Bytes span = std::max<Bytes>(driver_.capacity() / granule_ * granule_, granule_) * config_.virtual_factor;
    return std::max(span, align_up(at_least, granule_));
  }

  Result<Address> place(Bytes rounded, Bytes requested, StreamId stream) {
    const MemoryPool pool = rounded <= config_.small_max ? MemoryPool::small : MemoryPool::large;
    Arena* arena = arena_for(stream, pool);
    Block* free_block = arena->best_fit(rounded);
    if (free_block == nullptr) {
      const Bytes span = region_span(rounded);
      auto base = driver_.reserve(span);
      if (!base) return std::move(base).error();
      arena->add_region(*base, span);
      free_block = arena->best_fit(rounded);
    }
    Block* block = arena->take(free_block, rounded, requested);
    if (auto backed = back_with_pages(*arena, *block); !backed) {
      arena->give_back(block, block->freed_at);
      return std::move(backed).error();
    }
    live_.insert(block->address, LiveEntry{arena, block});
    const BlockEvent event = block_event(*arena, *block);
    notify([&](AllocatorObserver& observer) { observer.block_allocated(event); });
    return block->address;
  }

  // Maps a page under every slot of the block that has none.
  Result<void> back_with_pages(Arena& arena, const Block& block) {
    Region& region = arena.region_of(block);
    const SlotRange touched = arena.touched_slots(block);
    if (region.all_mapped(touched)) return {};  // the fast path: cached memory
    missing_.clear();
    for (std::size_t slot = touched.first; slot < touched.first + touched.count; ++slot) {
      if (!region.is_mapped(slot)) missing_.push_back(slot);
    }
    auto obtained = obtain_pages(missing_.size());
    if (!obtained) return std::move(obtained).error();
    const std::size_t from_other_blocks = *obtained;

    std::size_t mapped = 0;
    Result<void> failure;
    for (std::size_t slot : missing_) {
      const PageId page = pool_.back();
      if (auto done = driver_.map(region.slot_address(slot, granule_), page); !done) {
        failure = std::move(done);
        break;
      }
      pool_.pop_back();
      arena.set_page(region, slot, page);
      ++mapped;
    }
    // Access for each run of consecutive new mappings: one call per run.
    std::size_t run_start = 0;
    for (std::size_t i = 1; i <= mapped && failure.ok(); ++i) {
      if (i < mapped && missing_[i] == missing_[i - 1] + 1) continue;
      const std::size_t first = missing_[run_start];
      const Bytes length = (missing_[i - 1] - first + 1) * granule_;
      if (auto done = driver_.set_access(region.slot_address(first, granule_), length); !done) failure = std::move(done);
      run_start = i;
    }
    if (!failure.ok()) {
      // No slot may stay mapped without access: put every page mapped here back into the pool.
      std::size_t unmapped = 0;
      for (std::size_t i = 0; i < mapped; ++i) {
        const std::size_t slot = missing_[i];
        if (!driver_.unmap(region.slot_address(slot, granule_))) continue;  // stays mapped: still consistent
        pool_.push_back(arena.clear_page(region, slot));
        ++unmapped;
      }
      const std::size_t kept = mapped - unmapped;
      if (kept > 0) notify([&](AllocatorObserver& observer) { observer.pages_mapped(kept, kept * granule_); });
      return std::move(failure).error();
    }
    notify([&](AllocatorObserver& observer) { observer.pages_mapped(mapped, mapped * granule_); });
    if (from_other_blocks > 0) {
      notify([&](AllocatorObserver& observer) { observer.stitched(std::min(from_other_blocks, mapped)); });
    }
    collect_garbage();
    return {};
  }

  // PyTorch's garbage_collection_threshold: past it, idle pages go back to the device, oldest first. A
  // failure here does not fail the allocation that triggered it; the pages simply stay held.
  void collect_garbage() {
    if (config_.garbage_collection_threshold <= 0.0) return;
    const auto target = static_cast<Bytes>(static_cast<double>(limit_) * config_.garbage_collection_threshold);
    if (held_ > target) (void)give_back_above(target);
  }

  // Fills the pool to `count` pages: new pages while the limit allows, then pages of idle cached blocks.
  // Returns how many came from other blocks.
  Result<std::size_t> obtain_pages(std::size_t count) {
    using Reclaim = AllocatorConfig::Reclaim;
    std::size_t reclaimed = 0;
    auto take_idle = [&]() -> Result<void> {
      if (pool_.size() >= count) return {};
      auto taken = reclaim(count - pool_.size());
      if (!taken) return std::move(taken).error();
      reclaimed += *taken;
      return {};
    };
    if (config_.reclaim == Reclaim::first) {
      if (auto done = take_idle(); !done) return std::move(done).error();
    }
    std::size_t created = 0;
    Result<void> failure;
    while (pool_.size() < count && held_ + granule_ <= limit_) {
      auto page = driver_.create_page(granule_);
      if (!page) {
        if (page.error().code != Errc::out_of_memory) failure = std::move(page).error();
        break;
      }
      pool_.push_back(*page);
      held_ += granule_;
      ++created;
    }
    if (created > 0) notify([&](AllocatorObserver& observer) { observer.pages_created(created, created * granule_); });
    if (!failure.ok()) return std::move(failure).error();
    if (config_.reclaim == Reclaim::when_full) {
      if (auto done = take_idle(); !done) return std::move(done).error();
    }
    if (pool_.size() < count) {
      return make_error(Errc::out_of_memory,
                        fmt::format("needs {} more page(s) of {} bytes", count - pool_.size(), granule_));
    }
    return reclaimed;
  }

  // Takes up to `count` idle pages, oldest freed first, into the pool, after proving their streams idle.
  Result<std::size_t> reclaim(std::size_t count) {
    idle_.clear();
    visited_.clear();
    for (Block& block : reclaim_list_) {
      if (idle_.size() >= count) break;
      const Region& region = block.arena->region_of(block);
      const SlotRange inner = block.arena->inner_slots(block).below(region.table_size());
      for (std::size_t slot = inner.first; slot < inner.end() && idle_.size() < count; ++slot) {
        if (region.is_mapped(slot)) idle_.push_back({block.freed_at, block.arena, block.region, slot});
      }
      visited_.push_back(&block);
    }
    if (idle_.empty()) {
      drop_exhausted_candidates();
      return std::size_t{0};
    }
    // The proof: every stream whose freed blocks give pages has finished the work queued before now.
    std::vector<StreamId> streams;
    for (const IdleSlot& idle : idle_) {
      if (std::find(streams.begin(), streams.end(), idle.arena->stream()) == streams.end()) {
        streams.push_back(idle.arena->stream());
      }
    }
    for (StreamId stream : streams) {
      if (auto done = driver_.synchronize_stream(stream); !done) return std::move(done).error();
      notify([](AllocatorObserver& observer) { observer.synchronized(false); });
    }
    std::size_t taken = 0;
    Result<void> failure;
    for (const IdleSlot& idle : idle_) {
      Region& region = idle.arena->region(idle.region);
      if (auto done = driver_.unmap(region.slot_address(idle.slot, granule_)); !done) {
        failure = std::move(done);
        break;
      }
      pool_.push_back(idle.arena->clear_page(region, idle.slot));
      ++taken;
    }
    if (taken > 0) {
      notify([&](AllocatorObserver& observer) {
        observer.pages_unmapped(taken, taken * granule_);
        observer.reclaimed(taken);
      });
    }
    drop_exhausted_candidates();
    if (!failure.ok()) return std::move(failure).error();
    return taken;
  }

  // Blocks visited by reclaim that have no idle page left leave the reclaim list until they are freed or
  // merged again, so that the list stays short.
  void drop_exhausted_candidates() {
    for (Block* block : visited_) {
      const Region& region = block->arena->region_of(*block);
      const SlotRange inner = block->arena->inner_slots(*block).below(region.table_size());
      bool any = false;
      for (std::size_t slot = inner.first; slot < inner.end() && !any; ++slot) any = region.is_mapped(slot);
      if (!any) reclaim_list_.erase(reclaim_list_.iterator_to(*block));
    }
    visited_.clear();
  }

  // Releases pooled pages to the device until at most `keep` remain.
  Result<void> release_pool(std::size_t keep) {
    std::size_t released = 0;
    Result<void> failure;
    while (pool_.size() > keep) {
      if (auto done = driver_.release_page(pool_.back()); !done) {
        failure = std::move(done);
        break;
      }
      pool_.pop_back();
      held_ -= granule_;
      ++released;
    }
    if (released > 0) notify([&](AllocatorObserver& observer) { observer.pages_released(released, released * granule_); });
    return failure;
  }

  // Gives pages back until the memory held is at most `target`: pooled pages first, then idle ones.
  Result<void> give_back_above(Bytes target) {
    if (held_ <= target) return {};
    const std::size_t excess = (held_ - target + granule_ - 1) / granule_;
    if (auto done = release_pool(pool_.size() > excess ? pool_.size() - excess : 0); !done) return done;
    if (held_ <= target) return {};
    auto taken = reclaim((held_ - target + granule_ - 1) / granule_);
    if (!taken) return std::move(taken).error();
    return release_pool(0);
  }

  Result<EventId> record_event_on(StreamId stream) {
    auto event = driver_.create_event();
    if (!event) return event;
    if (auto recorded = driver_.record_event(*event, stream); !recorded) {
      (void)driver_.destroy_event(*event);
      return std::move(recorded).error();
    }
    return event;
  }

  // Frees the pending blocks whose events completed (all of them, waiting, when `wait`).
  Result<void> process_pending(bool wait) {
    for (std::size_t i = 0; i < pending_.size();) {
      Pending& pending = pending_[i];
      bool complete = true;
      for (EventId event : pending.events) {
        if (wait) {
          if (auto done = driver_.synchronize_event(event); !done) return done;
          continue;
        }
        auto queried = driver_.query_event(event);
        if (!queried) return std::move(queried).error();
        if (!*queried) {
          complete = false;
          break;
        }
      }
      if (!complete) {
        ++i;
        continue;
      }
      for (EventId event : pending.events) (void)driver_.destroy_event(event);
      pending.arena->give_back(pending.block, ++clock_);
      pending_[i] = std::move(pending_.back());
      pending_.pop_back();
    }
    return {};
  }

  mutable std::mutex mutex_;
  Driver& driver_;
  AllocatorConfig config_;
  Bytes granule_;
  Bytes limit_;
  Bytes held_ = 0;  // pages created and not released: mapped plus pooled
  std::uint64_t clock_ = 0;
  core::ReclaimList reclaim_list_;  // before arenas_: the arenas unlink their blocks as they go
  std::vector<std::unique_ptr<Arena>> arenas_;
  std::unordered_map<std::uint64_t, Arena*> arena_by_key_;
  core::AddressTable<LiveEntry> live_;
  std::unordered_map<const Block*, std::vector<StreamId>> extra_streams_;
  std::vector<Pending> pending_;
  std::vector<PageId> pool_;
  core::StatsObserver stats_;
  std::vector<AllocatorObserver*> observers_;
  std::vector<std::size_t> missing_;  // scratch, kept to avoid an allocation per slow path
  std::vector<IdleSlot> idle_;        // scratch
  std::vector<Block*> visited_;       // scratch
};

std::optional<std::string> Allocator::check() const {
  std::lock_guard lock(mutex_);
  Bytes requested = 0;
  Bytes allocated = 0;
  std::size_t live_blocks = 0;
  std::size_t mapped_slots = 0;
  for (const auto& arena : arenas_) {
    for (const Region& region : arena->regions()) {
      Address expected = region.base;
      std::size_t counted = 0;
      for (std::size_t slot = 0; slot < region.pages.size(); ++slot) counted += region.is_mapped(slot) ? 1 : 0;
      if (counted != region.mapped) return fmt::format("region {:#x}: mapped count {} but {} slots mapped", region.base, region.mapped, counted);
      mapped_slots += counted;
      const Block* previous = nullptr;
      for (const Block* block = region.first_block; block != nullptr; block = block->next) {
        if (block->address != expected) return fmt::format("region {:#x}: gap or overlap at {:#x}", region.base, expected);
        if (block->previous != previous) return fmt::format("block {:#x}: broken back link", block->address);
        const bool is_free = !block->live && !block->pending;
        if ((is_free && block->next != nullptr) != Arena::indexed(block)) {
          return fmt::format("block {:#x}: free index disagrees", block->address);
        }
        if (is_free && !block->reclaim_hook.is_linked()) {
          const SlotRange inner = arena->inner_slots(*block).below(region.table_size());
          for (std::size_t slot = inner.first; slot < inner.end(); ++slot) {
            if (region.is_mapped(slot)) return fmt::format("free block {:#x} holds idle pages but is not in the reclaim list", block->address);
          }
        }
        if (!is_free && block->reclaim_hook.is_linked()) return fmt::format("block {:#x} is in use but in the reclaim list", block->address);
        if (is_free && previous != nullptr && !previous->live && !previous->pending) {
          return fmt::format("blocks {:#x} and {:#x}: free neighbours not merged", previous->address, block->address);
        }
        if (block->live || block->pending) {
          const SlotRange touched = arena->touched_slots(*block);
          for (std::size_t slot = touched.first; slot < touched.first + touched.count; ++slot) {
            if (!region.is_mapped(slot)) return fmt::format("block {:#x}: slot {} has no page", block->address, slot);
          }
        }
        if (block->live) {
          const LiveEntry* found = live_.find(block->address);
          if (found == nullptr || found->block != block) return fmt::format("block {:#x}: not in the live map", block->address);
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
  const TesseraStats& stats = stats_.stats();
  if (live_blocks != live_.size()) return fmt::format("{} live blocks but {} in the live map", live_blocks, live_.size());
  if (requested != stats.common.requested_bytes) return fmt::format("requested {} but stats say {}", requested, stats.common.requested_bytes);
  if (allocated != stats.common.allocated_bytes) return fmt::format("allocated {} but stats say {}", allocated, stats.common.allocated_bytes);
  const Bytes held = (mapped_slots + pool_.size()) * granule_;
  if (held != held_) return fmt::format("pages held {} but counted {}", held_, held);
  if (held != stats.common.reserved_bytes) return fmt::format("reserved {} but stats say {}", held, stats.common.reserved_bytes);
  if (mapped_slots * granule_ != stats.mapped_bytes) return fmt::format("mapped {} but stats say {}", mapped_slots * granule_, stats.mapped_bytes);
  if (pool_.size() * granule_ != stats.pooled_bytes) return fmt::format("pooled {} but stats say {}", pool_.size() * granule_, stats.pooled_bytes);
  if (held_ > driver_.capacity()) return fmt::format("holds {} bytes, above the capacity {}", held_, driver_.capacity());
  return std::nullopt;
}

}  // namespace

Result<std::unique_ptr<TesseraAllocator>> make_tessera_allocator(Driver& driver, const AllocatorConfig& config) {
  if (config.small_max < minimum_block) {
    return make_error(Errc::invalid_argument, "tessera: small_max must be at least 512 bytes");
  }
  if (config.virtual_factor == 0) return make_error(Errc::invalid_argument, "tessera: virtual_factor must be at least 1");
  return std::unique_ptr<TesseraAllocator>(std::make_unique<Allocator>(driver, config));
}

}  // namespace tessera
