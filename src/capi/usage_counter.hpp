// Counts of blocks and bytes per pool, in PyTorch's memory_stats() terms (allocation.*, allocated_bytes.*,
// requested_bytes.* with current, peak, allocated and freed), and the pages held from the device (segment.all.*,
// reserved_bytes.all.*), computed from the allocator's observer callbacks. The allocator's own stats() has the
// "all" current and peak bytes; this adds the counts, the per-pool split, the cumulative totals that PyTorch
// reports too, and peaks that reset_peaks() starts again (the allocator's own never reset).
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
};

// One pool's counters: blocks, rounded bytes, requested bytes.
struct PoolUsage {
  Counter allocation;
  Counter allocated_bytes;
  Counter requested_bytes;
};

struct Usage {
  PoolUsage all;
  PoolUsage small_pool;
  PoolUsage large_pool;
  Counter segment;         // pages held from the device (pages are not split by pool)
  Counter reserved_bytes;  // their bytes
};

class UsageCounter final : public AllocatorObserver, private detail::ForkMember {
 public:
  void block_allocated(const BlockEvent& event) override;
  void block_freed(const BlockEvent& event) override;
  void pages_created(std::uint64_t count, Bytes bytes) override;
  void pages_released(std::uint64_t count, Bytes bytes) override;
  // The pages the allocator held before this counter was added as its observer.
  void start_from(std::uint64_t pages, Bytes bytes);
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
