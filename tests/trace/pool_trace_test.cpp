// Private pools and record_stream in traces: the text format writes and reads them, validate() and the reader
// refuse each misuse (naming the event or the line), and a replay calls the allocator's pool hooks as a
// graph capture does: Tessera keeps a graph pool's memory apart, a model without pools says so.
#include <gtest/gtest.h>

#include <string>

#include "tessera/replay.hpp"
#include "tessera/trace.hpp"

namespace tessera {
namespace {

// A graph captured on stream 7 into pool (1, 2), shared by a second capture, used across streams, then released.
constexpr std::string_view pool_text =
    "tessera-trace 1\n"
    "s 0\n"
    "s 7\n"
    "pool 1 2 graph\n"
    "pool 3 4 plain\n"
    "a 0 1000\n"
    "begin_pool 1 2 7\n"
    "a 1 300 7\n"
    "a 2 50\n"
    "end_pool 1 2 11\n"
    "record_stream 2 7\n"
    "begin_pool 1 2 7 12\n"
    "end_pool 1 2\n"
    "f 1\n"
    "release_pool 1 2\n"
    "release_pool 1 2 13\n"
    "record_stream 0 7 14\n"
    "end\n";

Trace pool_trace() {
  Trace trace;
  trace.name = "pools";
  trace.streams = {StreamId{0}, StreamId{7}};
  trace.pools = {{PoolId{1, 2}, PoolKind::graph}, {PoolId{3, 4}, PoolKind::plain}};
  trace.events = {
      TraceEvent::alloc(0, 1000, 0),     TraceEvent::begin_pool(0, 1),  TraceEvent::alloc(1, 300, 1),
      TraceEvent::alloc(2, 50, 0),       TraceEvent::end_pool(0, 11),   TraceEvent::record_stream(2, 1),
      TraceEvent::begin_pool(0, 1, 12),  TraceEvent::end_pool(0),       TraceEvent::free(1, 300, 1),
      TraceEvent::release_pool(0),       TraceEvent::release_pool(0, 13), TraceEvent::record_stream(0, 1, 14),
  };
  trace.block_count = 3;
  return trace;
}

std::string error_of(const Trace& trace) {
  Result<void> valid = validate(trace);
  return valid ? std::string("(accepted)") : valid.error().message;
}

std::string read_error(std::string_view text) {
  Result<Trace> read = parse_text_trace(text, "bad.trace");
  return read ? std::string("(accepted)") : read.error().message;
}

TEST(PoolTrace, ReadsPoolsAndRecordStreams) {
  Result<Trace> read = parse_text_trace(pool_text, "pools.trace");
  ASSERT_TRUE(read.ok()) << describe(read.error());
  EXPECT_EQ(*read, pool_trace());
  EXPECT_TRUE(validate(*read).ok());
  const TraceSummary summary = summarize(*read);
  EXPECT_EQ(summary.record_streams, 2u);
  EXPECT_EQ(summary.pool_begins, 2u);
  EXPECT_EQ(summary.streams, 2u);
}

TEST(PoolTrace, WritesWhatItReads) {
  const Trace trace = pool_trace();
  const std::string text = format_text_trace(trace);
  const std::string records(pool_text.substr(pool_text.find('\n') + 1));
  EXPECT_NE(text.find(records), std::string::npos) << text;
  Result<Trace> back = parse_text_trace(text, "pools.trace");
  ASSERT_TRUE(back.ok()) << describe(back.error());
  EXPECT_EQ(*back, trace);
}

TEST(PoolTrace, ValidateNamesEachMisuse) {
  {
    Trace trace = pool_trace();
    trace.pools[1].id = PoolId{};
    EXPECT_NE(error_of(trace).find("pool 1 is (0, 0)"), std::string::npos) << error_of(trace);
  }
  {
    Trace trace = pool_trace();
    trace.pools[1].id = trace.pools[0].id;
    EXPECT_NE(error_of(trace).find("in the pool table twice"), std::string::npos) << error_of(trace);
  }
  {
    Trace trace = pool_trace();
    trace.events[1] = TraceEvent::begin_pool(5, 1);
    EXPECT_NE(error_of(trace).find("event 1 (begin_pool) names pool 5, beyond the 2 pools"), std::string::npos)
        << error_of(trace);
  }
  {
    Trace trace = pool_trace();
    trace.events[1] = TraceEvent::begin_pool(0, 9);
    EXPECT_NE(error_of(trace).find("event 1 (begin_pool) uses stream 9"), std::string::npos) << error_of(trace);
  }
  {
    Trace trace = pool_trace();
    trace.events[7] = TraceEvent::end_pool(1);  // pool (3, 4) was never begun
    EXPECT_NE(error_of(trace).find("event 7 (end_pool) ends pool (3, 4), which is not being allocated to"),
              std::string::npos)
        << error_of(trace);
  }
  {
    Trace trace = pool_trace();
    trace.events[4] = TraceEvent::release_pool(0);  // the only use, still active
    EXPECT_NE(error_of(trace).find("event 4 (release_pool) releases pool (1, 2), which is still being allocated to"),
              std::string::npos)
        << error_of(trace);
  }
  {
    Trace trace = pool_trace();
    trace.events.insert(trace.events.begin() + 2, TraceEvent::begin_pool(0, 1));  // a second capture, nested
    EXPECT_NE(error_of(trace).find("event 2 (begin_pool) begins pool (1, 2), which is being allocated to already"),
              std::string::npos)
        << error_of(trace);
  }
  {
    Trace trace = pool_trace();
    trace.events.push_back(TraceEvent::release_pool(0));
    EXPECT_NE(error_of(trace).find("event 12 (release_pool) releases pool (1, 2), which has no use left"),
              std::string::npos)
        << error_of(trace);
  }
  {
    Trace trace = pool_trace();
    trace.events.push_back(TraceEvent::record_stream(1, 0));  // block 1 was freed at event 8
    EXPECT_NE(error_of(trace).find("event 12 records stream 0 on block 1, which is not live"), std::string::npos)
        << error_of(trace);
  }
  {
    Trace trace = pool_trace();
    trace.events[5] = TraceEvent::record_stream(2, 4);
    EXPECT_NE(error_of(trace).find("event 5 (record_stream) uses stream 4, beyond the 2 streams"), std::string::npos)
        << error_of(trace);
  }
}

TEST(PoolTrace, TheReaderNamesTheLine) {
  const std::string head = "tessera-trace 1\npool 1 2 graph\n";
  EXPECT_NE(read_error(head + "begin_pool 5 6 0\nend\n").find("bad.trace:3: unknown pool (5, 6)"), std::string::npos)
      << read_error(head + "begin_pool 5 6 0\nend\n");
  EXPECT_NE(read_error(head + "end_pool 1 2\nend\n").find("bad.trace:3: 'end_pool' ends pool (1, 2), which is not"),
            std::string::npos);
  EXPECT_NE(read_error(head + "begin_pool 1 2 0\nrelease_pool 1 2\nend\n").find("bad.trace:4:"), std::string::npos);
  EXPECT_NE(read_error(head + "release_pool 1 2\nend\n").find("no use left"), std::string::npos);
  EXPECT_NE(read_error(head + "begin_pool 1 2 0\nbegin_pool 1 2 0\nend\n").find("bad.trace:4: 'begin_pool' begins"),
            std::string::npos);
  EXPECT_NE(read_error(head + "pool 1 2 plain\nend\n").find("bad.trace:3: pool (1, 2) is declared twice"),
            std::string::npos);
  EXPECT_NE(read_error("tessera-trace 1\npool 0 0 graph\nend\n").find("bad.trace:2: pool (0, 0) names no pool"),
            std::string::npos);
  EXPECT_NE(read_error("tessera-trace 1\npool 1 2 cuda\nend\n").find("'pool' takes 'graph' or 'plain', not 'cuda'"),
            std::string::npos);
  EXPECT_NE(read_error("tessera-trace 1\npool 1 x graph\nend\n").find("pool id 'x' is not a non-negative integer"),
            std::string::npos);
  EXPECT_NE(read_error(head + "a 0 10\npool 3 4 graph\nend\n").find("'pool' after the first event"), std::string::npos);
  EXPECT_NE(read_error(head + "begin_pool 1 2\nend\n").find("'begin_pool' takes 3 to 4 fields, not 2"),
            std::string::npos);
  EXPECT_NE(read_error(head + "record_stream 4 0\nend\n").find("bad.trace:3: record_stream on block 4, which is not live"),
            std::string::npos);
  EXPECT_NE(read_error(head + "a 0 10\nrecord_stream 0\nend\n").find("'record_stream' takes 2 to 3 fields"),
            std::string::npos);
}

// A hostile file declares a great many pools and names them all: read in time linear in the lines, not the
// square of the pools (each line looks its pool up; the table is checked once).
TEST(PoolTrace, ManyPoolsAreReadWithoutAScanPerLine) {
  constexpr std::uint64_t pools = 200'000;
  std::string text = "tessera-trace 1\n";
  for (std::uint64_t p = 1; p <= pools; ++p) text += "pool " + std::to_string(p) + " 7 plain\n";
  for (std::uint64_t p = 1; p <= pools; ++p) {
    const std::string id = std::to_string(p) + " 7";
    text += "begin_pool " + id + " 0\nend_pool " + id + "\nrelease_pool " + id + "\n";
  }
  text += "end\n";
  Result<Trace> read = parse_text_trace(text, "many.trace");
  ASSERT_TRUE(read.ok()) << describe(read.error());
  EXPECT_EQ(read->pools.size(), pools);
  EXPECT_EQ(read->events.size(), 3 * pools);
  EXPECT_TRUE(validate(*read).ok());
}

ReplayResult replayed(const Trace& trace, std::string allocator, std::optional<Bytes> capacity = std::nullopt) {
  ReplayOptions options;
  options.allocator = std::move(allocator);
  options.capacity = capacity;
  auto result = replay(trace, options);
  EXPECT_TRUE(result.ok()) << result.error().message;
  return result ? *result : ReplayResult{};
}

// A graph pool keeps its block's memory after the block is freed: the eager allocation after the free may not
// land on it. 64 MiB captured, freed, then 64 MiB eager: Tessera holds both until the pool is released.
Trace graph_then_eager(bool release) {
  Trace trace;
  trace.name = "graph-then-eager";
  trace.streams = {StreamId{0}, StreamId{7}};
  trace.pools = {{PoolId{1, 1}, PoolKind::graph}};
  trace.events = {TraceEvent::begin_pool(0, 1), TraceEvent::alloc(0, 64 * MiB, 1), TraceEvent::free(0, 64 * MiB, 1),
                  TraceEvent::end_pool(0)};
  if (release) trace.events.push_back(TraceEvent::release_pool(0));
  trace.events.push_back(TraceEvent::alloc(1, 64 * MiB, 0));
  trace.events.push_back(TraceEvent::record_stream(1, 1));
  trace.events.push_back(TraceEvent::free(1, 64 * MiB, 0));
  trace.block_count = 2;
  return trace;
}

TEST(PoolTrace, ReplayKeepsAGraphPoolApartUntilItIsReleased) {
  const ReplayResult kept = replayed(graph_then_eager(false), "tessera", 96 * MiB);
  EXPECT_FALSE(kept.pool_unsupported);
  EXPECT_TRUE(kept.oom) << "the graph's 64 MiB may not serve the eager block";
  EXPECT_EQ(kept.oom_event, 4u) << "the eager allocation";
  const ReplayResult released = replayed(graph_then_eager(true), "tessera", 96 * MiB);
  EXPECT_FALSE(released.oom) << "a released pool's memory serves the eager block: " << released.oom_message;
  EXPECT_EQ(released.events, graph_then_eager(true).events.size());
}

// Every baseline model keeps PyTorch's private pools now (none answers unsupported): the graph's memory stays
// apart until the pool is released, and the released pool's memory then serves the eager block through the
// out-of-memory ladder (PyTorch's release_cached_blocks).
TEST(PoolTrace, EveryModelKeepsAGraphPoolApartUntilItIsReleased) {
  for (const char* model : {"pytorch", "expandable", "gmlake", "memory-saver"}) {
    const ReplayResult kept = replayed(graph_then_eager(false), model, 96 * MiB);
    EXPECT_FALSE(kept.pool_unsupported) << model;
    EXPECT_TRUE(kept.oom) << model << ": the graph's 64 MiB may not serve the eager block";
    EXPECT_EQ(kept.oom_event, 4u) << model << ": the eager allocation";
    const ReplayResult released = replayed(graph_then_eager(true), model, 96 * MiB);
    EXPECT_FALSE(released.pool_unsupported) << model;
    EXPECT_FALSE(released.oom) << model << ": a released pool's memory serves the eager block: "
                               << released.oom_message;
    EXPECT_EQ(released.events, graph_then_eager(true).events.size()) << model;
  }
}

}  // namespace
}  // namespace tessera
