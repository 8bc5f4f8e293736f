// A snapshot written from a replay of a generated training workload holds segment
// events whose running sum equals the replay's reserved bytes at every event, for Tessera's allocator and
// every baseline model, at unlimited capacity and at the smallest that fits (where the models give memory
// back). The reference is the replay's own series, one point per event; the snapshot is read as a pickle, not
// through Tessera's snapshot reader, which is checked apart (it must read the same trace back).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>

#include "tessera/replay.hpp"
#include "tessera/snapshot.hpp"
#include "tessera/trace.hpp"
#include "tessera/workload.hpp"
#include "trace/pickle_reader.hpp"
#include "trace/trace_builder.hpp"

namespace tessera {
namespace {

using trace_detail::PickleRef;
using trace_detail::PickleTree;

const Trace& training() {
  static const Trace trace = [] {
    Result<Trace> generated = generate_workload("training", {{"preset", "tiny"}, {"steps", "3"}});
    EXPECT_TRUE(generated) << generated.error().message;
    return std::move(generated).value();
  }();
  return trace;
}

ReplayResult replay_for_snapshot(const std::string& allocator, std::optional<Bytes> capacity) {
  ReplayOptions options;
  options.allocator = allocator;
  options.capacity = capacity;
  options.keep_state = true;
  options.series_points = training().events.size() + 1;  // a point after every event
  Result<ReplayResult> result = replay(training(), options);
  EXPECT_TRUE(result) << result.error().message;
  return std::move(result).value();
}

// As `tessera replay --snapshot` writes it.
std::string snapshot_of(const ReplayResult& result, const Trace& trace = training()) {
  SnapshotWriteOptions options;
  if (result.final_state) options.state = &*result.final_state;
  options.segment_changes = &result.segment_changes;
  options.starting_changes = result.starting_segment_changes;
  Result<std::string> pickle = format_pytorch_snapshot(trace, result.addresses, options);
  EXPECT_TRUE(pickle) << pickle.error().message;
  return pickle ? *pickle : std::string{};
}

struct Walk {
  std::size_t segment_entries = 0;
  std::size_t shrinking_entries = 0;  // segment_free and segment_unmap
  std::size_t checked = 0;            // places where the sum was compared with the replay
};

// Walks device_traces[0] beside the trace's events: the running sum of segment_alloc and segment_map less
// segment_free and segment_unmap must be the replay's reserved bytes after each alloc (its segment entries
// come before it), before each free (a free's come after it) and at the end. The address ranges held must hold
// every allocated block's first byte, as MemoryViz's "Allocator State History" needs.
Walk walk(const std::string& pickle, const ReplayResult& result, const std::string& label) {
  Walk walked;
  Result<PickleTree> tree = trace_detail::parse_pickle(pickle, label);
  EXPECT_TRUE(tree) << tree.error().message;
  if (!tree) return walked;
  const auto string_of = [&](PickleRef dict, std::string_view key) {
    return std::string(tree->string(*tree->find(dict, key)).value_or(""));
  };
  const auto number_of = [&](PickleRef dict, std::string_view key) {
    return static_cast<std::uint64_t>(*tree->integer(*tree->find(dict, key)));
  };
  const PickleRef root = tree->root();
  const PickleRef entries = tree->items(*tree->find(root, "device_traces"))[0];
  const std::vector<SeriesPoint>& series = result.series;
  const Trace& trace = training();
  EXPECT_EQ(series.size(), trace.events.size() + 1) << label;
  if (series.size() != trace.events.size() + 1) return walked;

  std::map<Address, Address> held;  // start -> end, by address
  auto holds = [&](Address address) {
    auto it = held.upper_bound(address);
    return it != held.begin() && std::prev(it)->second > address;
  };
  std::int64_t sum = 0;
  std::size_t next_event = 0;
  auto next_block_event = [&]() {
    while (next_event < trace.events.size() && trace.events[next_event].kind != TraceEventKind::alloc &&
           trace.events[next_event].kind != TraceEventKind::free) {
      ++next_event;
    }
    return next_event;
  };
  for (const PickleRef entry : tree->items(entries)) {
    const std::string action = string_of(entry, "action");
    const Address address = number_of(entry, "addr");
    const auto size = static_cast<std::int64_t>(number_of(entry, "size"));
    if (action == "segment_alloc" || action == "segment_map") {
      ++walked.segment_entries;
      sum += size;
      held[address] = address + static_cast<Bytes>(size);
      // Side by side: one range, as MemoryViz merges them.
      auto it = held.find(address);
      if (auto next = std::next(it); next != held.end() && next->first == it->second) {
        it->second = next->second;
        held.erase(next);
      }
      if (it != held.begin() && std::prev(it)->second == address) {
        std::prev(it)->second = it->second;
        held.erase(it);
      }
    } else if (action == "segment_free" || action == "segment_unmap") {
      ++walked.segment_entries;
      ++walked.shrinking_entries;
      sum -= size;
      EXPECT_GE(sum, 0) << label << ": more given back than held";
      auto it = held.upper_bound(address);
      EXPECT_TRUE(it != held.begin() && std::prev(it)->second >= address + static_cast<Bytes>(size))
          << label << ": " << action << " of memory not held";
      if (it == held.begin()) continue;
      --it;
      const Address start = it->first;
      const Address end = it->second;
      held.erase(it);
      if (start < address) held[start] = address;
      if (end > address + static_cast<Bytes>(size)) held[address + static_cast<Bytes>(size)] = end;
    } else if (action == "alloc") {
      const std::size_t index = next_block_event();
      EXPECT_LT(index, trace.events.size()) << label;
      EXPECT_EQ(static_cast<Bytes>(sum), series[index + 1].reserved) << label << ": after event " << index;
      EXPECT_TRUE(holds(address)) << label << ": event " << index << " allocates outside every segment";
      ++walked.checked;
      ++next_event;
    } else if (action == "free_requested") {
      const std::size_t index = next_block_event();
      EXPECT_LT(index, trace.events.size()) << label;
      EXPECT_EQ(static_cast<Bytes>(sum), series[index].reserved) << label << ": before event " << index;
      ++walked.checked;
    } else if (action == "free_completed") {
      ++next_event;
    }
  }
  EXPECT_EQ(static_cast<Bytes>(sum), series.back().reserved) << label << ": at the end";
  Bytes segments = 0;
  for (const PickleRef segment : tree->items(*tree->find(root, "segments"))) segments += number_of(segment, "total_size");
  EXPECT_EQ(segments, series.back().reserved) << label << ": the segments are not what is reserved at the end";
  return walked;
}

class ReplaySnapshotTest : public testing::TestWithParam<std::string> {};

// The allocators whose replays write snapshots, and a test name for each (GoogleTest's names take no '-').
const std::vector<std::string> every_allocator{"tessera", "pytorch", "expandable", "gmlake", "memory-saver"};
std::string allocator_test_name(const testing::TestParamInfo<std::string>& param_info) {
  std::string name = param_info.param;
  std::erase(name, '-');
  return name;
}

TEST_P(ReplaySnapshotTest, SegmentEntriesAddUpToTheReservedBytesAfterEveryEvent) {
  const std::string allocator = GetParam();
  ReplayOptions fit_options;
  fit_options.allocator = allocator;
  Result<ReplayResult> fitted = replay_with_min_capacity(training(), fit_options);
  ASSERT_TRUE(fitted) << fitted.error().message;
  ASSERT_TRUE(fitted->min_capacity);
  for (const std::optional<Bytes> capacity : {std::optional<Bytes>{}, fitted->min_capacity}) {
    const std::string label = allocator + (capacity ? " at its min_capacity" : " unlimited");
    const ReplayResult result = replay_for_snapshot(allocator, capacity);
    ASSERT_FALSE(result.oom) << label;
    const std::string pickle = snapshot_of(result);
    ASSERT_FALSE(pickle.empty()) << label;
    const Walk walked = walk(pickle, result, label);
    EXPECT_GT(walked.segment_entries, 0u) << label;
    EXPECT_EQ(walked.checked, summarize(training()).allocs + summarize(training()).frees) << label;
    // At the smallest capacity each model gives memory back on its out-of-memory ladder.
    if (capacity) {
      EXPECT_GT(walked.shrinking_entries, 0u) << label;
    }

    // Tessera's reader takes the segment entries for the allocator's, not for blocks: the same trace comes
    // back, and its reserved bytes are the replay's.
    Result<PytorchRecording> read = parse_pytorch_recording(pickle, "replay.pickle");
    ASSERT_TRUE(read) << read.error().message;
    EXPECT_EQ(read->trace.block_count, training().block_count) << label;
    EXPECT_EQ(read->trace.events.size(), summarize(training()).allocs + summarize(training()).frees) << label;
    EXPECT_TRUE(read->reserved_consistent) << label;
    EXPECT_EQ(read->initial_reserved, 0u) << label;
    EXPECT_EQ(read->final_reserved, result.series.back().reserved) << label;
  }
}

INSTANTIATE_TEST_SUITE_P(Allocators, ReplaySnapshotTest,
                         testing::ValuesIn(every_allocator), allocator_test_name);

// Without keep_state a replay collects nothing for a snapshot.
TEST(ReplaySnapshot, NoSegmentChangesUnlessKept) {
  ReplayOptions options;
  options.allocator = "pytorch";
  Result<ReplayResult> result = replay(training(), options);
  ASSERT_TRUE(result) << result.error().message;
  EXPECT_TRUE(result->segment_changes.empty());
  EXPECT_TRUE(result->addresses.empty());
}

// A snapshot whose changes leave other mapped runs than the allocator's state is refused: the viewer would
// draw segments the events do not lead to.
TEST(ReplaySnapshot, ChangesThatMissAMappingAreRefused) {
  ReplayResult result = replay_for_snapshot("tessera", std::nullopt);
  ASSERT_TRUE(result.final_state);
  std::vector<SegmentChange> missing = result.segment_changes;
  const auto map = std::find_if(missing.begin(), missing.end(),
                                [](const SegmentChange& change) { return change.kind == SegmentChange::Kind::map; });
  ASSERT_NE(map, missing.end());
  missing.erase(map);
  SnapshotWriteOptions options;
  options.state = &*result.final_state;
  options.segment_changes = &missing;
  Result<std::string> pickle = format_pytorch_snapshot(training(), result.addresses, options);
  ASSERT_FALSE(pickle);
  EXPECT_NE(pickle.error().message.find("mapped runs"), std::string::npos) << pickle.error().message;
}

// ---- The rule MemoryViz's "Allocator State History" needs. It shows the state at an event by starting from
// the segments (the end) and undoing every later entry: an alloc undone deletes its block, a free_completed
// re-adds it, a segment_alloc or segment_map undone takes its memory out of the segment that holds it, a
// segment_free or segment_unmap puts it back (merged with a neighbour on its stream). Then it looks up each
// live block's segment by address and fails on one that lies in none. So stepping back from the final state,
// every live block must lie in a segment at every entry, and every undone map must lie in one segment.

struct StepBack {
  std::size_t states = 0;  // entries at which the live blocks were looked up
  std::string failure;     // the first place the viewer would fail; empty when none
};

StepBack step_back(const std::string& pickle, const std::string& label) {
  StepBack result;
  Result<PickleTree> tree = trace_detail::parse_pickle(pickle, label);
  if (!tree) {
    result.failure = tree.error().message;
    return result;
  }
  const auto number = [&](PickleRef dict, std::string_view key) { return *tree->integer(*tree->find(dict, key)); };
  struct Segment {
    Bytes size;
    std::int64_t stream;
  };
  std::map<Address, Segment> segments;
  std::set<Address> blocks;
  const PickleRef root = tree->root();
  for (const PickleRef segment : tree->items(*tree->find(root, "segments"))) {
    auto address = static_cast<Address>(number(segment, "address"));
    segments[address] = {static_cast<Bytes>(number(segment, "total_size")), number(segment, "stream")};
    for (const PickleRef block : tree->items(*tree->find(segment, "blocks"))) {  // they tile it, as the viewer reads
      const std::string_view state = tree->string(*tree->find(block, "state")).value_or("");
      if (state == "active_allocated" || state == "active_pending_free") blocks.insert(address);
      address += static_cast<Address>(number(block, "size"));
    }
  }
  PickleRef entries{};
  std::size_t most = 0;
  for (const PickleRef device : tree->items(*tree->find(root, "device_traces"))) {
    if (tree->items(device).size() >= most) {
      most = tree->items(device).size();
      entries = device;
    }
  }
  const std::span<const PickleRef> trace = tree->items(entries);
  const auto holder = [&](Address address) {
    auto it = segments.upper_bound(address);
    if (it == segments.begin()) return segments.end();
    --it;
    return address < it->first + it->second.size ? it : segments.end();
  };
  const auto look_up = [&](std::size_t index) {
    ++result.states;
    for (const Address block : blocks) {
      if (holder(block) == segments.end()) {
        result.failure = fmt::format("{}: at entry {} the block at {:#x} lies in no segment", label, index, block);
        return false;
      }
    }
    return true;
  };
  if (trace.empty() || !look_up(trace.size() - 1)) return result;
  for (std::size_t i = trace.size() - 1; i > 0; --i) {
    const PickleRef entry = trace[i];
    const std::string_view action = tree->string(*tree->find(entry, "action")).value_or("");
    const auto address = static_cast<Address>(number(entry, "addr"));
    const auto size = static_cast<Bytes>(number(entry, "size"));
    const std::int64_t stream = number(entry, "stream");
    if (action == "alloc") {
      blocks.erase(address);
    } else if (action == "free_completed") {
      blocks.insert(address);
    } else if (action == "segment_free") {
      segments[address] = {size, stream};
    } else if (action == "segment_unmap") {
      auto it = segments.emplace(address, Segment{size, stream}).first;
      if (auto next = std::next(it); next != segments.end() && address + size == next->first && next->second.stream == stream) {
        it->second.size += next->second.size;
        segments.erase(next);
      }
      if (it != segments.begin()) {
        auto previous = std::prev(it);
        if (previous->first + previous->second.size == address && previous->second.stream == stream) {
          previous->second.size += it->second.size;
          segments.erase(it);
        }
      }
    } else if (action == "segment_alloc" || action == "segment_map") {
      auto it = holder(address);
      if (it == segments.end() || address + size > it->first + it->second.size ||
          (action == "segment_alloc" && (it->first != address || it->second.size != size))) {
        result.failure = fmt::format("{}: undoing entry {} ({} of {} bytes at {:#x}) finds no segment holding it", label,
                                     i, action, size, address);
        return result;
      }
      const Address start = it->first;
      const Segment whole = it->second;
      segments.erase(it);
      if (start < address) segments[start] = {address - start, whole.stream};
      if (address + size < start + whole.size) segments[address + size] = {start + whole.size - address - size, whole.stream};
    }
    if (!look_up(i - 1)) return result;
  }
  return result;
}

// What lacks frames, time_us or a top-level key: every alloc and free entry must carry frames and time_us, and
// `blocks_too`, every live block in the segments frames.
std::string missing_frames(const std::string& pickle, bool blocks_too) {
  Result<PickleTree> tree = trace_detail::parse_pickle(pickle, "frames");
  if (!tree) return tree.error().message;
  const auto has_frames = [&](PickleRef dict) {
    const auto frames = tree->find(dict, "frames");
    return frames && !tree->items(*frames).empty();
  };
  const PickleRef root = tree->root();
  for (const PickleRef device : tree->items(*tree->find(root, "device_traces"))) {
    for (std::size_t i = 0; i < tree->items(device).size(); ++i) {
      const PickleRef entry = tree->items(device)[i];
      const std::string_view action = tree->string(*tree->find(entry, "action")).value_or("");
      if (!action.starts_with("segment") && !has_frames(entry)) return fmt::format("entry {} ({}) has no frames", i, action);
      if (!tree->find(entry, "time_us")) return fmt::format("entry {} ({}) has no time_us", i, action);
    }
  }
  for (const PickleRef segment : tree->items(*tree->find(root, "segments"))) {
    for (const PickleRef block : tree->items(*tree->find(segment, "blocks"))) {
      if (blocks_too && tree->string(*tree->find(block, "state")).value_or("") == "active_allocated" && !has_frames(block)) {
        return fmt::format("a live block at {:#x} has no frames", *tree->integer(*tree->find(block, "address")));
      }
    }
  }
  for (const std::string_view key : {"allocator_settings", "external_annotations"}) {
    if (!tree->find(root, key)) return fmt::format("no top-level '{}'", key);
  }
  return {};
}

// A recording that starts with blocks already allocated (some freed by its events, some live to the end), and
// whose every alloc and free has a stack, as a PyTorch snapshot's entries do.
Trace started_mid_run() {
  trace_detail::TraceBuilder builder;
  const std::uint32_t stream = builder.stream(StreamId{0});
  std::vector<Stack> stacks{Stack{}};
  for (std::uint32_t s = 1; s <= 4; ++s) {
    stacks.push_back({{"model.py", 10 * s, fmt::format("layer{}", s)}, {"train.py", s, "step"}});
  }
  std::uint64_t key = 0x10000;
  std::vector<std::uint64_t> live;
  for (std::uint64_t b = 0; b < 24; ++b, key += 0x10000) {
    EXPECT_EQ(builder.declare_initial(key, (b % 5 + 1) * 700 * KiB + b * 512, stream), trace_detail::TraceBuilder::Status::ok);
    builder.stack_of_last_initial(static_cast<std::uint32_t>(b % 4 + 1));
    live.push_back(key);
  }
  for (std::uint64_t e = 0; e < 300; ++e, key += 0x10000) {
    if (e % 3 == 2 && !live.empty()) {
      const std::size_t which = (e * 7) % live.size();
      EXPECT_EQ(builder.free(live[which], static_cast<std::int64_t>(e)), trace_detail::TraceBuilder::Status::ok);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(which));
    } else {
      const std::uint64_t size = e % 11 == 0 ? 9 * MiB + e : (e % 7 + 1) * 96 * KiB + e * 8;
      EXPECT_EQ(builder.alloc(key, size, stream, static_cast<std::int64_t>(e)), trace_detail::TraceBuilder::Status::ok);
      live.push_back(key);
    }
    builder.stack_of_last_event(static_cast<std::uint32_t>(e % 4 + 1));
  }
  Trace trace = builder.finish("started_mid_run", "cuda:0");
  trace.stacks = std::move(stacks);
  EXPECT_TRUE(validate(trace)) << validate(trace).error().message;
  return trace;
}

ReplayResult replay_kept(const Trace& trace, const std::string& allocator) {
  ReplayOptions options;
  options.allocator = allocator;
  options.keep_state = true;
  Result<ReplayResult> result = replay(trace, options);
  EXPECT_TRUE(result) << result.error().message;
  return result ? std::move(result).value() : ReplayResult{};
}

class ViewerRuleTest : public testing::TestWithParam<std::string> {};

// The memory that held the blocks live before the first event is the starting state: were its mappings entries,
// the viewer, stepping back past them, would find those blocks in no segment. The stacks come through too.
TEST_P(ViewerRuleTest, EveryLiveBlockLiesInASegmentAtEveryEntryOfATraceThatStartsMidRun) {
  const Trace trace = started_mid_run();
  ASSERT_FALSE(trace.initial_blocks.empty());
  const ReplayResult result = replay_kept(trace, GetParam());
  ASSERT_FALSE(result.oom);
  EXPECT_GT(result.starting_segment_changes, 0u);
  const std::string pickle = snapshot_of(result, trace);
  ASSERT_FALSE(pickle.empty());
  const StepBack stepped = step_back(pickle, GetParam());
  EXPECT_EQ(stepped.failure, "");
  EXPECT_GT(stepped.states, trace.events.size());
  EXPECT_EQ(missing_frames(pickle, true), "");

  // Read back, each event has the stack it was recorded with, and each initial block never freed its own.
  Result<Trace> read = parse_pytorch_snapshot(pickle, "replay.pickle");
  ASSERT_TRUE(read) << read.error().message;
  ASSERT_EQ(read->events.size(), trace.events.size());
  ASSERT_EQ(read->event_stacks.size(), trace.events.size());
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    EXPECT_EQ(read->stacks[read->event_stacks[i]], trace.stacks[trace.event_stacks[i]]) << "event " << i;
  }
}

