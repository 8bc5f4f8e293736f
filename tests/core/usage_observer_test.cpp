// The usage observer fed events by hand, without the allocator: each figure's current value, peak, added and
// removed; the aggregate's peak is the peak of the sum (not the sum of the pools' peaks); active counts the
// frees that wait; a peak reset starts every peak again while the lifetime peaks keep theirs.
#include "core/usage_observer.hpp"

#include <gtest/gtest.h>

namespace tessera::core {
namespace {

BlockEvent small(Bytes size, Bytes requested, bool pending = false) {
  return BlockEvent{0x1000, size, requested, default_stream, SizePool::small, pending};
}
BlockEvent large(Bytes size, Bytes requested, bool pending = false) {
  return BlockEvent{0x2000, size, requested, default_stream, SizePool::large, pending};
}

TEST(UsageObserver, EachFigureHasItsCurrentPeakAddedAndRemoved) {
  UsageObserver observer;
  observer.block_allocated(small(1024, 1000));
  observer.block_allocated(small(512, 100));
  observer.block_freed(small(1024, 1000));
  const Usage usage = observer.usage();
  EXPECT_EQ(usage.small_pool.allocation, (Stat{1, 2, 2, 1}));
  EXPECT_EQ(usage.small_pool.allocated_bytes, (Stat{512, 1536, 1536, 1024}));
  EXPECT_EQ(usage.small_pool.requested_bytes, (Stat{100, 1100, 1100, 1000}));
  EXPECT_EQ(usage.small_pool.active, usage.small_pool.allocation) << "no free waits";
  EXPECT_EQ(usage.large_pool.allocation, Stat{});
  EXPECT_EQ(observer.allocated_bytes(), 512u);
  EXPECT_EQ(observer.requested_bytes(), 100u);
}

TEST(UsageObserver, TheAggregatesPeakIsThePeakOfTheSum) {
  UsageObserver observer;
  observer.block_allocated(small(4096, 4096));  // small peaks at 4096 alone
  observer.block_freed(small(4096, 4096));
  observer.block_allocated(large(8192, 8192));  // large peaks at 8192 alone
  const Usage usage = observer.usage();
  EXPECT_EQ(usage.small_pool.allocated_bytes.peak, 4096u);
  EXPECT_EQ(usage.large_pool.allocated_bytes.peak, 8192u);
  EXPECT_EQ(usage.all.allocated_bytes.peak, 8192u) << "never 4096 + 8192 at once";
  EXPECT_EQ(usage.all.allocated_bytes.allocated, 12288u);
  EXPECT_EQ(usage.all.allocated_bytes.freed, 4096u);
  EXPECT_EQ(usage.all.allocation, (Stat{1, 1, 2, 1}));
}

TEST(UsageObserver, AFreeThatWaitsStaysActiveUntilItCompletes) {
  UsageObserver observer;
  observer.block_allocated(large(1000, 1000));
  observer.block_freed(large(1000, 1000, true));
  observer.block_allocated(large(3000, 3000));  // active: 4000 at once
  Usage usage = observer.usage();
  EXPECT_EQ(usage.large_pool.allocated_bytes.current, 3000u);
  EXPECT_EQ(usage.large_pool.active_bytes, (Stat{4000, 4000, 4000, 0}));
  EXPECT_EQ(usage.all.active, (Stat{2, 2, 2, 0}));
  observer.free_completed(large(1000, 1000, true));
  usage = observer.usage();
  EXPECT_EQ(usage.large_pool.active_bytes, (Stat{3000, 4000, 4000, 1000}));
  EXPECT_EQ(usage.all.active.current, 1u);
  // With no free waiting, active follows the live figures' peak again.
  observer.block_allocated(large(5000, 5000));
  EXPECT_EQ(observer.usage().large_pool.active_bytes.peak, 8000u);
}

TEST(UsageObserver, AResetStartsEveryPeakAgainButNotTheLifetimePeaks) {
  UsageObserver observer;
  observer.block_allocated(small(2048, 2000));
  observer.block_allocated(large(1 << 20, 1 << 20));
  observer.block_freed(large(1 << 20, 1 << 20));
  observer.chunks_created(1, 2 << 20);
  observer.pool_held(SizePool::large, 2 << 20, 1);
  observer.pool_held(SizePool::large, 0, 0);
  observer.reset_peaks();
  const Usage usage = observer.usage();
  EXPECT_EQ(usage.all.allocated_bytes, (Stat{2048, 2048, 2048 + (1 << 20), 1 << 20}));
  EXPECT_EQ(usage.large_pool.mapped_bytes, (Stat{0, 0, 2 << 20, 2 << 20}));
  EXPECT_EQ(usage.all.segment.peak, 0u);
  EXPECT_EQ(usage.reserved_bytes, (Stat{2 << 20, 2 << 20, 2 << 20, 0}));
  EXPECT_EQ(observer.lifetime_peak_allocated_bytes(), 2048u + (1 << 20));
  EXPECT_EQ(observer.lifetime_peak_requested_bytes(), 2000u + (1 << 20));
  observer.block_allocated(large(4 << 20, 4 << 20));
  EXPECT_EQ(observer.lifetime_peak_allocated_bytes(), 2048u + (4 << 20)) << "a later, higher peak counts";
}

TEST(UsageObserver, TheAggregatesSegmentsMoveByEachPoolsDifference) {
  UsageObserver observer;
  observer.pool_held(SizePool::small, 4 << 20, 2);
  observer.pool_held(SizePool::large, 6 << 20, 1);
  observer.pool_held(SizePool::small, 2 << 20, 1);
  const Usage usage = observer.usage();
  EXPECT_EQ(usage.all.segment, (Stat{2, 3, 3, 1}));
  EXPECT_EQ(usage.all.mapped_bytes, (Stat{8 << 20, 10 << 20, 10 << 20, 2 << 20}));
}

}  // namespace
}  // namespace tessera::core
