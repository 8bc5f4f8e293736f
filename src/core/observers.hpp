// The one way statistics and traces leave the core: every change the allocator makes is told to its
// observers — the statistics, the allocation history, and whatever the user added — through notify(),
// never counted by hand at the place of the change.
#pragma once

#include <vector>

#include "core/history_recorder.hpp"
#include "core/stats_observer.hpp"
#include "tessera/allocator_observer.hpp"

namespace tessera::core {

class Observers {
 public:
  template <class Notify>
  void notify(Notify&& call) {
    call(stats_);
    call(history_);
    for (AllocatorObserver* observer : added_) call(*observer);
  }

  // Not owned: it must outlive the allocator's use of it.
  void add(AllocatorObserver& observer) { added_.push_back(&observer); }

  const StatsObserver& stats() const noexcept { return stats_; }
  HistoryRecorder& history() noexcept { return history_; }
  const HistoryRecorder& history() const noexcept { return history_; }

 private:
  StatsObserver stats_;
  HistoryRecorder history_;
  std::vector<AllocatorObserver*> added_;
};

}  // namespace tessera::core