// The training workload starts from nothing: its snapshots follow the rule too.
TEST_P(ViewerRuleTest, EveryLiveBlockLiesInASegmentAtEveryEntryOfATraceFromEmpty) {
  const ReplayResult result = replay_kept(training(), GetParam());
  EXPECT_EQ(result.starting_segment_changes, 0u);
  const StepBack stepped = step_back(snapshot_of(result), GetParam());
  EXPECT_EQ(stepped.failure, "");
  EXPECT_GT(stepped.states, training().events.size());
}

INSTANTIATE_TEST_SUITE_P(Allocators, ViewerRuleTest,
                         testing::ValuesIn(every_allocator), allocator_test_name);

std::optional<std::filesystem::path> shared_pytorch_traces() {
#ifdef TESSERA_SHARED_TRACES
  const std::filesystem::path path = std::filesystem::path(TESSERA_SHARED_TRACES) / "pytorch";
  if (std::filesystem::is_directory(path)) return path;
#endif
  return std::nullopt;
}

// A real recording that starts with 137 blocks allocated and has frames on all its 2,043 entries.
TEST(ViewerRule, HoldsForTheReplayOfARealTraceThatStartsWithBlocksAllocated) {
  const auto root = shared_pytorch_traces();
  if (!root) GTEST_SKIP() << "the shared traces folder (TESSERA_SHARED_TRACES) is not here";
  Result<Trace> trace = read_pytorch_snapshot(*root / "cs336-small_b4_ctx128_fwd_fp32__silmont2000.pickle.gz");
  ASSERT_TRUE(trace) << trace.error().message;
  ASSERT_FALSE(trace->initial_blocks.empty());
  ASSERT_EQ(trace->event_stacks.size(), trace->events.size());
  for (const std::string allocator : {"tessera", "pytorch"}) {
    const ReplayResult result = replay_kept(*trace, allocator);
    const std::string pickle = snapshot_of(result, *trace);
    const StepBack stepped = step_back(pickle, allocator);
    EXPECT_EQ(stepped.failure, "");
    EXPECT_GT(stepped.states, trace->events.size());
    // Its initial blocks have no frames in the recording; its 2,043 entries all have.
    EXPECT_EQ(missing_frames(pickle, false), "") << allocator;
  }
}

}  // namespace
}  // namespace tessera
