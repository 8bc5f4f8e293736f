// Private pools (policy; device_allocator.hpp states the contract, docs/allocator.md "Private pools" the
// rules). A pool's blocks lie in arenas of its own (the arena key holds the pool's index), so that a freed
// block of the pool is found only by allocations into it. Inside a pool the allocator works as outside:
// best fit, stitching scattered pages under a block, and — in a plain pool — slivers and reclaim. A graph
// pool keeps every page it was given until it is released: its graph replays into the addresses of the
// blocks it freed during capture, so no reclaim may unmap them (its free blocks wait in a held list,
// placements.hpp) and no block is built over slivers (a shared block's range goes when it is freed).
#include <fmt/format.h>

#include <limits>
#include <unordered_set>

#include "core/tessera_allocator.hpp"

namespace tessera::core {

bool TesseraAllocatorImpl::slivers_allowed_in(PrivatePoolIndex private_pool) const {
  return private_pool == shared_cache || pools_.kind_of(private_pool) != PoolKind::graph;
}

bool TesseraAllocatorImpl::holds_blocks(PrivatePoolIndex private_pool) const {
  for (const auto& placement : placements_) {
    const Arena& arena = placement->arena();
    if (arena.private_pool() != private_pool) continue;
    for (const Region& region : arena.regions()) {
      for (const Block* block = region.first_block; block != nullptr; block = block->next) {
        if (!block->is_free()) return true;
      }
    }
  }
  return false;
}

Result<void> TesseraAllocatorImpl::give_back_pool(PrivatePoolIndex private_pool) {
  // The pool's free blocks, alone in a held list (a plain pool's are gathered there now), give their idle
  // pages to the page pool; then they join the reclaim list, as the oldest freed, with what stays cached.
  ReclaimList& held = placements_.hold_pages(private_pool);
  auto taken = backer_.reclaim_from(held, std::numeric_limits<std::size_t>::max(), nullptr);
  placements_.let_go_pages(private_pool);
  if (!taken) return std::move(taken).error();
  return {};
}

Result<void> TesseraAllocatorImpl::do_begin_allocate_to_pool(PoolId pool, StreamFilter accepts, PoolKind kind) {
  std::lock_guard lock(mutex_);
  // A released pool none of whose blocks is in use gives its index to the next new pool: its arenas, their
  // virtual space reserved already, are reused instead of reserving more.
  for (PrivatePoolIndex released : pools_.released()) {
    if (!holds_blocks(released)) pools_.reuse(released);
  }
  auto begun = pools_.begin(pool, std::move(accepts), kind);
  if (!begun) return std::move(begun).error();
  if (begun->made && kind == PoolKind::graph) (void)placements_.hold_pages(begun->index);
  return {};
}

Result<void> TesseraAllocatorImpl::do_end_allocate_to_pool(PoolId pool) {
  std::lock_guard lock(mutex_);
  auto ended = pools_.end(pool);
  if (!ended) return std::move(ended).error();
  return {};
}

Result<void> TesseraAllocatorImpl::do_release_pool(PoolId pool) {
  std::lock_guard lock(mutex_);
  auto released = pools_.release(pool);
  if (!released) return std::move(released).error();
  if (!released->has_value()) return {};  // other uses remain
  if (auto given = give_back_pool(**released); !given) {
    return make_error(given.error().code,
                      fmt::format("tessera: {} is released, but giving its cached pages back failed; they stay "
                                  "cached, for any allocation, and empty_cache gives them back: {}",
                                  PrivatePools::describe(pool), given.error().message));
  }
  return {};
}

std::optional<std::string> TesseraAllocatorImpl::check_private_pools() const {
  if (auto broken = pools_.check()) return broken;
  std::unordered_set<const Block*> in_reclaim_list;
  for (const Block& block : placements_.reclaim_list()) in_reclaim_list.insert(&block);
  for (const auto& placement : placements_) {
    const Arena& arena = placement->arena();
    const PrivatePoolIndex index = arena.private_pool();
    if (index == shared_cache) continue;
    const bool held = pools_.kind_of(index) == PoolKind::graph;
    const ReclaimList* held_list = placements_.held_pages(index);
    if (held != (held_list != nullptr)) {
      return fmt::format("private pool {} is {} but its free blocks are {}", index, held ? "a live graph pool" : "not",
                         held_list != nullptr ? "held" : "in the reclaim list");
    }
    for (const Region& region : arena.regions()) {
      for (const Block* block = region.first_block; block != nullptr; block = block->next) {
        if (held && in_reclaim_list.contains(block)) {
          return fmt::format("free block {:#x} of graph pool {} is in the reclaim list: its pages could be taken",
                             block->address, index);
        }
      }
    }
  }
  return std::nullopt;
}

}  // namespace tessera::core
