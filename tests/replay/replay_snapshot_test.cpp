// A snapshot written from a replay of a generated training workload holds segment
// events whose running sum equals the replay's reserved bytes at every event, for Tessera's allocator and
// every baseline model, at unlimited capacity and at the smallest that fits (where the models give memory
// back). The reference is the replay's own series, one point per event; the snapshot is read as a pickle, not
// through Tessera's snapshot reader, which is checked apart (it must read the same trace back).
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>

#include "tessera/replay.hpp"
#include "tessera/snapshot.hpp"
#include "tessera/workload.hpp"
#include "trace/pickle_reader.hpp"

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

std::string snapshot_of(const ReplayResult& result) {
  SnapshotWriteOptions options;
  if (result.final_state) options.state = &*result.final_state;
  options.segment_changes = &result.segment_changes;
  Result<std::string> pickle = format_pytorch_snapshot(training(), result.addresses, options);
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
                         testing::Values("tessera", "pytorch", "expandable", "gmlake", "memory-saver"),
                         [](const testing::TestParamInfo<std::string>& param_info) {
                           std::string name = param_info.param;
                           std::erase(name, '-');
                           return name;
                         });

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

}  // namespace
}  // namespace tessera
