// One observer receives every change the allocator makes, so that statistics, the allocation history and
// tracing are computed in one place each instead of inline at every mutation.
#pragma once

#include <cstdint>
#include <span>

#include "tessera/tags.hpp"
#include "tessera/types.hpp"

namespace tessera {

struct BlockEvent {
  Address address = 0;
  Bytes size = 0;       // rounded size the block occupies
  Bytes requested = 0;  // what the caller asked for
  StreamId stream{};
  SizePool pool = SizePool::large;
  // block_freed only: the block's reuse waits for events on the other streams that used it, so it stays
  // active (PyTorch's active_pending_free) until free_completed tells the same event again.
  bool pending = false;
};

// One mapping of physical pages at a virtual address, as the driver made or undid it. A page mapped a second
// time (a shared block's sliver) is not one: its bytes are counted where it is mapped first.
struct PageMapping {
  Address address = 0;
  Bytes size = 0;
};

// A granule mapped a second time, at `address` (`size` bytes), for a shared block that uses `used` bytes of it
// from `used_at`: bytes its home lends from `home` (where the granule stays mapped for the live block beside
// them).
struct SliverMapping {
  Address address = 0;
  Bytes size = 0;
  Address home = 0;
  Address used_at = 0;
  Bytes used = 0;
};

class AllocatorObserver {
 public:
  virtual ~AllocatorObserver() = default;

  virtual void block_allocated(const BlockEvent&) {}
  virtual void block_freed(const BlockEvent&) {}  // the caller's free; reuse may wait for events
  // A free that waited (BlockEvent::pending): its events completed and the block is cached, or taken apart.
  virtual void free_completed(const BlockEvent&) {}
  virtual void chunks_created(std::uint64_t /*count*/, Bytes /*bytes*/) {}
  virtual void chunks_released(std::uint64_t /*count*/, Bytes /*bytes*/) {}
  // Pages mapped and unmapped, one entry per mapping, in the order made (their sizes sum to the bytes).
  virtual void pages_mapped(std::span<const PageMapping> /*mappings*/) {}
  virtual void pages_unmapped(std::span<const PageMapping> /*mappings*/) {}
  // A block built from pages taken from other free blocks: `pages` of them moved.
  virtual void stitched(std::uint64_t /*pages*/) {}
  // A block built over `slivers` (1 or 2) free edges of granules that live blocks half use.
  virtual void shared(std::uint64_t /*slivers*/) {}
  // Mappings of granules that are mapped elsewhere too (a shared block's slivers), made and undone.
  virtual void slivers_mapped(std::span<const SliverMapping> /*slivers*/) {}
  virtual void slivers_unmapped(std::span<const SliverMapping> /*slivers*/) {}
  // Pages taken back from idle cached blocks (into the pool or to the device).
  virtual void reclaimed(std::uint64_t /*pages*/) {}
  // A wait on a stream (or the whole device) to prove memory idle before its pages are unmapped.
  virtual void synchronized(bool /*whole_device*/) {}
  virtual void alloc_retried() {}
  // A tag paused (its live blocks' pages given back; `backup_bytes` of them copied to the host), and
  // resumed (its live blocks mapped again, their backups copied back).
  virtual void tag_paused(TagId /*tag*/, Bytes /*paused_bytes*/, Bytes /*backup_bytes*/) {}
  virtual void tag_resumed(TagId /*tag*/, Bytes /*resumed_bytes*/) {}
  virtual void out_of_memory(Bytes /*requested*/) {}
  // What the segments of one pool hold now: the bytes of the pages mapped under them (not the slivers a
  // shared block maps a second time) and how many segments hold any. Told after a change that moved it.
  virtual void pool_held(SizePool /*pool*/, Bytes /*mapped_bytes*/, std::uint64_t /*segments*/) {}
};

}  // namespace tessera
