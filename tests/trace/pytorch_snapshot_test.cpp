// PyTorch snapshots: a hand-built snapshot pins down each rule of docs/trace-format.md, and every real
// snapshot in the shared folder is checked against the peaks the real allocator recorded (SOURCES.md).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "tessera/replay.hpp"
#include "tessera/trace.hpp"

namespace tessera {
namespace {

// ---- A minimal pickler for the hand-built snapshots (protocol 2, as pickle.dumps(..., protocol=2)).

struct Value;
using Dict = std::vector<std::pair<std::string, Value>>;
using List = std::vector<Value>;
// A tuple of two ints, as PyTorch pickles a segment's segment_pool_id (TUPLE2).
struct Pair {
  std::int64_t first = 0;
  std::int64_t second = 0;
};

struct Value {
  std::variant<std::nullptr_t, std::int64_t, std::string, List, Dict, Pair> v;
  Value(std::nullptr_t) : v(nullptr) {}                                       // NOLINT
  Value(std::int64_t i) : v(i) {}                                             // NOLINT
  Value(int i) : v(std::int64_t{i}) {}                                        // NOLINT
  Value(const char* s) : v(std::string(s)) {}                                 // NOLINT
  Value(List l) : v(std::move(l)) {}                                          // NOLINT
  Value(Dict d) : v(std::move(d)) {}                                          // NOLINT
  Value(Pair p) : v(p) {}                                                     // NOLINT
};

void pickle_into(const Value& value, std::string& out) {
  auto le = [&out](std::uint64_t x, int width) {
    for (int i = 0; i < width; ++i) out.push_back(static_cast<char>((x >> (8 * i)) & 0xff));
  };
  if (std::holds_alternative<std::nullptr_t>(value.v)) {
    out.push_back('N');
  } else if (const auto* i = std::get_if<std::int64_t>(&value.v)) {
    if (*i >= 0 && *i < 256) {
      out.push_back('K');
      le(static_cast<std::uint64_t>(*i), 1);
    } else if (*i >= INT32_MIN && *i <= INT32_MAX) {
      out.push_back('J');
      le(static_cast<std::uint32_t>(static_cast<std::int32_t>(*i)), 4);
    } else {
      out.push_back(static_cast<char>(0x8a));
      le(8, 1);
      le(static_cast<std::uint64_t>(*i), 8);
    }
  } else if (const auto* s = std::get_if<std::string>(&value.v)) {
    out.push_back('X');
    le(s->size(), 4);
    out += *s;
  } else if (const auto* l = std::get_if<List>(&value.v)) {
    out.push_back(']');
    if (!l->empty()) {
      out.push_back('(');
      for (const Value& item : *l) pickle_into(item, out);
      out.push_back('e');
    }
  } else if (const auto* p = std::get_if<Pair>(&value.v)) {
    pickle_into(Value(p->first), out);
    pickle_into(Value(p->second), out);
    out.push_back(static_cast<char>(0x86));  // TUPLE2
  } else if (const auto* d = std::get_if<Dict>(&value.v)) {
    out.push_back('}');
    if (!d->empty()) {
      out.push_back('(');
      for (const auto& [key, item] : *d) {
        pickle_into(Value(key.c_str()), out);
        pickle_into(item, out);
      }
      out.push_back('u');
    }
  }
}

std::string pickle(const Value& value) {
  std::string out{static_cast<char>(0x80), 2};
  pickle_into(value, out);
  out.push_back('.');
  return out;
}

Value event(const char* action, std::int64_t addr, std::int64_t size, std::int64_t time, std::int64_t stream = 0) {
  return Dict{{"action", action}, {"addr", addr}, {"size", size}, {"stream", stream}, {"time_us", time},
              {"frames", List{}}};
}

Value block(const char* state, std::int64_t size, std::int64_t requested) {
  return Dict{{"size", size}, {"requested_size", requested}, {"state", state}, {"frames", List{}}};
}

Value block_at(std::int64_t address, const char* state, std::int64_t size, std::int64_t requested) {
  return Dict{{"address", address}, {"size", size}, {"requested_size", requested}, {"state", state}};
}

constexpr std::int64_t MB = 1 << 20;

// Device 0: ten events covering every rule; device 1: one. The segments are the state at the end.
std::string hand_snapshot() {
  const List device0{
      event("segment_alloc", 0x100000, 2 * MB, 9),       // segment A, created during the recording
      event("alloc", 0x100000, 100, 10),                  // block p0
      event("free_completed", 0x900000, 300, 11),        // never allocated here: live before recording
      event("alloc", 0x100200, 50, 12),
      event("free_requested", 0x100000, 100, 13),        // not yet reusable: ignored
      event("free_completed", 0x100000, 100, 14),
      event("alloc", 0x100000, 70, 15),                   // the address again: a new block
      Dict{{"action", "oom"}, {"device_free", 0}, {"size", 1}, {"stream", 0}, {"time_us", 16}},
      event("segment_free", 0x2000000, 20 * MB, 16),     // a segment from before the recording
      event("alloc", 0x100400, 40, 17),
  };
  const List device1{event("alloc", 0x5000000, 64, 1)};
  const List segments{
      Dict{{"device", 0}, {"address", 0x100000}, {"total_size", 2 * MB}, {"stream", 0}, {"segment_type", "small"},
           {"blocks", List{block_at(0x100000, "active_allocated", 512, 70), block_at(0x100200, "active_allocated", 512, 50),
                           block_at(0x100400, "active_allocated", 512, 40), block_at(0x100600, "inactive", 2 * MB - 1536, 0)}}},
      // Blocks without addresses, as PyTorch before 2.1 wrote them: they tile the segment from its start.
      Dict{{"device", 0}, {"address", 0x900000}, {"total_size", 4 * MB}, {"stream", 0}, {"segment_type", "large"},
           {"blocks", List{block("inactive", 1024, 0), block("active_allocated", 1024, 600),
                           block("active_pending_free", 1024, 200), block("inactive", 4 * MB - 3072, 0)}}},
      Dict{{"device", 1}, {"address", 0x5000000}, {"total_size", 2 * MB}, {"stream", 0},
           {"blocks", List{block_at(0x5000000, "active_allocated", 512, 64), block_at(0x5000200, "active_allocated", 512, 500)}}},
  };
  return pickle(Dict{{"segments", segments}, {"device_traces", List{device0, device1}}, {"allocator_settings", Dict{}}});
}

TEST(PytorchSnapshot, BuildsTheTraceFromTheCallersView) {
  Result<PytorchRecording> read = parse_pytorch_recording(hand_snapshot(), "dir/hand.pickle");
  ASSERT_TRUE(read.ok()) << describe(read.error());
  const Trace& trace = read->trace;
  EXPECT_EQ(trace.name, "hand");
  EXPECT_EQ(trace.device, "cuda:0");  // the device with most events
  ASSERT_TRUE(validate(trace).ok()) << describe(validate(trace).error());
  ASSERT_EQ(trace.streams, std::vector<StreamId>{StreamId{0}});

  // Live before recording: the block freed without an alloc, then the allocated blocks of the segments that
  // no event touched (requested sizes), numbered first.
  const std::vector<InitialBlock> initial{{0, 300, 0}, {1, 600, 0}, {2, 200, 0}};
  EXPECT_EQ(trace.initial_blocks, initial);
  const std::vector<TraceEvent> events{
      TraceEvent::alloc(3, 100, 0, 10), TraceEvent::free(0, 300, 0, 11), TraceEvent::alloc(4, 50, 0, 12),
      TraceEvent::free(3, 100, 0, 14),  TraceEvent::alloc(5, 70, 0, 15), TraceEvent::alloc(6, 40, 0, 17),
  };
  EXPECT_EQ(trace.events, events);
  EXPECT_EQ(trace.block_count, 7u);

  const TraceSummary summary = summarize(trace);
  EXPECT_EQ(summary.initial_bytes, 1100u);
  EXPECT_EQ(summary.peak_live_bytes, 1200u);
  EXPECT_EQ(summary.peak_event, 0u);
  EXPECT_EQ(summary.live_bytes_at_end, 960u);
  EXPECT_EQ(summary.first_time_us, 10);
  EXPECT_EQ(summary.last_time_us, 17);

  // Reserved bytes: 6 MiB of segments at the end, +2 MiB allocated and -20 MiB freed on the way, so 24 MiB
  // before the first event.
  EXPECT_EQ(read->final_reserved, std::uint64_t{6 * MB});
  EXPECT_EQ(read->initial_reserved, std::uint64_t{24 * MB});
  const std::vector<std::uint64_t> reserved{26 * MB, 26 * MB, 26 * MB, 26 * MB, 26 * MB, 6 * MB};
  EXPECT_EQ(read->reserved_after, reserved);
  EXPECT_TRUE(read->reserved_consistent);
  ASSERT_EQ(read->segment_allocs.size(), 1u);
  EXPECT_EQ(read->segment_allocs[0].size, std::uint64_t{2 * MB});
  EXPECT_EQ(read->segment_allocs[0].before_event, 0u);
  EXPECT_EQ(read->initial_segment_sizes, (std::vector<std::uint64_t>{20 * MB, 4 * MB}));
  EXPECT_EQ(read->recorded_events, 10u);
  EXPECT_EQ(read->ignored_events, 2u);  // free_requested and oom
}

TEST(PytorchSnapshot, ReadsTheDeviceAskedFor) {
  Result<PytorchRecording> read = parse_pytorch_recording(hand_snapshot(), "hand.pickle", {.device = 1});
  ASSERT_TRUE(read.ok()) << describe(read.error());
  EXPECT_EQ(read->trace.device, "cuda:1");
  // The device's own segment: the block the alloc made, and one untouched block live all along.
  EXPECT_EQ(read->trace.initial_blocks, (std::vector<InitialBlock>{{0, 500, 0}}));
  EXPECT_EQ(read->trace.events, (std::vector<TraceEvent>{TraceEvent::alloc(1, 64, 0, 1)}));
  EXPECT_EQ(read->final_reserved, std::uint64_t{2 * MB});

  Result<Trace> missing = parse_pytorch_snapshot(hand_snapshot(), "hand.pickle", {.device = 5});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("no device 5"), std::string::npos) << missing.error().message;
}

void expect_snapshot_error(const Value& snapshot, std::string_view words) {
  Result<Trace> read = parse_pytorch_snapshot(pickle(snapshot), "bad.pickle");
  ASSERT_FALSE(read.ok()) << "expected an error mentioning '" << words << "'";
  EXPECT_EQ(read.error().code, Errc::invalid_argument);
  EXPECT_NE(read.error().message.find("bad.pickle: "), std::string::npos) << read.error().message;
  EXPECT_NE(read.error().message.find(words), std::string::npos) << read.error().message;
}

TEST(PytorchSnapshot, InconsistentEventsAreErrorsThatNameTheEvent) {
  expect_snapshot_error(Dict{{"device_traces", List{List{event("alloc", 0x10, 8, 0), event("alloc", 0x10, 8, 1)}}}},
                        "device_traces[0][1] (alloc) at address 0x10, which holds a live block");
  expect_snapshot_error(Dict{{"device_traces", List{List{event("alloc", 0x10, 8, 0), event("free_completed", 0x10, 8, 1),
                                                         event("free_completed", 0x10, 8, 2)}}}},
                        "device_traces[0][2] (free_completed) of address 0x10, which holds no live block");
  expect_snapshot_error(Dict{{"device_traces", List{List{Dict{{"action", "alloc"}, {"addr", 16}}}}}},
                        "device_traces[0][0] (alloc) has no 'size'");
  expect_snapshot_error(Dict{{"device_traces", List{List{Dict{{"action", "alloc"}, {"addr", "x"}, {"size", 1}}}}}},
                        "has a str for 'addr'");
  expect_snapshot_error(Dict{{"device_traces", List{List{event("alloc", 0x10, -8, 0)}}}}, "negative 'size'");
  expect_snapshot_error(Dict{{"device_traces", List{List{Dict{{"addr", 16}}}}}}, "has no 'action'");
  expect_snapshot_error(Dict{{"segments", List{}}}, "no device_traces");
  expect_snapshot_error(List{}, "not a snapshot dict");
}

// No allocator hands out a block of 0 bytes and PyTorch records no event for one: the reader refuses one
// where it is, rather than a replay failing later without saying which event.
TEST(PytorchSnapshot, ABlockOfZeroBytesIsRefusedWhereItIs) {
  expect_snapshot_error(Dict{{"device_traces", List{List{event("alloc", 0x10, 8, 0), event("alloc", 0x20, 0, 1)}}}},
                        "bad.pickle: device_traces[0][1] (alloc) is a block of 0 bytes");
  expect_snapshot_error(Dict{{"device_traces", List{List{event("free_completed", 0x10, 0, 0)}}}},
                        "bad.pickle: device_traces[0][0] (free_completed) is a block of 0 bytes");
  const List blocks{block_at(0x100000, "active_allocated", 512, 0)};
  expect_snapshot_error(
      Dict{{"device_traces", List{List{}}},
           {"segments", List{Dict{{"device", 0}, {"address", 0x100000}, {"total_size", 2 * MB}, {"blocks", blocks}}}}},
      "bad.pickle: segments[0].blocks[0] is a block of 0 bytes");
}

// A segment of the end state in a private pool: its blocks are the pool's.
Value pooled_segment(std::int64_t address, std::int64_t size, Value pool, std::int64_t stream = 0) {
  return Dict{{"device", 0}, {"address", address}, {"total_size", size}, {"stream", stream},
              {"segment_pool_id", std::move(pool)}, {"blocks", List{}}};
}

// PyTorch records no pool on an event; the end state's segments name theirs (segment_pool_id). A graph
// capture's pool is (n, 0), a MemPool's (0, n); (0, 0) is the shared cache.
TEST(PytorchSnapshot, AllocationsInsideAPrivatePoolsSegmentGoToThatPool) {
  const List device0{
      event("segment_alloc", 0x1000000, 2 * MB, 1, 7),   // 0: the graph pool's segment, made here
      event("alloc", 0x1000000, 100, 2, 7),             // 1: into pool (1, 0)
      event("alloc", 0x1000200, 200, 3, 7),             // 2: the same capture, no new begin
      event("free_completed", 0x1000000, 100, 4, 7),    // 3: a free does not end the capture
      event("alloc", 0x100000, 300, 5, 7),              // 4: the shared cache's segment: the capture ends
      event("alloc", 0x1000400, 400, 6, 7),             // 5: pool (1, 0) again
      event("alloc", 0x3000000, 500, 7, 9),             // 6: the MemPool's segment, from before the recording
      event("alloc", 0x5000000, 600, 8, 0),             // 7: where pool (2, 0)'s segment is later made: shared
      event("free_completed", 0x5000000, 600, 9, 0),    // 8
      event("segment_free", 0x5000000, 2 * MB, 10, 0),  // 9: the shared segment goes ...
      event("segment_alloc", 0x5000000, 2 * MB, 11, 0), // 10: ... and pool (2, 0)'s is made at its address
      event("alloc", 0x5000000, 700, 12, 0),            // 11: into pool (2, 0)
  };
  const List segments{
      Dict{{"device", 0}, {"address", 0x100000}, {"total_size", 2 * MB}, {"stream", 7},
           {"segment_pool_id", Pair{0, 0}}, {"blocks", List{}}},
      pooled_segment(0x1000000, 2 * MB, Pair{1, 0}, 7),
      pooled_segment(0x3000000, 2 * MB, List{0, 5}, 9),  // a list is read as the pair it holds
      pooled_segment(0x5000000, 2 * MB, Pair{2, 0}),
  };
  Result<PytorchRecording> read =
      parse_pytorch_recording(pickle(Dict{{"segments", segments}, {"device_traces", List{device0}}}), "pools.pickle");
  ASSERT_TRUE(read.ok()) << describe(read.error());
  const Trace& trace = read->trace;
  ASSERT_TRUE(validate(trace).ok()) << describe(validate(trace).error());
  const std::vector<TracePool> pools{{PoolId{1, 0}, PoolKind::graph}, {PoolId{0, 5}, PoolKind::plain},
                                     {PoolId{2, 0}, PoolKind::graph}};
  EXPECT_EQ(trace.pools, pools);
  ASSERT_EQ(trace.streams, (std::vector<StreamId>{StreamId{7}, StreamId{9}, StreamId{0}}));
  const std::vector<TraceEvent> events{
      TraceEvent::begin_pool(0, 0, 2), TraceEvent::alloc(0, 100, 0, 2), TraceEvent::alloc(1, 200, 0, 3),
      TraceEvent::free(0, 100, 0, 4),  TraceEvent::end_pool(0, 5),      TraceEvent::alloc(2, 300, 0, 5),
      TraceEvent::begin_pool(0, 0, 6), TraceEvent::alloc(3, 400, 0, 6), TraceEvent::end_pool(0, 7),
      TraceEvent::begin_pool(1, 1, 7), TraceEvent::alloc(4, 500, 1, 7), TraceEvent::end_pool(1, 8),
      TraceEvent::alloc(5, 600, 2, 8), TraceEvent::free(5, 600, 2, 9),  TraceEvent::begin_pool(2, 2, 12),
      TraceEvent::alloc(6, 700, 2, 12), TraceEvent::end_pool(2, 12),
  };
  EXPECT_EQ(trace.events, events);
  // One reserved figure per event, pool events included: the four segments' 8 MiB throughout (the segment
  // made first precedes every event; the one freed is made again before the next event).
  EXPECT_EQ(read->reserved_after, std::vector<std::uint64_t>(events.size(), 8 * MB));
  ASSERT_EQ(read->segment_allocs.size(), 2u);
  EXPECT_EQ(read->segment_allocs[0].before_event, 0u);
  EXPECT_EQ(read->segment_allocs[1].before_event, 14u);  // before pool (2, 0)'s begin_pool
  EXPECT_EQ(summarize(trace).pool_begins, 4u);
}

// Without private pools the events are the allocations alone, as before pools were read.
TEST(PytorchSnapshot, SegmentsOfTheSharedCacheAddNoPoolEvents) {
  Result<Trace> read = parse_pytorch_snapshot(hand_snapshot(), "hand.pickle");
  ASSERT_TRUE(read.ok()) << describe(read.error());
  EXPECT_TRUE(read->pools.empty());
  EXPECT_EQ(summarize(*read).pool_begins, 0u);
}

// The pools read reach a replay: the graph pool's freed block is not handed to the shared cache's next
// allocation of its size, as it is when the segment is the shared cache's.
TEST(PytorchSnapshot, AReplayKeepsAPoolsFreedBlockFromTheSharedCache) {
  for (const bool pooled : {true, false}) {
    const List device0{event("alloc", 0x1000000, 4096, 1), event("free_completed", 0x1000000, 4096, 2),
                       event("alloc", 0x100000, 4096, 3)};
    const List segments{pooled_segment(0x1000000, 2 * MB, pooled ? Pair{1, 0} : Pair{0, 0}),
                        pooled_segment(0x100000, 2 * MB, Pair{0, 0})};
    Result<Trace> trace =
        parse_pytorch_snapshot(pickle(Dict{{"segments", segments}, {"device_traces", List{device0}}}), "p.pickle");
    ASSERT_TRUE(trace.ok()) << describe(trace.error());
    ReplayOptions options;
    options.allocator = "tessera";
    options.keep_state = true;
    Result<ReplayResult> replayed = replay(*trace, options);
    ASSERT_TRUE(replayed.ok()) << describe(replayed.error());
    EXPECT_FALSE(replayed->pool_unsupported);
    ASSERT_EQ(replayed->addresses.size(), 2u);
    if (pooled) {
      EXPECT_NE(replayed->addresses[1], replayed->addresses[0]);
    } else {
      EXPECT_EQ(replayed->addresses[1], replayed->addresses[0]);
    }
  }
}

TEST(PytorchSnapshot, ABadPoolIdIsAnErrorNamingTheSegment) {
  auto with = [](Value pool) {
    return Dict{{"device_traces", List{List{}}}, {"segments", List{pooled_segment(0x100000, 2 * MB, std::move(pool))}}};
  };
  constexpr std::string_view pair_words = "bad.pickle: segments[0].segment_pool_id is not a pair of non-negative ints";
  expect_snapshot_error(with("graph"), pair_words);
  expect_snapshot_error(with(List{1}), pair_words);
  expect_snapshot_error(with(List{1, 2, 3}), pair_words);
  expect_snapshot_error(with(Pair{-1, 0}), pair_words);
  expect_snapshot_error(with(List{1, "x"}), pair_words);
  expect_snapshot_error(with(nullptr), pair_words);
  // Two pooled segments over the same memory: the later one is named, with the one it overlaps.
  expect_snapshot_error(Dict{{"device_traces", List{List{}}},
                             {"segments", List{pooled_segment(0x100000, 2 * MB, Pair{1, 0}),
                                               pooled_segment(0x200000, 2 * MB, Pair{2, 0})}}},
                        "bad.pickle: segments[1] overlaps segments[0] of pool (1, 0)");
  expect_snapshot_error(Dict{{"device_traces", List{List{}}},
                             {"segments", List{pooled_segment(0x200000, 2 * MB, Pair{1, 0}),
                                               pooled_segment(0x100000, 2 * MB, Pair{0, 3})}}},
                        "bad.pickle: segments[1] overlaps segments[0] of pool (1, 0)");
}

// A pickle's memo can give every segment one blocks list (here: one segment dict, listed `repeats` times,
// with one block listed `repeats` times). Read once per segment, that took time cubic in the file's few
// kilobytes (a minute for 8 KB). A snapshot lists each block once: a shared blocks list is refused.
TEST(PytorchSnapshot, ABlocksListSharedBySegmentsIsRefused) {
  constexpr std::size_t repeats = 2000;
  auto body = [](const Value& value) {
    std::string out;
    pickle_into(value, out);
    return out;
  };
  std::string block = "}(" + body("size") + body(512) + body("state") + body("active_allocated") + body("pad");
  block += std::string(2 * repeats - 1, '2') + "u";  // DUP: "pad" set `repeats` times
  const std::string segment = "}(" + body("device") + body(0) + body("address") + body(0) + body("total_size") +
                              body(2 * MB) + body("blocks") + "](" + block + std::string(repeats - 1, '2') + "eu";
  const std::string snapshot = std::string{static_cast<char>(0x80), 2} + "}(" + body("device_traces") + body(List{}) +
                               body("segments") + "](" + segment + std::string(repeats - 1, '2') + "eu.";
  const auto start = std::chrono::steady_clock::now();
  Result<Trace> read = parse_pytorch_snapshot(snapshot, "shared.pickle");
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.error().message.find("shared.pickle: segments[1].blocks is the list of segments[0] again"),
            std::string::npos)
      << read.error().message;
  EXPECT_LT(took, std::chrono::seconds(5));

