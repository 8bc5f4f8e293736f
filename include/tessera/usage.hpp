// Counts of blocks and bytes per pool in PyTorch's memory_stats() terms (allocation.*, allocated_bytes.*,
// requested_bytes.*, active.*, active_bytes.*, segment.*, reserved_bytes.*), each with its current value,
// its peak, and what was added and removed since the start, as PyTorch's Stat. Kept by an observer inside
// the allocator, under its lock (TesseraAllocator::usage()); docs/pytorch.md, "Statistics", defines each.
#pragma once

#include <algorithm>
#include <cstdint>

namespace tessera {

struct Stat {
  std::uint64_t current = 0;
  std::uint64_t peak = 0;       // since the start or the last reset_peak()
  std::uint64_t allocated = 0;  // added since the start
  std::uint64_t freed = 0;      // removed since the start

  void add(std::uint64_t amount) noexcept {
    current += amount;
    allocated += amount;
    peak = std::max(peak, current);
  }
  void remove(std::uint64_t amount) noexcept {
    current -= amount;
    freed += amount;
  }
  void reset_peak() noexcept { peak = current; }
  // Moves the current value to `value`, counting the difference as added or removed.
  void set(std::uint64_t value) noexcept {
    if (value >= current) {
      add(value - current);
    } else {
      remove(current - value);
    }
  }

  bool operator==(const Stat&) const = default;
};

// One pool's figures (or the aggregate's).
struct PoolUsage {
  Stat allocation;       // live blocks
  Stat allocated_bytes;  // their rounded bytes
  Stat requested_bytes;  // their requested bytes
  Stat active;           // live blocks and freed ones whose reuse waits for events
  Stat active_bytes;     // their rounded bytes
  Stat segment;          // segments holding any mapped page
  Stat mapped_bytes;     // the bytes of those pages: reserved_bytes.<pool>

  bool operator==(const PoolUsage&) const = default;
};

struct Usage {
  PoolUsage all;
  PoolUsage small_pool;
  PoolUsage large_pool;
  // Every page held from the device, mapped or pooled (pooled pages belong to no pool): reserved_bytes.all.
  Stat reserved_bytes;

  bool operator==(const Usage&) const = default;
};

}  // namespace tessera
