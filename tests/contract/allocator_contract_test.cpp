// One contract suite for every DeviceAllocator over every driver that can host it: the contract written in
// include/tessera/device_allocator.hpp, checked the same way for Tessera and for each baseline model.
#include <algorithm>
#include <cstdint>
#include <random>
#include <tuple>
#include <vector>

#include "contract/contract_fixtures.hpp"
#include "support/stream_witness.hpp"

namespace tessera::testing {
namespace {

using Param = std::tuple<AllocatorKind, DriverFactory>;

constexpr StreamId stream_a{1};
constexpr StreamId stream_b{2};
constexpr StreamId stream_c{3};

// A block the test holds, as the caller asked for it.
struct LiveBlock {
  Address at = 0;
  Bytes requested = 0;
  Bytes charged = 0;  // what allocated_bytes grew by when it was handed out
};

auto byte_counts(const AllocatorStats& stats) {
  return std::tuple(stats.requested_bytes, stats.allocated_bytes, stats.reserved_bytes, stats.peak_requested_bytes,
                    stats.peak_allocated_bytes, stats.peak_reserved_bytes, stats.num_device_alloc, stats.num_device_free);
}

// What the live blocks account for: the counts no refusal may change.
auto live_counts(const AllocatorStats& stats) {
  return std::tuple(stats.requested_bytes, stats.allocated_bytes, stats.peak_requested_bytes,
                    stats.peak_allocated_bytes);
}

auto every_count(const AllocatorStats& stats) {
  return std::tuple_cat(byte_counts(stats), std::tuple(stats.num_alloc_retries, stats.num_ooms,
                                                       stats.num_sync_all_streams));
}

bool mentions(const Error& error, std::string_view text) { return error.message.find(text) != std::string::npos; }

class AllocatorContract : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override { build(TESSERA_OK(driver_factory().make())); }

  const AllocatorKind& kind() const { return std::get<0>(GetParam()); }
  const DriverFactory& driver_factory() const { return std::get<1>(GetParam()); }

  // A fresh allocator over `driver`, which it uses from now on.
  void build(std::unique_ptr<Driver> driver) {
    allocator_.reset();  // before the driver it uses
    driver_ = std::move(driver);
    allocator_ = TESSERA_OK(kind().make(*driver_));
  }

  LiveBlock take(Bytes size, StreamId stream) {
    const Bytes allocated_before = allocator_->stats().allocated_bytes;
    const Address at = TESSERA_OK(allocator_->allocate(size, stream));
    return {at, size, allocator_->stats().allocated_bytes - allocated_before};
  }
  void give_back(const LiveBlock& block) { TESSERA_OK(allocator_->deallocate(block.at)); }

  // Sizes from one byte to several granules, on both sides of the small pool's limit and of 512 B.
  static std::vector<Bytes> mixed_sizes() {
    return {1, 511, 512, 513, 1000, 4097, 100 * KiB + 3, 1 * MiB - 1, 1 * MiB, 1 * MiB + 1, 3 * MiB + 5, 7 * MiB};
  }

  static bool overlap(Address a, Bytes a_size, Address b, Bytes b_size) { return a < b + b_size && b < a + a_size; }

  void expect_disjoint(const std::vector<LiveBlock>& live) {
    for (std::size_t i = 0; i < live.size(); ++i) {
      for (std::size_t j = i + 1; j < live.size(); ++j) {
        EXPECT_FALSE(overlap(live[i].at, live[i].requested, live[j].at, live[j].requested))
            << std::hex << live[i].at << "+" << std::dec << live[i].requested << " and " << std::hex << live[j].at
            << "+" << std::dec << live[j].requested;
      }
    }
  }