  // One segment whose blocks list holds one shared block many times is read, in time linear in the file.
  const std::string one = std::string{static_cast<char>(0x80), 2} + "}(" + body("device_traces") + body(List{}) +
                          body("segments") + "](" + segment + "eu.";
  Result<Trace> tiled = parse_pytorch_snapshot(one, "one.pickle");
  ASSERT_TRUE(tiled.ok()) << describe(tiled.error());
  EXPECT_EQ(tiled->initial_blocks.size(), repeats);  // tiling the segment, 512 bytes apart
  EXPECT_EQ(summarize(*tiled).initial_bytes, repeats * 512);
}

// ---- The real snapshots.

std::optional<std::filesystem::path> shared_traces() {
#ifdef TESSERA_SHARED_TRACES
  const std::filesystem::path path = TESSERA_SHARED_TRACES;
  if (std::filesystem::is_directory(path / "pytorch")) return path;
#endif
  return std::nullopt;
}

// One row of SOURCES.md's table: what the real PyTorch allocator recorded on the GPU.
struct Oracle {
  std::string file;
  std::size_t events = 0;
  double peak_live_gib = 0;
  double reserved_at_peak_gib = 0;
};

std::ostream& operator<<(std::ostream& out, const Oracle& oracle) { return out << oracle.file; }

