// The allocation history: the ring of allocs and frees, its trace, and the snapshot file written from it.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <vector>

#include "tessera/allocator.hpp"
#include "tessera/drivers.hpp"
#include "tessera/trace.hpp"
#include "support/must.hpp"

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
  EXPECT_EQ(history.dropped_events, 4u);
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

}  // namespace
}  // namespace tessera
