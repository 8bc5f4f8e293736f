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

namespace {

template <class Change>
void apply(Usage& usage, const BlockEvent& event, Change change) {
  PoolUsage& pool = event.pool == MemoryPool::small ? usage.small_pool : usage.large_pool;
  for (PoolUsage* target : {&usage.all, &pool}) {
    change(target->allocation, 1);
    change(target->allocated_bytes, event.size);
    change(target->requested_bytes, event.requested);
  }
}

}  // namespace

void UsageCounter::block_allocated(const BlockEvent& event) {
  std::lock_guard lock(mutex_);
  apply(usage_, event, [](Counter& counter, std::uint64_t amount) { counter.add(amount); });
}

void UsageCounter::block_freed(const BlockEvent& event) {
  std::lock_guard lock(mutex_);
  apply(usage_, event, [](Counter& counter, std::uint64_t amount) { counter.remove(amount); });
}

void UsageCounter::pages_created(std::uint64_t count, Bytes bytes) {
  std::lock_guard lock(mutex_);
  usage_.segment.add(count);
  usage_.reserved_bytes.add(bytes);
}

void UsageCounter::pages_released(std::uint64_t count, Bytes bytes) {
  std::lock_guard lock(mutex_);
  usage_.segment.remove(count);
  usage_.reserved_bytes.remove(bytes);
}

void UsageCounter::start_from(std::uint64_t pages, Bytes bytes) {
  std::lock_guard lock(mutex_);
  usage_.segment.add(pages);
  usage_.reserved_bytes.add(bytes);
}

void UsageCounter::reset_peaks() {
  std::lock_guard lock(mutex_);
  for (PoolUsage* pool : {&usage_.all, &usage_.small_pool, &usage_.large_pool}) {
    for (Counter* counter : {&pool->allocation, &pool->allocated_bytes, &pool->requested_bytes}) counter->reset_peak();
  }
  usage_.segment.reset_peak();
  usage_.reserved_bytes.reset_peak();
}

Usage UsageCounter::usage() const {
  std::lock_guard lock(mutex_);
  return usage_;
}

}  // namespace tessera::capi
