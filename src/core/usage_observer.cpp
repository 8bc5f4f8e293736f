#include "core/usage_observer.hpp"

namespace tessera::core {

void UsageObserver::note_active_peaks(Pool& pool) noexcept {
  auto note = [](Pool& noted, const Figures& live) {
    Figures active = sum(live, noted.pending);
    noted.active_peak.raise_to(active);
  };
  note(pool, pool.live);
  note(all_, sum(pools_[0].live, pools_[1].live));
}

void UsageObserver::reset_peaks() noexcept {
  lifetime_peak_.raise_to(all_.peak);
  all_.live = sum(pools_[0].live, pools_[1].live);
  for (Pool* pool : {&pools_[0], &pools_[1], &all_}) {
    pool->peak = pool->live;
    pool->active_peak = sum(pool->live, pool->pending);
    pool->segment.reset_peak();
    pool->mapped_bytes.reset_peak();
  }
  reserved_bytes_.reset_peak();
}

PoolUsage UsageObserver::usage_of(const Pool& pool, const Figures& live, const Figures& added) {
  auto stat = [](std::uint64_t current, std::uint64_t peak, std::uint64_t allocated) {
    return Stat{current, std::max(peak, current), allocated, allocated - current};
  };
  PoolUsage usage;
  usage.allocation = stat(live.blocks, pool.peak.blocks, added.blocks);
  usage.allocated_bytes = stat(live.bytes, pool.peak.bytes, added.bytes);
  usage.requested_bytes = stat(live.requested, pool.peak.requested, added.requested);
  usage.active = stat(live.blocks + pool.pending.blocks, std::max(pool.peak.blocks, pool.active_peak.blocks),
                      added.blocks);
  usage.active_bytes =
      stat(live.bytes + pool.pending.bytes, std::max(pool.peak.bytes, pool.active_peak.bytes), added.bytes);
  usage.segment = pool.segment;
  usage.mapped_bytes = pool.mapped_bytes;
  return usage;
}

Usage UsageObserver::usage() const {
  Usage usage;
  usage.small_pool = usage_of(pools_[0], pools_[0].live, pools_[0].added);
  usage.large_pool = usage_of(pools_[1], pools_[1].live, pools_[1].added);
  usage.all = usage_of(all_, sum(pools_[0].live, pools_[1].live), sum(pools_[0].added, pools_[1].added));
  usage.reserved_bytes = reserved_bytes_;
  return usage;
}

}  // namespace tessera::core
