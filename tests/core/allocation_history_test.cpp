// The allocation history: the ring of allocs and frees, its trace, and the snapshot file written from it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <memory>
#include <vector>

#include "tessera/allocator.hpp"
#include "tessera/drivers.hpp"
#include "tessera/trace.hpp"
#include "support/must.hpp"
#include "trace/pickle_reader.hpp"

namespace tessera {
namespace {

constexpr Bytes granule = 64 * KiB;
constexpr StreamId stream_a{0};
constexpr StreamId stream_b{7};

using test_support::must;

class HistoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    driver_ = must(make_host_driver({.capacity = 64 * MiB, .granularity = granule}));
    allocator_ = must(make_tessera_allocator(*driver_));
  }

  Address alloc(Bytes size, StreamId stream = stream_a) { return must(allocator_->allocate(size, stream)); }
  void free(Address address) { ASSERT_TRUE(allocator_->deallocate(address)); }

  std::unique_ptr<Driver> driver_;
  std::unique_ptr<TesseraAllocator> allocator_;
};

TEST_F(HistoryTest, NothingIsRecordedUntilAsked) {
  free(alloc(1000));
  const AllocationHistory history = allocator_->history();
  EXPECT_TRUE(history.trace.events.empty());
  EXPECT_TRUE(history.trace.initial_blocks.empty());
}

TEST_F(HistoryTest, RecordsAllocsAndFreesWithTheirAddresses) {
  allocator_->record_history(100);
  const Address a = alloc(1000);
  const Address b = alloc(3 * MiB, stream_b);
  free(a);
  const AllocationHistory history = allocator_->history();
  ASSERT_TRUE(validate(history.trace));
  const Trace& trace = history.trace;
  ASSERT_EQ(trace.events.size(), 3u);
  EXPECT_TRUE(trace.initial_blocks.empty());
  EXPECT_EQ(trace.events[0], TraceEvent::alloc(0, 1000, 0, trace.events[0].time_us));
  EXPECT_EQ(trace.events[1], TraceEvent::alloc(1, 3 * MiB, 1, trace.events[1].time_us));
  EXPECT_EQ(trace.events[2], TraceEvent::free(0, 1000, 0, trace.events[2].time_us));
  EXPECT_EQ(trace.streams, (std::vector<StreamId>{stream_a, stream_b}));
  EXPECT_EQ(history.addresses, (std::vector<Address>{a, b}));
  EXPECT_LE(trace.events[0].time_us, trace.events[2].time_us);
  EXPECT_NE(trace.events[0].time_us, no_time);
  EXPECT_EQ(history.dropped_events, 0u);
}

TEST_F(HistoryTest, TheRingKeepsTheNewestAndOlderBlocksBecomeInitial) {
  const Address before = alloc(2048);  // allocated before recording, freed inside it
  const Address kept = alloc(4096);    // allocated before recording, never freed
  allocator_->record_history(3);
  const Address dropped = alloc(512);  // its alloc falls out of the ring, its free stays
  const Address c = alloc(8192);
  free(before);
  free(dropped);
  const AllocationHistory history = allocator_->history();
  ASSERT_TRUE(validate(history.trace)) << describe(validate(history.trace).error());
  const Trace& trace = history.trace;
  EXPECT_EQ(history.dropped_events, 1u);
  ASSERT_EQ(trace.events.size(), 3u);
  // Initial blocks in the reader's order: freed ones by their frees, then the never-freed one.
  ASSERT_EQ(trace.initial_blocks.size(), 3u);
  EXPECT_EQ(trace.initial_blocks[0].size, 2048u);
  EXPECT_EQ(trace.initial_blocks[1].size, 512u);
  EXPECT_EQ(trace.initial_blocks[2].size, 4096u);
  EXPECT_EQ(history.addresses[0], before);
  EXPECT_EQ(history.addresses[1], dropped);
  EXPECT_EQ(history.addresses[2], kept);
  EXPECT_EQ(history.addresses[3], c);
  EXPECT_EQ(summarize(trace).live_blocks_at_end, 2u);
}

