// The per-pool usage (tessera/usage.hpp), computed from the observer's events alone. One of the allocator's
// own observers: it is told under the allocator's lock, so it needs none of its own, and read under it.
//
// It is on the fast path (every allocation and free tells it), so an event updates only what cannot be
// derived later: each pool's live figures, what was added, and the peaks. What was removed is what was added
// less what is live; "active" is live plus the frees waiting for events, and its peak can pass the live peak
// only while some free waits, so it is noted only then. The aggregate's live figures and additions are the
// pools' sums; only its peaks are its own.
#pragma once

#include <algorithm>
#include <array>

#include "tessera/allocator_observer.hpp"
#include "tessera/usage.hpp"

namespace tessera::core {

class UsageObserver final : public AllocatorObserver {
 public:
  void block_allocated(const BlockEvent& event) override {
    Pool& pool = of(event.pool);
    pool.added.add(event);
    pool.live.add(event);
    pool.peak.raise_to(pool.live);
    all_.peak.raise_to(sum(pools_[0].live, pools_[1].live));
    if (all_.pending.blocks != 0) [[unlikely]] note_active_peaks(pool);
  }
  void block_freed(const BlockEvent& event) override {
    Pool& pool = of(event.pool);
    pool.live.remove(event);
    if (event.pending) [[unlikely]] {  // active until free_completed
      pool.pending.add(event);
      all_.pending.add(event);
    }
  }
  void free_completed(const BlockEvent& event) override {
    of(event.pool).pending.remove(event);
    all_.pending.remove(event);
  }
  void chunks_created(std::uint64_t /*chunks*/, Bytes bytes) override { reserved_bytes_.add(bytes); }
  void chunks_released(std::uint64_t /*chunks*/, Bytes bytes) override { reserved_bytes_.remove(bytes); }
  void pool_held(SizePool pool, Bytes mapped_bytes, std::uint64_t segments) override {
    Pool& own = of(pool);
    // The aggregate moves by the pool's difference, so that its peak is the peak of the sum.
    all_.segment.set(all_.segment.current - own.segment.current + segments);
    all_.mapped_bytes.set(all_.mapped_bytes.current - own.mapped_bytes.current + mapped_bytes);
    own.segment.set(segments);
    own.mapped_bytes.set(mapped_bytes);
  }

  // Every peak starts again from the current value; the lifetime peaks (AllocatorStats) keep theirs.
  void reset_peaks() noexcept;
  Usage usage() const;

  // The aggregate's live bytes, as rounded and as requested, and their peaks since the start (never reset).
  Bytes allocated_bytes() const noexcept { return pools_[0].live.bytes + pools_[1].live.bytes; }
  Bytes requested_bytes() const noexcept { return pools_[0].live.requested + pools_[1].live.requested; }
  Bytes lifetime_peak_allocated_bytes() const noexcept { return std::max(lifetime_peak_.bytes, all_.peak.bytes); }
  Bytes lifetime_peak_requested_bytes() const noexcept {
    return std::max(lifetime_peak_.requested, all_.peak.requested);
  }

 private:
  // Blocks, their rounded bytes and their requested bytes.
  struct Figures {
    std::uint64_t blocks = 0;
    Bytes bytes = 0;
    Bytes requested = 0;

    void add(const BlockEvent& event) noexcept {
      blocks += 1;
      bytes += event.size;
      requested += event.requested;
    }
    void remove(const BlockEvent& event) noexcept {
      blocks -= 1;
      bytes -= event.size;
      requested -= event.requested;
    }
    // A branch each, not a max: in a steady state the peaks hold, and a compare that falls through costs
    // less than a load, a conditional move and a store.
    void raise_to(const Figures& now) noexcept {
      if (now.blocks > blocks) [[unlikely]] blocks = now.blocks;
      if (now.bytes > bytes) [[unlikely]] bytes = now.bytes;
      if (now.requested > requested) [[unlikely]] requested = now.requested;
    }
  };
  static Figures sum(const Figures& a, const Figures& b) noexcept {
    return {a.blocks + b.blocks, a.bytes + b.bytes, a.requested + b.requested};
  }
  struct Pool {
    Figures live;   // the aggregate's: unused, the pools' sum
    Figures added;  // since the start (the aggregate's: unused, the pools' sum)
    Figures peak;   // of live
    Figures pending;      // freed, waiting for events: active
    Figures active_peak;  // of live + pending, noted while any free waits
    Stat segment;
    Stat mapped_bytes;
  };

  Pool& of(SizePool pool) noexcept { return pools_[pool == SizePool::small ? 0 : 1]; }
  void note_active_peaks(Pool& pool) noexcept;
  static PoolUsage usage_of(const Pool& pool, const Figures& live, const Figures& added);

  std::array<Pool, 2> pools_{};  // small, large
  Pool all_{};
  Stat reserved_bytes_;
  Figures lifetime_peak_;  // the aggregate's peaks before the last reset
};

}  // namespace tessera::core