std::vector<Oracle> oracles() {
  std::vector<Oracle> rows;
  const auto root = shared_traces();
  if (!root) return rows;
  std::ifstream in(*root / "SOURCES.md");
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> cells;
    std::stringstream cells_in(line);
    std::string cell;
    while (std::getline(cells_in, cell, '|')) {
      const std::size_t begin = cell.find_first_not_of(' ');
      const std::size_t end = cell.find_last_not_of(' ');
      cells.push_back(begin == std::string::npos ? "" : cell.substr(begin, end - begin + 1));
    }
    // | file | origin | licence | events | peak live GiB | reserved at peak GiB | ratio |
    if (cells.size() < 8 || !cells[1].ends_with(".pickle.gz")) continue;
    const std::size_t n = cells.size();
    rows.push_back(Oracle{cells[1], std::stoul(cells[n - 4]), std::stod(cells[n - 3]), std::stod(cells[n - 2])});
  }
  return rows;
}

TEST(PytorchSnapshotFiles, EveryFileHasAnOracle) {
  const auto root = shared_traces();
  if (!root) GTEST_SKIP() << "the shared traces folder (TESSERA_SHARED_TRACES) is not here";
  std::map<std::string, bool> listed;
  for (const Oracle& oracle : oracles()) listed[oracle.file] = true;
  std::size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(*root / "pytorch")) {
    if (!entry.path().string().ends_with(".pickle.gz")) continue;
    ++files;
    EXPECT_TRUE(listed.contains(entry.path().filename().string())) << entry.path() << " has no row in SOURCES.md";
  }
  EXPECT_EQ(files, listed.size());
  EXPECT_GE(files, 1u);
}