TEST_F(HistoryTest, ResizingKeepsTheNewestAndZeroForgets) {
  allocator_->record_history(10);
  std::vector<Address> blocks;
  for (int i = 0; i < 6; ++i) blocks.push_back(alloc(1024 * (i + 1)));
  allocator_->record_history(2);
  AllocationHistory history = allocator_->history();
  ASSERT_EQ(history.trace.events.size(), 2u);
  EXPECT_EQ(history.trace.events[1].size, 6u * 1024);
  // The ring holds the segment changes too, as PyTorch's holds its segment entries: the page mapped for the
  // first block, the rest of its chunk pooled (the chunk grew past the block), and the first four allocs
  // fell out.
  EXPECT_EQ(history.dropped_events, 6u);
  allocator_->record_history(0);
  free(blocks[0]);
  history = allocator_->history();
  EXPECT_TRUE(history.trace.events.empty());
  EXPECT_EQ(history.dropped_events, 0u);
}

TEST_F(HistoryTest, TheSnapshotFileReadsBackAsTheSameTrace) {
  const Address old_block = alloc(5000);
  allocator_->record_history(1000);
  std::vector<Address> live;
  for (int i = 0; i < 50; ++i) {
    live.push_back(alloc(static_cast<Bytes>(700 + i * 40000), i % 3 == 0 ? stream_b : stream_a));
    if (i % 4 == 1) {
      free(live.front());
      live.erase(live.begin());
    }
  }
  free(old_block);
  const auto path = std::filesystem::path(::testing::TempDir()) / "tessera_history_snapshot.pickle";
  ASSERT_TRUE(write_history_snapshot(allocator_->history(), path, 3));
  const AllocationHistory history = allocator_->history();
  auto read = read_pytorch_snapshot(path);
  ASSERT_TRUE(read) << describe(read.error());
  EXPECT_EQ(read->device, "cuda:3");
  // Stream indices may be numbered differently: compare the platform's stream values.
  auto stream_read = [&](std::uint32_t index) { return read->streams.at(index); };
  auto stream_recorded = [&](std::uint32_t index) { return history.trace.streams.at(index); };
  ASSERT_EQ(read->initial_blocks.size(), history.trace.initial_blocks.size());
  for (std::size_t i = 0; i < read->initial_blocks.size(); ++i) {
    EXPECT_EQ(read->initial_blocks[i].id, history.trace.initial_blocks[i].id);
    EXPECT_EQ(read->initial_blocks[i].size, history.trace.initial_blocks[i].size);
    EXPECT_EQ(stream_read(read->initial_blocks[i].stream), stream_recorded(history.trace.initial_blocks[i].stream));
  }
  ASSERT_EQ(read->events.size(), history.trace.events.size());
  for (std::size_t i = 0; i < read->events.size(); ++i) {
    EXPECT_EQ(read->events[i].kind, history.trace.events[i].kind) << i;
    EXPECT_EQ(read->events[i].block, history.trace.events[i].block) << i;
    EXPECT_EQ(read->events[i].size, history.trace.events[i].size) << i;
    EXPECT_EQ(stream_read(read->events[i].stream), stream_recorded(history.trace.events[i].stream)) << i;
  }
  std::filesystem::remove(path);
}

// The history's segment changes, written as segment entries, add up to the allocator's reserved bytes after
// every alloc and before every free (a free's changes come after it), and to what is reserved at the end;
// the snapshot's segments hold exactly that. Pages are mapped, unmapped (empty_cache) and pooled on the way.
TEST_F(HistoryTest, SegmentEntriesFollowTheReservedBytes) {
  const Address before = alloc(3 * MiB);  // mapped before recording: the window starts with memory held
  const Bytes reserved_before = allocator_->stats().reserved_bytes;
  ASSERT_GT(reserved_before, 0u);
  allocator_->record_history(100000);
  std::vector<Bytes> reserved_after;  // after each alloc and free, in order
  auto note = [&] { reserved_after.push_back(allocator_->stats().reserved_bytes); };
  std::vector<Address> live;
  for (int i = 0; i < 40; ++i) {
    live.push_back(alloc(static_cast<Bytes>(900 + (i % 7) * 700000), i % 3 == 0 ? stream_b : stream_a));
    note();
    if (i % 3 == 2) {
      free(live.front());
      live.erase(live.begin());
      note();
    }
    if (i % 10 == 9) {
      ASSERT_TRUE(allocator_->empty_cache());
    }
  }
  free(before);
  note();
  const AllocationHistory history = allocator_->history();
  ASSERT_FALSE(history.segment_changes.empty());
  const auto path = std::filesystem::path(::testing::TempDir()) / "tessera_history_segments.pickle";
  ASSERT_TRUE(write_history_snapshot(history, path, 0));
  auto read = read_pytorch_recording(path);
  ASSERT_TRUE(read) << describe(read.error());
  EXPECT_TRUE(read->reserved_consistent);
  EXPECT_EQ(read->final_reserved, allocator_->stats().reserved_bytes);
  EXPECT_EQ(read->initial_reserved, reserved_before) << "the window starts with what was held before it";
  ASSERT_EQ(read->reserved_after.size(), reserved_after.size());
  // reserved_after[i] in the reader counts the segment entries read before event i's entry: an alloc's come
  // before it, a free's after it, so a free is compared with the figure before it.
  for (std::size_t i = 0; i < reserved_after.size(); ++i) {
    const bool is_free = read->trace.events[i].kind == TraceEventKind::free;
    const Bytes expected = is_free ? (i == 0 ? read->initial_reserved : reserved_after[i - 1]) : reserved_after[i];
    EXPECT_EQ(read->reserved_after[i], expected) << "event " << i;
  }
  bool unmapped = false;
  for (const SegmentChange& change : history.segment_changes) unmapped = unmapped || change.kind == SegmentChange::Kind::unmap;
  EXPECT_TRUE(unmapped) << "empty_cache gives pages back";
  std::filesystem::remove(path);
}

