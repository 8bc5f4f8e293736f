#include "capi/usage_counter.hpp"

#include <algorithm>

namespace tessera::capi {

void Counter::add(std::uint64_t amount) {
  current += amount;
  allocated += amount;
  peak = std::max(peak, current);
}

void Counter::remove(std::uint64_t amount) {
  current -= amount;
  freed += amount;
}

void Counter::set(std::uint64_t value) {
  if (value >= current) {
    add(value - current);
  } else {
    remove(current - value);
  }
}

namespace {

PoolUsage& pool_of(Usage& usage, MemoryPool pool) {
  return pool == MemoryPool::small ? usage.small_pool : usage.large_pool;
}

// A change to the pool's counters and the aggregate's.
template <class Change>
void apply(Usage& usage, MemoryPool pool, Change change) {
  change(usage.all);
  change(pool_of(usage, pool));
}

}  // namespace

void UsageCounter::block_allocated(const BlockEvent& event) {
  std::lock_guard lock(mutex_);
  apply(usage_, event.pool, [&](PoolUsage& pool) {
    pool.allocation.add(1);
    pool.allocated_bytes.add(event.size);
    pool.requested_bytes.add(event.requested);
    pool.active.add(1);
    pool.active_bytes.add(event.size);
  });
}

void UsageCounter::block_freed(const BlockEvent& event) {
  std::lock_guard lock(mutex_);
  apply(usage_, event.pool, [&](PoolUsage& pool) {
    pool.allocation.remove(1);
    pool.allocated_bytes.remove(event.size);
    pool.requested_bytes.remove(event.requested);
    if (event.pending) return;  // active until free_completed
    pool.active.remove(1);
    pool.active_bytes.remove(event.size);
  });
}

void UsageCounter::free_completed(const BlockEvent& event) {
  std::lock_guard lock(mutex_);
  apply(usage_, event.pool, [&](PoolUsage& pool) {
    pool.active.remove(1);
    pool.active_bytes.remove(event.size);
  });
}

void UsageCounter::pages_created(std::uint64_t /*count*/, Bytes bytes) {
  std::lock_guard lock(mutex_);
  usage_.reserved_bytes.add(bytes);
}

void UsageCounter::pages_released(std::uint64_t /*count*/, Bytes bytes) {
  std::lock_guard lock(mutex_);
  usage_.reserved_bytes.remove(bytes);
}

void UsageCounter::pool_held(MemoryPool pool, Bytes mapped_bytes, std::uint64_t segments) {
  std::lock_guard lock(mutex_);
  PoolUsage& own = pool_of(usage_, pool);
  // The aggregate moves by the pool's difference, so that its peak is the peak of the sum.
  usage_.all.segment.set(usage_.all.segment.current - own.segment.current + segments);
  usage_.all.mapped_bytes.set(usage_.all.mapped_bytes.current - own.mapped_bytes.current + mapped_bytes);
  own.segment.set(segments);
  own.mapped_bytes.set(mapped_bytes);
}

void UsageCounter::start_from(Bytes bytes) {
  std::lock_guard lock(mutex_);
  usage_.reserved_bytes.add(bytes);
}

void UsageCounter::reset_peaks() {
  std::lock_guard lock(mutex_);
  for (PoolUsage* pool : {&usage_.all, &usage_.small_pool, &usage_.large_pool}) {
    for (Counter* counter : {&pool->allocation, &pool->allocated_bytes, &pool->requested_bytes, &pool->active,
                             &pool->active_bytes, &pool->segment, &pool->mapped_bytes}) {
      counter->reset_peak();
    }
  }
  usage_.reserved_bytes.reset_peak();
}

Usage UsageCounter::usage() const {
  std::lock_guard lock(mutex_);
  return usage_;
}

}  // namespace tessera::capi