class PytorchSnapshotFile : public ::testing::TestWithParam<Oracle> {};

// Peak live bytes (pre-existing blocks included) and the reserved bytes at that moment, against what the
// real allocator recorded on the GPU: within 0.5%, the rounding of SOURCES.md's three decimals.
TEST_P(PytorchSnapshotFile, MatchesTheRecordedPeaks) {
  const Oracle& oracle = GetParam();
  Result<PytorchRecording> read = read_pytorch_recording(*shared_traces() / "pytorch" / oracle.file);
  ASSERT_TRUE(read.ok()) << describe(read.error());
  const Trace& trace = read->trace;
  const Result<void> valid = validate(trace);
  ASSERT_TRUE(valid.ok()) << describe(valid.error());
  EXPECT_EQ(read->recorded_events, oracle.events);
  EXPECT_EQ(read->reserved_after.size(), trace.events.size());
  EXPECT_TRUE(read->reserved_consistent);

  const TraceSummary summary = summarize(trace);
  const double gib = static_cast<double>(GiB);
  const double peak = static_cast<double>(summary.peak_live_bytes) / gib;
  EXPECT_NEAR(peak, oracle.peak_live_gib, 0.005 * oracle.peak_live_gib) << "peak live GiB";
  const std::uint64_t reserved_bytes = summary.peak_event == TraceSummary::npos
                                           ? read->initial_reserved
                                           : read->reserved_after[summary.peak_event];
  const double reserved = static_cast<double>(reserved_bytes) / gib;
  EXPECT_NEAR(reserved, oracle.reserved_at_peak_gib, 0.005 * oracle.reserved_at_peak_gib) << "reserved at peak GiB";
  RecordProperty("peak_live_gib", std::to_string(peak));
}

INSTANTIATE_TEST_SUITE_P(Shared, PytorchSnapshotFile, ::testing::ValuesIn(oracles()),
                         [](const ::testing::TestParamInfo<Oracle>& param) {
                           std::string name = param.param.file.substr(0, param.param.file.find(".pickle"));
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PytorchSnapshotFile);

}  // namespace
}  // namespace tessera
