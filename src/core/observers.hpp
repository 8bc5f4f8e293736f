// The one way statistics and traces leave the core: every change the allocator makes is told to its
// observers — the statistics, the allocation history, and whatever the user added — through notify(),
// never counted by hand at the place of the change.
#pragma once

#include <array>
#include <cstddef>
#include <span>
#include <vector>

#include "core/history_recorder.hpp"
#include "core/stats_observer.hpp"
#include "core/usage_observer.hpp"
#include "tessera/allocator_observer.hpp"

namespace tessera::core {

// What the segments of one pool hold (AllocatorObserver::pool_held).
struct PoolHeld {
  Bytes mapped_bytes = 0;
  std::uint64_t segments = 0;  // segments with any page mapped

  bool operator==(const PoolHeld&) const = default;
};

// The allocator's answer to "what does this pool hold now", read from its regions. Events cannot carry it:
// the mapper maps slots of regions, and a region does not know its pool.
class PoolProbe {
 public:
  virtual ~PoolProbe() = default;
  virtual PoolHeld held_by(SizePool pool) const = 0;
};

class Observers {
 public:
  template <class Notify>
  void notify(Notify&& call) {
    call(stats_);
    call(usage_);
    call(history_);
    call(pool_watch_);
    for (AllocatorObserver* observer : added_) call(*observer);
    if (pool_watch_.moved) tell_pools();
  }
  // notify() for an event about a block alone (block_allocated, block_freed, free_completed): no pool's
  // segments change with it, so the pool figures are not looked at. The fast path's two events.
  template <class Notify>
  void notify_block(Notify&& call) {
    call(stats_);
    call(usage_);
    call(history_);
    for (AllocatorObserver* observer : added_) call(*observer);
  }

  // Not owned: it must outlive the allocator's use of it.
  void add(AllocatorObserver& observer) { added_.push_back(&observer); }
  // Not owned: the allocator, which outlives its observers' use.
  void set_pool_probe(const PoolProbe& probe) { probe_ = &probe; }

  // The statistics the events gave: the stats observer's, with the live bytes and their peaks from the usage.
  TesseraStats stats() const {
    TesseraStats stats = stats_.stats();
    stats.common.allocated_bytes = usage_.allocated_bytes();
    stats.common.requested_bytes = usage_.requested_bytes();
    stats.common.peak_allocated_bytes = usage_.lifetime_peak_allocated_bytes();
    stats.common.peak_requested_bytes = usage_.lifetime_peak_requested_bytes();
    return stats;
  }
  UsageObserver& usage() noexcept { return usage_; }
  const UsageObserver& usage() const noexcept { return usage_; }
  HistoryRecorder& history() noexcept { return history_; }
  const HistoryRecorder& history() const noexcept { return history_; }

 private:
  // Notes the events after which a pool may hold something else: pages mapped or unmapped, and a shared
  // block built (its pages are mapped before it joins the allocator's list of shared blocks).
  struct PoolWatch final : AllocatorObserver {
    void pages_mapped(std::span<const PageMapping>) override { moved = true; }
    void pages_unmapped(std::span<const PageMapping>) override { moved = true; }
    void shared(std::uint64_t) override { moved = true; }
    bool moved = false;
  };

  // Tells every observer pool_held for each pool whose figures changed since they were last told.
  void tell_pools() {
    pool_watch_.moved = false;
    if (probe_ == nullptr) return;
    for (const SizePool pool : {SizePool::small, SizePool::large}) {
      const PoolHeld now = probe_->held_by(pool);
      PoolHeld& told = told_[static_cast<std::size_t>(pool)];
      if (now == told) continue;
      told = now;
      notify([&](AllocatorObserver& observer) { observer.pool_held(pool, now.mapped_bytes, now.segments); });
    }
  }

  StatsObserver stats_;
  UsageObserver usage_;
  HistoryRecorder history_;
  PoolWatch pool_watch_;
  std::vector<AllocatorObserver*> added_;
  const PoolProbe* probe_ = nullptr;
  std::array<PoolHeld, 2> told_{};  // by SizePool
};

}  // namespace tessera::core
