// The trace model: the event's size, summarize() and validate().
#include <gtest/gtest.h>

#include "tessera/replay.hpp"
#include "tessera/trace.hpp"

namespace tessera {
namespace {

static_assert(sizeof(TraceEvent) == 32, "a replay streams millions of events: keep them small");

Trace two_streams() {
  Trace trace;
  trace.name = "t";
  trace.streams = {StreamId{0}, StreamId{9}};
  trace.initial_blocks = {{0, 500, 1}};
  trace.events = {TraceEvent::free(0, 500, 1, 3), TraceEvent::alloc(1, 100, 0, 4), TraceEvent::iteration(0),
                  TraceEvent::alloc(2, 50, 0, 6)};
  trace.block_count = 3;
  return trace;
}

TEST(TraceModel, SummarizesCountsPeakStreamsAndTimes) {
  const TraceSummary summary = summarize(two_streams());
  EXPECT_EQ(summary.allocs, 2u);
  EXPECT_EQ(summary.frees, 1u);
  EXPECT_EQ(summary.iterations, 1u);
  EXPECT_EQ(summary.initial_blocks, 1u);
  EXPECT_EQ(summary.initial_bytes, 500u);
  EXPECT_EQ(summary.peak_live_bytes, 500u);  // the initial blocks were the peak
  EXPECT_EQ(summary.peak_event, TraceSummary::npos);
  EXPECT_EQ(summary.live_bytes_at_end, 150u);
  EXPECT_EQ(summary.live_blocks_at_end, 2u);
  EXPECT_EQ(summary.largest_alloc, 100u);
  EXPECT_EQ(summary.streams, 2u);
  EXPECT_EQ(summary.first_time_us, 3);
  EXPECT_EQ(summary.last_time_us, 6);

  const TraceSummary empty = summarize(Trace{});
  EXPECT_EQ(empty.peak_live_bytes, 0u);
  EXPECT_EQ(empty.first_time_us, no_time);
}

TEST(TraceModel, ASummaryNamesTheEventWhereTheLiveBytesPass2To64) {
  constexpr Bytes largest = Bytes{1} << 63;
  Trace trace;
  trace.name = "huge";
  trace.streams = {StreamId{0}};
  trace.events = {TraceEvent::alloc(0, largest, 0, 1), TraceEvent::alloc(1, largest - 1, 0, 2),
                  TraceEvent::alloc(2, 2, 0, 3), TraceEvent::free(0, largest, 0, 4)};
  trace.block_count = 3;
  const TraceSummary summary = summarize(trace);
  EXPECT_EQ(summary.live_past_2_64, 2u);
  EXPECT_EQ(summarize(two_streams()).live_past_2_64, TraceSummary::npos);
}

void expect_invalid(const Trace& trace, std::string_view words) {
  const Result<void> result = validate(trace);
  ASSERT_FALSE(result.ok()) << "expected '" << words << "'";
  EXPECT_EQ(result.error().code, Errc::invalid_argument);
  EXPECT_NE(result.error().message.find(words), std::string::npos) << result.error().message;
}

TEST(TraceModel, ValidateNamesTheFirstBadEvent) {
  EXPECT_TRUE(validate(two_streams()).ok());
  Trace trace = two_streams();
  trace.events.push_back(TraceEvent::free(0, 500, 1));
  expect_invalid(trace, "event 4 frees block 0, which is not live");
  trace = two_streams();
  trace.events.push_back(TraceEvent::alloc(1, 100, 0));
  expect_invalid(trace, "event 4 allocates block 1, which is live");
  trace = two_streams();
  trace.events.push_back(TraceEvent::alloc(0, 100, 0));
  expect_invalid(trace, "event 4 allocates block 0 again");
  trace = two_streams();
  trace.events.push_back(TraceEvent::free(1, 99, 0));
  expect_invalid(trace, "event 4 frees block 1 with size 99 on stream 0; it has size 100 on stream 0");
  trace = two_streams();
  trace.events.push_back(TraceEvent::alloc(3, 1, 0));
  expect_invalid(trace, "names block 3, beyond the 3 blocks");
  trace = two_streams();
  trace.events.push_back(TraceEvent::alloc(2, 1, 2));
  expect_invalid(trace, "event 4 (alloc) uses stream 2");
  trace = two_streams();
  trace.initial_blocks.push_back({0, 1, 0});
  expect_invalid(trace, "initial block 0 is listed twice");
  trace = two_streams();
  trace.initial_blocks.push_back({7, 1, 0});
  expect_invalid(trace, "initial block 1 has id 7");
  // The readers' rule, for traces built otherwise: a replay refuses a block of 0 bytes before it starts.
  trace = two_streams();
  trace.events.push_back(TraceEvent::alloc(3, 0, 0));
  trace.block_count = 4;
  expect_invalid(trace, "event 4 allocates block 3 of 0 bytes");
  trace = two_streams();
  trace.initial_blocks[0].size = 0;
  trace.events[0].size = 0;
  expect_invalid(trace, "initial block 0 has 0 bytes");
}

// Every allocator's replay refuses a block of 0 bytes before its first event, with the event's index.
TEST(TraceModel, AReplayRefusesABlockOfZeroBytesBeforeItStarts) {
  Trace trace = two_streams();
  trace.events.push_back(TraceEvent::alloc(3, 0, 0));
  trace.block_count = 4;
  for (const char* allocator : {"tessera", "pytorch", "expandable", "gmlake", "ideal"}) {
    ReplayOptions options;
    options.allocator = allocator;
    const Result<ReplayResult> replayed = replay(trace, options);
    ASSERT_FALSE(replayed.ok()) << allocator;
    EXPECT_NE(replayed.error().message.find("trace t: event 4 allocates block 3 of 0 bytes"), std::string::npos)
        << allocator << ": " << replayed.error().message;
  }
}

}  // namespace
}  // namespace tessera