  std::unique_ptr<Driver> driver_;
  std::unique_ptr<DeviceAllocator> allocator_;
};

TEST_P(AllocatorContract, EveryBlockIs512ByteAligned) {
  std::vector<LiveBlock> live;
  for (Bytes size : mixed_sizes()) {
    for (StreamId stream : {stream_a, stream_b}) {
      live.push_back(take(size, stream));
      EXPECT_EQ(live.back().at % 512, 0u) << size << " bytes at " << std::hex << live.back().at;
    }
  }
  for (const LiveBlock& block : live) give_back(block);
}

// Live blocks never share a byte, also after frees have made holes that later requests fill; where the driver
// reaches the memory, what is written to one block survives the writes to all others.
TEST_P(AllocatorContract, LiveBlocksDoNotOverlap) {
  std::vector<LiveBlock> live;
  for (Bytes size : mixed_sizes()) live.push_back(take(size, stream_a));
  for (Bytes size : mixed_sizes()) live.push_back(take(size, stream_b));
  std::vector<LiveBlock> kept;
  for (std::size_t i = 0; i < live.size(); ++i) {
    if (i % 2 == 0) {
      give_back(live[i]);
    } else {
      kept.push_back(live[i]);
    }
  }
  live = kept;
  for (Bytes size : mixed_sizes()) live.push_back(take(size / 2 + 1, stream_a));
  expect_disjoint(live);

  if (!driver_->capabilities().data_access) return;
  auto fill = [](std::size_t index) { return static_cast<unsigned char>(index * 37 + 11); };
  for (std::size_t i = 0; i < live.size(); ++i) {
    const std::vector<unsigned char> bytes(live[i].requested, fill(i));
    TESSERA_OK(driver_->write(live[i].at, bytes.data(), bytes.size()));
  }
  for (std::size_t i = 0; i < live.size(); ++i) {
    std::vector<unsigned char> bytes(live[i].requested);
    TESSERA_OK(driver_->read(live[i].at, bytes.data(), bytes.size()));
    EXPECT_EQ(std::count(bytes.begin(), bytes.end(), fill(i)), static_cast<std::ptrdiff_t>(bytes.size()))
        << "block " << i << " of " << live[i].requested << " bytes was overwritten";
  }
  for (const LiveBlock& block : live) give_back(block);
}

// A block freed on a stream serves that stream's next request of its size at once, from memory the allocator
// holds: no page is created. Where the driver simulates its streams, the stream is kept busy meanwhile, as a
// real one would be.
TEST_P(AllocatorContract, SameStreamReuseIsImmediate) {
  StreamControl* control = driver_->stream_control();
  for (Bytes size : {100 * KiB, 3 * MiB}) {
    const LiveBlock neighbour = take(size, stream_a);  // keeps the memory around the freed block in use
    const LiveBlock first = take(size, stream_a);
    if (control != nullptr) control->hold(stream_a);
    give_back(first);
    const AllocatorStats before = allocator_->stats();
    const LiveBlock again = take(size, stream_a);
    EXPECT_EQ(allocator_->stats().num_device_alloc, before.num_device_alloc) << size << " bytes";
    if (control != nullptr) control->complete(stream_a);
    give_back(again);
    give_back(neighbour);
  }
}

// A block another stream used (record_stream) is handed to no stream, and its memory is not unmapped, until the
// work that stream had queued at the free is done; afterwards the memory comes back.
TEST_P(AllocatorContract, CrossStreamReuseWaitsForTheEvent) {
  if (driver_->stream_control() == nullptr) GTEST_SKIP() << driver_factory().name << " has no simulated streams";
  auto owned = std::make_unique<test_support::StreamWitness>(TESSERA_OK(driver_factory().make()));
  test_support::StreamWitness& witness = *owned;
  build(std::move(owned));

  for (Bytes size : {100 * KiB, 3 * MiB}) {
    const LiveBlock used = take(size, stream_a);
    witness.stream_control()->hold(stream_b);
    TESSERA_OK(allocator_->record_stream(used.at, stream_b));
    witness.use(stream_b, used.at, size);
    give_back(used);

    std::vector<LiveBlock> live;
    for (StreamId stream : {stream_a, stream_c, stream_a, stream_c}) {
      live.push_back(take(size, stream));
      EXPECT_EQ(witness.foreign_use(live.back().at, size, stream), std::nullopt) << size << " bytes";
    }
    TESSERA_OK(allocator_->empty_cache());
    EXPECT_TRUE(witness.violations().empty()) << witness.violations().front();

    witness.stream_control()->complete(stream_b);
    for (const LiveBlock& block : live) give_back(block);
    TESSERA_OK(allocator_->empty_cache());
    EXPECT_EQ(allocator_->stats().requested_bytes, 0u) << "the block waiting for stream b was never freed";
    EXPECT_EQ(driver_->census().pages, 0u) << "the block waiting for stream b kept its pages";
  }
  EXPECT_TRUE(witness.violations().empty()) << witness.violations().front();
}

// Out of memory is an answer: the refused request changes no byte count and no page, and the allocator goes on
// serving requests.
TEST_P(AllocatorContract, OutOfMemoryIsAnAnswerAndChangesNothing) {
  const Bytes capacity = driver_->capacity();
  const Bytes granule = driver_->granularity();
  auto refuse = [&](Bytes size) {
    const AllocatorStats before = allocator_->stats();
    const DriverCensus census = driver_->census();
    auto refused = allocator_->allocate(size, stream_a);
    ASSERT_FALSE(refused.ok()) << size << " bytes of " << capacity;
    EXPECT_EQ(refused.error().code, Errc::out_of_memory) << describe(refused.error());
    EXPECT_TRUE(mentions(refused.error(), allocator_->name())) << refused.error().message;
    EXPECT_TRUE(mentions(refused.error(), std::to_string(size))) << refused.error().message;
    const AllocatorStats after = allocator_->stats();
    EXPECT_EQ(after.num_ooms, before.num_ooms + 1);
    if (!kind().keeps_pages_made_for_a_refused_request) {
      EXPECT_EQ(byte_counts(after), byte_counts(before));
      EXPECT_EQ(driver_->census().pages, census.pages);
      EXPECT_EQ(driver_->census().page_bytes, census.page_bytes);
      return;
    }
    EXPECT_EQ(live_counts(after), live_counts(before));
    EXPECT_GE(after.reserved_bytes, before.reserved_bytes);
    EXPECT_EQ(after.reserved_bytes, driver_->census().page_bytes) << "pages made on the way are in reserved_bytes";
    EXPECT_LE(after.reserved_bytes, capacity);
  };

  refuse(capacity + 1);
  // Nearly full of live blocks (15/16 of the capacity), then a request for twice what is left.
  const Bytes part = capacity / 16 * 5 / granule * granule;
  std::vector<LiveBlock> live;
  for (int i = 0; i < 3; ++i) live.push_back(take(part, stream_a));
  refuse(align_up(capacity - 3 * part, granule) * 2);
  refuse(capacity + 1);

  const LiveBlock small = take(1 * MiB, stream_a);
  give_back(small);
  for (const LiveBlock& block : live) give_back(block);
  give_back(take(capacity / 2, stream_a));
  // Whatever a refusal left cached goes back with the rest.
  TESSERA_OK(allocator_->empty_cache());
  EXPECT_EQ(driver_->census().pages, 0u);
}

// After everything is freed, empty_cache gives every page back: nothing reserved, no page at the driver.
TEST_P(AllocatorContract, EmptyCacheGivesEveryPageBack) {
  std::vector<LiveBlock> live;
  for (Bytes size : mixed_sizes()) {
    live.push_back(take(size, stream_a));
    live.push_back(take(size, stream_b));
  }
  for (const LiveBlock& block : live) give_back(block);
  EXPECT_GT(allocator_->stats().reserved_bytes, 0u);
  TESSERA_OK(allocator_->empty_cache());
  EXPECT_EQ(allocator_->stats().reserved_bytes, 0u);
  const DriverCensus census = driver_->census();
  EXPECT_EQ(census.pages, 0u);
  EXPECT_EQ(census.page_bytes, 0u);
  EXPECT_EQ(census.mappings, 0u);
  give_back(take(3 * MiB, stream_a));
}

// After every step of a seeded random sequence of allocations and frees of mixed sizes on two streams, the
// statistics agree with what the test counts itself.
TEST_P(AllocatorContract, StatisticsMatchARecount) {
  std::mt19937_64 random(20240611);
  std::vector<LiveBlock> live;
  Bytes live_requested = 0;
  std::size_t served = 0;
  auto check = [&](int step) {
    const AllocatorStats stats = allocator_->stats();
    Bytes requested = 0;
    Bytes charged = 0;
    for (const LiveBlock& block : live) {
      requested += block.requested;
      charged += block.charged;
    }
    ASSERT_EQ(stats.requested_bytes, requested) << "step " << step;
    ASSERT_EQ(stats.allocated_bytes, charged) << "step " << step << ": a free gave back other than it took";
    ASSERT_GE(stats.peak_requested_bytes, stats.requested_bytes) << "step " << step;
    ASSERT_GE(stats.peak_allocated_bytes, stats.allocated_bytes) << "step " << step;
    ASSERT_GE(stats.peak_reserved_bytes, stats.reserved_bytes) << "step " << step;
    ASSERT_GE(stats.reserved_bytes, stats.allocated_bytes) << "step " << step;
    ASSERT_EQ(stats.reserved_bytes, driver_->census().page_bytes) << "step " << step;
  };
  for (int step = 0; step < 400; ++step) {
    const bool allocate = live.empty() || random() % 100 < 55;
    if (allocate) {
      const Bytes size = random() % 4 != 0 ? 1 + random() % (1 * MiB) : 1 * MiB + 1 + random() % (5 * MiB);
      if (live_requested + size > test_capacity / 4) continue;  // far from the capacity: no step is refused
      const StreamId stream = random() % 2 == 0 ? stream_a : stream_b;
      live.push_back(take(size, stream));
      EXPECT_GE(live.back().charged, size);
      EXPECT_EQ(live.back().charged % 512, 0u);
      live_requested += size;
      ++served;
    } else {
      const std::size_t index = random() % live.size();
      give_back(live[index]);
      live_requested -= live[index].requested;
      live[index] = live.back();
      live.pop_back();
    }
    check(step);
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(served, 100u);
  for (const LiveBlock& block : live) give_back(block);
  live.clear();
  check(-1);
}

// The refusals the interface makes itself (a size of 0, the address 0) and the allocator's own (an address that
// is no live block) are named errors that change nothing.
TEST_P(AllocatorContract, BadArgumentsAreNamedErrorsThatChangeNothing) {
  const LiveBlock block = take(3 * MiB, stream_a);
  const AllocatorStats before = allocator_->stats();
  const DriverCensus census = driver_->census();
  const std::string name(allocator_->name());

  auto zero = allocator_->allocate(0, stream_a);
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.error().code, Errc::invalid_argument);
  EXPECT_TRUE(mentions(zero.error(), name + ": allocate of 0 bytes")) << zero.error().message;

  for (Address unknown : {Address{0}, block.at + 512, block.at + 4 * MiB}) {
    auto freed = allocator_->deallocate(unknown);
    ASSERT_FALSE(freed.ok()) << unknown;
    EXPECT_EQ(freed.error().code, Errc::not_found) << describe(freed.error());
    EXPECT_TRUE(mentions(freed.error(), name + ": deallocate of ")) << freed.error().message;
    EXPECT_TRUE(mentions(freed.error(), "not a live block")) << freed.error().message;
    auto recorded = allocator_->record_stream(unknown, stream_b);
    ASSERT_FALSE(recorded.ok()) << unknown;
    EXPECT_EQ(recorded.error().code, Errc::not_found) << describe(recorded.error());
    EXPECT_TRUE(mentions(recorded.error(), name + ": record_stream on ")) << recorded.error().message;
  }
  EXPECT_EQ(every_count(allocator_->stats()), every_count(before));
  EXPECT_EQ(driver_->census(), census);
  give_back(block);
}

INSTANTIATE_TEST_SUITE_P(EveryAllocatorOnEveryDriver, AllocatorContract,
                         ::testing::Combine(::testing::ValuesIn(contract_allocators()),
                                            ::testing::ValuesIn(contract_drivers())),
                         [](const ::testing::TestParamInfo<Param>& param) {
                           return std::get<0>(param.param).name + "_on_" + std::get<1>(param.param).name;
                         });

}  // namespace
}  // namespace tessera::testing
