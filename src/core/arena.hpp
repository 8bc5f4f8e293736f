// An arena (bookkeeping, layer 2): the virtual regions reserved for one (stream, size pool, tag, private pool),
// the blocks that tile
// them and each region's page table. Pure host code: where blocks are carved and merged is the placement's
// (placement.hpp), which pages are mapped the mapper's (mapper.hpp).
//
// Invariant: every slot that a live block touches has an accessible page. Free blocks may sit over mapped
// slots (cached memory, reused with no driver call) or unmapped ones. A slot lying wholly inside a free
// block is idle: its page can be taken back without touching live data.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "core/block.hpp"
#include "core/region.hpp"
#include "tessera/tags.hpp"
#include "tessera/types.hpp"

namespace tessera::core {

// A private pool's place among its allocator's (private_pools.hpp); shared_cache is none.
using PrivatePoolIndex = std::uint32_t;
inline constexpr PrivatePoolIndex shared_cache = 0;
inline constexpr PrivatePoolIndex max_private_pools = (PrivatePoolIndex{1} << 24) - 1;  // the arena key's 24 bits

class Arena {
 public:
  // `index`: the arena's place among its allocator's arenas, so that a block leads back to its placement.
  Arena(std::uint32_t index, StreamId stream, SizePool pool, TagId tag, Bytes granule,
        PrivatePoolIndex private_pool = shared_cache)
      : index_(index),
        stream_(stream),
        pool_(pool),
        tag_(tag),
        private_pool_(private_pool),
        granule_(granule),
        granule_shift_(static_cast<unsigned>(__builtin_ctzll(granule))) {}
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  std::uint32_t index() const noexcept { return index_; }
  StreamId stream() const noexcept { return stream_; }
  SizePool pool() const noexcept { return pool_; }
  TagId tag() const noexcept { return tag_; }
  PrivatePoolIndex private_pool() const noexcept { return private_pool_; }
  Bytes granule() const noexcept { return granule_; }
  const std::vector<Region>& regions() const noexcept { return regions_; }
  Region& region(std::uint32_t index) { return regions_[index]; }
  Region& region_of(const Block& block) { return regions_[block.region]; }
  const Region& region_of(const Block& block) const { return regions_[block.region]; }
  // Every block ever made here, free or in use (spare ones included).
  template <class Visit>
  void visit_storage(Visit&& visit) {
    for (Block& block : storage_) visit(block);
  }

  // A newly reserved range becomes one free block; answers it.
  Block* add_region(Address base, Bytes span);

  // A fresh block of this arena (in no region until linked), and a block no region holds any more.
  Block* new_block();
  void recycle(Block* block) { spare_.push_back(block); }

  // The slot of an address of a region, the slots a block touches, and the slots wholly inside it (its idle
  // slots when it is free).
  std::size_t slot_of(const Region& region, Address at) const noexcept { return (at - region.base) >> granule_shift_; }
  SlotRange touched_slots(const Block& block) const;
  SlotRange inner_slots(const Block& block) const;
  // Whether a page is mapped wholly inside the block.
  bool holds_whole_page(const Block& block) const;

 private:
  std::uint32_t index_;
  StreamId stream_;
  SizePool pool_;
  TagId tag_;
  PrivatePoolIndex private_pool_;
  Bytes granule_;  // a power of two (the driver contract): slot arithmetic shifts instead of dividing
  unsigned granule_shift_;
  std::deque<Block> storage_;
  std::vector<Block*> spare_;
  std::vector<Region> regions_;
};

}  // namespace tessera::core
