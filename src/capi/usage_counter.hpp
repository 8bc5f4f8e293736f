// Counts of blocks and bytes per pool, in PyTorch's memory_stats() terms (allocation.*, allocated_bytes.*,
// requested_bytes.*, active.*, active_bytes.*, segment.*, reserved_bytes.* with current, peak, allocated and
// freed), computed from the allocator's observer callbacks. The allocator's own stats() has the "all" current
// and peak bytes; this adds the counts, the per-pool split, the cumulative totals that PyTorch reports too,
// and peaks that reset_peaks() starts again (the allocator's own never reset). docs/pytorch.md, "Statistics",
// defines each.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>

#include "driver/fork_guard.hpp"
#include "tessera/allocator_observer.hpp"

namespace tessera::capi {

struct Counter {
  std::uint64_t current = 0;
  std::uint64_t peak = 0;
  std::uint64_t allocated = 0;  // added since the start
  std::uint64_t freed = 0;      // removed since the start

  void add(std::uint64_t amount);
  void remove(std::uint64_t amount);
  void reset_peak() { peak = current; }
  // Moves the current value to `value`, counting the difference as added or removed.
  void set(std::uint64_t value);
};

// One pool's counters.
struct PoolUsage {
  Counter allocation;       // live blocks
  Counter allocated_bytes;  // their rounded bytes
  Counter requested_bytes;  // their requested bytes
  Counter active;           // live blocks and freed ones whose reuse waits for events
  Counter active_bytes;     // their rounded bytes
  Counter segment;          // segments holding any mapped page
  Counter mapped_bytes;     // the bytes of those pages: reserved_bytes.<pool>
};

struct Usage {
  PoolUsage all;
  PoolUsage small_pool;
  PoolUsage large_pool;
  // Every page held from the device, mapped or pooled (pooled pages belong to no pool): reserved_bytes.all.
  Counter reserved_bytes;
};

class UsageCounter final : public AllocatorObserver, private detail::ForkMember {
 public:
  void block_allocated(const BlockEvent& event) override;
  void block_freed(const BlockEvent& event) override;
  void free_completed(const BlockEvent& event) override;
  void pages_created(std::uint64_t count, Bytes bytes) override;
  void pages_released(std::uint64_t count, Bytes bytes) override;
  void pool_held(MemoryPool pool, Bytes mapped_bytes, std::uint64_t segments) override;
  // The bytes of the pages the allocator held before this counter was added as its observer (the pools'
  // figures start from an allocator that holds none).
  void start_from(Bytes bytes);
  void reset_peaks();
  Usage usage() const;

 private:
  // fork(): a reader on another thread may hold the lock.
  void prepare_fork() noexcept override { mutex_.lock(); }
  void after_fork_in_parent() noexcept override { mutex_.unlock(); }
  void after_fork_in_child() noexcept override { mutex_.unlock(); }

  mutable std::mutex mutex_;  // the allocator calls under its own lock; readers come from any thread
  Usage usage_;
  detail::ForkGuardMembership fork_membership_{*this, detail::ForkRank::observer};  // last: leaves first
};

}  // namespace tessera::capi
