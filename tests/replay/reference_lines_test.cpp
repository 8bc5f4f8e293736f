// The reference lines and the avg_frag floors, on a trace worked out by hand and against every allocator.
#include <gtest/gtest.h>

#include "tessera/replay.hpp"
#include "tessera/workload.hpp"

namespace tessera {
namespace {

// Live bytes after each event: 4, 6, 2, 0, 1 MiB (0 before the first).
Trace rise_and_fall() {
  Trace trace;
  trace.name = "rise_and_fall";
  trace.streams = {default_stream};
  trace.events = {
      TraceEvent::alloc(0, 4 * MiB, 0), TraceEvent::alloc(1, 2 * MiB, 0), TraceEvent::free(0, 4 * MiB, 0),
      TraceEvent::free(1, 2 * MiB, 0),  TraceEvent::alloc(2, 1 * MiB, 0),
  };
  trace.block_count = 3;
  return trace;
}

TEST(AvgFragFloor, KeepingEveryPageHoldsTheMostLiveSoFar) {
  // Held 4, 6, 6, 6, 6: fragmentation 0, 0, 4/6, 6/6, 5/6; the sample before the first event holds nothing.
  EXPECT_DOUBLE_EQ(avg_frag_floor(rise_and_fall()), (4.0 / 6 + 1.0 + 5.0 / 6) / 5);
}

TEST(AvgFragFloor, GivingBackIdlePagesHoldsTheMostLiveInTheWindow) {
  // A page idle over one event goes back: held max(0,4)=4, max(4,6)=6, max(6,2)=6, max(2,0)=2, max(0,1)=1.
  EXPECT_DOUBLE_EQ(avg_frag_floor(rise_and_fall(), 1), (4.0 / 6 + 1.0) / 5);
  // A window longer than the trace is the same as giving nothing back.
  EXPECT_DOUBLE_EQ(avg_frag_floor(rise_and_fall(), 100), avg_frag_floor(rise_and_fall()));
}

TEST(AvgFragFloor, InitialBlocksAreLiveFromTheFirstSample) {
  Trace trace = rise_and_fall();
  for (TraceEvent& event : trace.events) ++event.block;
  trace.initial_blocks = {{0, 2 * MiB, 0}};
  trace.block_count = 4;
  // Live 2, then 6, 8, 4, 2, 3: held 2, 6, 8, 8, 8, 8.
  EXPECT_DOUBLE_EQ(avg_frag_floor(trace), (0.0 + 0.0 + 0.0 + 4.0 / 8 + 6.0 / 8 + 5.0 / 8) / 6);
}

TEST(ReferenceLines, IdealCacheReservesTheMostLiveAndReportsTheFloor) {
  const ReplayResult line = ideal_cache_result(rise_and_fall(), 2 * MiB);
  EXPECT_EQ(line.allocator, "ideal_cache");
  EXPECT_EQ(line.peak_reserved, 6 * MiB);
  EXPECT_EQ(line.min_capacity, 6 * MiB);
  EXPECT_DOUBLE_EQ(line.avg_frag, avg_frag_floor(rise_and_fall()));
  EXPECT_DOUBLE_EQ(ideal_result(rise_and_fall(), 2 * MiB).avg_frag, 0.0);
}

TEST(ReferenceLines, IdealCacheKeepsASeriesOfTheMostLiveSoFar) {
  const ReplayResult line = ideal_cache_result(rise_and_fall(), 2 * MiB, 5);
  // As a replay samples: after the initial blocks (event 0), then after events 0 to 4.
  ASSERT_EQ(line.series.size(), 6U);
  const Bytes live[] = {0, 4 * MiB, 6 * MiB, 2 * MiB, 0, 1 * MiB};
  const Bytes held[] = {0, 4 * MiB, 6 * MiB, 6 * MiB, 6 * MiB, 6 * MiB};
  for (std::size_t i = 0; i < line.series.size(); ++i) {
    EXPECT_EQ(line.series[i].allocated, live[i]) << i;
    EXPECT_EQ(line.series[i].reserved, held[i]) << i;
  }
  EXPECT_TRUE(ideal_cache_result(rise_and_fall(), 2 * MiB).series.empty());
}

TEST(ReferenceLines, AreFoundByNameAndAreNoAllocators) {
  for (std::string_view name : {"ideal", "ideal_cache"}) {
    EXPECT_TRUE(is_reference_line(name));
    auto line = reference_result(name, rise_and_fall(), 2 * MiB);
    ASSERT_TRUE(line.has_value()) << name;
    EXPECT_EQ(line->allocator, name);
    ReplayOptions options;
    options.allocator = std::string(name);
    auto refused = replay(rise_and_fall(), options);
    ASSERT_FALSE(refused.ok()) << name;
    EXPECT_NE(refused.error().message.find(std::string(name)), std::string::npos);
  }
  EXPECT_FALSE(is_reference_line("tessera"));
  EXPECT_FALSE(reference_result("tessera", rise_and_fall(), 2 * MiB).has_value());
}

// At unlimited capacity no allocator here gives a page back, so none can go below the floor.
TEST(AvgFragFloor, NoAllocatorGoesBelowItAtUnlimitedCapacity) {
  auto trace = generate_workload("training", {{"preset", "tiny"}, {"steps", "3"}});
  ASSERT_TRUE(trace.ok()) << describe(trace.error());
  const double floor = avg_frag_floor(*trace);
  EXPECT_GT(floor, 0.0);
  for (std::string_view name : replay_allocator_names()) {
    if (is_reference_line(name)) continue;
    ReplayOptions options;
    options.allocator = std::string(name);
    auto result = replay(*trace, options);
    ASSERT_TRUE(result.ok()) << name << ": " << describe(result.error());
    EXPECT_GE(result->avg_frag, floor) << name;
  }
}

}  // namespace
}  // namespace tessera