// With a stack capture, each recorded alloc files the stack the capture returned, and the snapshot writes it
// as the frames of the alloc, of its free and of the block while it is live. The capture runs before the
// allocator's lock is taken: it may call into the allocator (as an interpreter's other threads may).
TEST_F(HistoryTest, StacksGoWithTheirAllocs) {
  allocator_->record_history(1000);
  int captures = 0;
  allocator_->set_history_stacks([&] {
    ++captures;
    (void)allocator_->stats();  // takes the allocator's lock: a deadlock if the capture ran under it
    return std::make_shared<const Stack>(
        Stack{{"model.py", static_cast<std::uint32_t>(10 + captures), "forward"}, {"train.py", 3, "<module>"}});
  });
  const Address a = alloc(1000);
  const Address b = alloc(5000);
  free(a);
  allocator_->set_history_stacks({});
  const Address c = alloc(2000);
  EXPECT_EQ(captures, 2);
  const AllocationHistory history = allocator_->history();
  ASSERT_EQ(history.event_stacks.size(), history.trace.events.size());
  ASSERT_EQ(history.trace.events.size(), 4u);
  const Stack& first = history.stacks.at(history.event_stacks[0]);
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0], (StackFrame{"model.py", 11, "forward"}));
  EXPECT_EQ(history.stacks.at(history.event_stacks[1])[0].line, 12u);
  EXPECT_EQ(history.event_stacks[3], 0u) << "no capture, no stack";

  const auto path = std::filesystem::path(::testing::TempDir()) / "tessera_history_stacks.pickle";
  ASSERT_TRUE(write_history_snapshot(history, path, 0));
  std::ifstream file(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  auto tree = trace_detail::parse_pickle(bytes, "stacks");
  ASSERT_TRUE(tree) << tree.error().message;
  auto text = [&](trace_detail::PickleRef dict, std::string_view key) {
    return std::string(tree->string(*tree->find(dict, key)).value_or(""));
  };
  std::vector<std::string> seen;  // action: first frame's name and line
  for (const auto entry : tree->items(tree->items(*tree->find(tree->root(), "device_traces"))[0])) {
    const std::string action = text(entry, "action");
    if (action.starts_with("segment")) continue;
    const auto frames = tree->items(*tree->find(entry, "frames"));
    seen.push_back(action + ":" + (frames.empty() ? std::string("-")
                                                  : text(frames[0], "name") + "@" +
                                                        std::to_string(*tree->integer(*tree->find(frames[0], "line")))));
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"alloc:forward@11", "alloc:forward@12", "free_requested:forward@11",
                                            "free_completed:forward@11", "alloc:-"}));
  // The live block b carries its stack in the segments.
  bool block_has_stack = false;
  for (const auto segment : tree->items(*tree->find(tree->root(), "segments"))) {
    for (const auto block : tree->items(*tree->find(segment, "blocks"))) {
      const auto frames = tree->items(*tree->find(block, "frames"));
      if (*tree->integer(*tree->find(block, "address")) == static_cast<std::int64_t>(b) && !frames.empty()) {
        block_has_stack = text(frames[0], "name") == "forward";
      }
    }
  }
  EXPECT_TRUE(block_has_stack);
  free(b);
  free(c);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace tessera
