// The placements (policy, layer 3): one per arena — a (stream, size pool, tag, private pool) —, made on first
// use and kept for the allocator's life, found by key with the one used last cached for the fast path (a
// loop allocates alike); the reclaim list their free blocks join, oldest freed first; the lists that hold
// the free blocks of pools whose pages must stay (a graph pool's: its graph replays into them), which no
// reclaim reads; and the clock that dates each free, which orders the lists.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "core/placement.hpp"

namespace tessera::core {

class Placements {
 public:
  // Every bit of the stream counts; the size pool, the tag and the private pool share one word, so that the
  // cache compares two: the size pool in bits 0-7, the tag in 8-39, the private pool's index in 40-63.
  using Key = std::pair<std::uintptr_t, std::uint64_t>;
  static Key key(StreamId stream, SizePool pool, TagId tag, PrivatePoolIndex private_pool = shared_cache) noexcept {
    return {static_cast<std::uintptr_t>(stream),
            std::uint64_t{private_pool} << 40 | std::uint64_t{tag} << 8 | static_cast<std::uint8_t>(pool)};
  }
  static SizePool pool_of(Key key) noexcept { return static_cast<SizePool>(key.second & 0xff); }
  static TagId tag_of(Key key) noexcept { return static_cast<TagId>((key.second >> 8) & 0xffffffff); }
  static PrivatePoolIndex private_pool_of(Key key) noexcept { return static_cast<PrivatePoolIndex>(key.second >> 40); }

  // large_grows_down: whether large arenas grow down from the top of their regions (placement.hpp).
  // whole_pages: the driver maps whole handles only, so a block must not be carved over part of a page
  // without the page backer seeing it (Placement::is_cached).
  Placements(Bytes granule, bool large_grows_down, bool whole_pages = false)
      : granule_(granule), large_grows_down_(large_grows_down), whole_pages_(whole_pages) {}
  Placements(const Placements&) = delete;
  Placements& operator=(const Placements&) = delete;

  // The placement used last, when its key is `key`; null otherwise.
  Placement* cached(Key key) const noexcept { return last_ != nullptr && last_key_ == key ? last_ : nullptr; }
  // The placement of `key`, made the first time, and cached.
  Placement& find_or_add(Key key);
  // No placement is cached any more (its tag was paused: the fast path must not reach it).
  void forget_cached() noexcept { last_ = nullptr; }
  const Placement* cached_placement() const noexcept { return last_; }

  Placement& of(const Arena& arena) noexcept { return *list_[arena.index()]; }
  // Gives the free of `block` back to its arena's placement, dated now.
  void give_back(Block* block) { of(*block->arena).give_back(block, ++clock_); }
  // Lends `bytes` at `at` of the free block to a shared block (Placement::lend).
  Block* lend(Arena& arena, Block* free_block, Address at, Bytes bytes) {
    return of(arena).lend(free_block, at, bytes);
  }

  // The free blocks that may hold idle pages, oldest freed first (page_reclaim.cpp takes from it).
  ReclaimList& reclaim_list() noexcept { return reclaim_list_; }
  const ReclaimList& reclaim_list() const noexcept { return reclaim_list_; }

  // The free blocks of `private_pool`'s arenas, made and later ones, wait in a list of their own from now on,
  // out of every reclaim's reach; answers it. let_go_pages gives them back to the reclaim list, in front
  // (the oldest freed), and forgets the held list.
  ReclaimList& hold_pages(PrivatePoolIndex private_pool);
  void let_go_pages(PrivatePoolIndex private_pool);
  // The held list of a pool, or null.
  const ReclaimList* held_pages(PrivatePoolIndex private_pool) const {
    auto found = held_.find(private_pool);
    return found == held_.end() ? nullptr : found->second.get();
  }

  using List = std::vector<std::unique_ptr<Placement>>;  // by Arena::index()
  List::const_iterator begin() const noexcept { return list_.begin(); }
  List::const_iterator end() const noexcept { return list_.end(); }
  std::size_t size() const noexcept { return list_.size(); }

 private:
  Bytes granule_;
  bool large_grows_down_;
  bool whole_pages_;
  std::uint64_t clock_ = 0;
  ReclaimList reclaim_list_;  // before list_: placements unlink their blocks as they go
  std::map<PrivatePoolIndex, std::unique_ptr<ReclaimList>> held_;  // before list_ too
  List list_;
  std::map<Key, Placement*> by_key_;
  Key last_key_{};
  Placement* last_ = nullptr;
};

inline Placement& Placements::find_or_add(Key key) {
  auto found = by_key_.find(key);
  if (found == by_key_.end()) {
    const SizePool pool = pool_of(key);
    const PrivatePoolIndex private_pool = private_pool_of(key);
    const auto index = static_cast<std::uint32_t>(list_.size());
    auto held = held_.find(private_pool);
    ReclaimList& joins = held == held_.end() ? reclaim_list_ : *held->second;
    list_.push_back(std::make_unique<Placement>(index, static_cast<StreamId>(key.first), pool, tag_of(key), granule_,
                                                pool == SizePool::large && large_grows_down_, joins, private_pool,
                                                whole_pages_));
    found = by_key_.emplace(key, list_.back().get()).first;
  }
  last_key_ = key;
  last_ = found->second;
  return *last_;
}

inline ReclaimList& Placements::hold_pages(PrivatePoolIndex private_pool) {
  auto& held = held_[private_pool];
  if (!held) held = std::make_unique<ReclaimList>();
  for (auto& placement : list_) {
    if (placement->arena().private_pool() == private_pool) placement->move_reclaim_list(*held);
  }
  return *held;
}

inline void Placements::let_go_pages(PrivatePoolIndex private_pool) {
  auto held = held_.find(private_pool);
  if (held == held_.end()) return;
  for (auto& placement : list_) {
    if (placement->arena().private_pool() == private_pool) placement->move_reclaim_list(reclaim_list_);
  }
  held_.erase(held);
}

}  // namespace tessera::core
