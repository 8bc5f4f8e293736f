// PyTorch's per-pool statistics as Tessera computes them (docs/pytorch.md, "Statistics"): active.*,
// active_bytes.*, segment.* and reserved_bytes.* from the allocator's usage (TesseraAllocator::usage(), kept
// by its usage observer from the events it tells), and inactive_split*.current from the
// allocator's state (TesseraStats::pools). Each is recomputed here from the allocator's snapshot after every
// step of seeded runs — small and large blocks on two streams, frees that wait for a held stream, empty_cache,
// garbage collection, pages of several granules, a paused tag, a block over slivers — and every peak is
// checked against the running maximum of the recomputed figure, a peak reset included.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <iterator>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "support/must.hpp"
#include "tessera/allocator.hpp"
#include "tessera/drivers.hpp"
#include "tessera/tags.hpp"

namespace tessera {
namespace {

using test_support::must;

constexpr Bytes granule = 64 * KiB;
constexpr std::size_t small = 0, large = 1, all = 2;  // pools, then both

// Each figure for the small pool, the large pool and both.
struct Figures {
  std::array<std::uint64_t, 3> active{}, active_bytes{}, segment{}, reserved{}, inactive_split{}, inactive_split_bytes{};
};

std::size_t index_of(SizePool pool) { return pool == SizePool::small ? small : large; }

// Free bytes of the granules of a segment that blocks in use also touch, and the free blocks holding any:
// only a block's first and last granule can hold another block. Every granule a block in use touches is
// mapped (the allocator's invariant, which check() proves), except in a paused tag, whose segments hold no
// page here. A shared block's segment is left out: its first and last granules are slivers mapped in their
// home segments, where they count.
void add_inactive_split(const SnapshotSegment& segment, std::size_t pool, Figures& figures) {
  struct Granule {
    Bytes free = 0;
    bool in_use = false;
    std::vector<std::size_t> free_blocks;
  };
  std::map<std::size_t, Granule> granules;
  for (std::size_t i = 0; i < segment.blocks.size(); ++i) {
    const SnapshotBlock& block = segment.blocks[i];
    const std::size_t first = (block.address - segment.address) / granule;
    const std::size_t last = (block.address + block.size - 1 - segment.address) / granule;
    for (const std::size_t index : std::set<std::size_t>{first, last}) {
      const Address start = segment.address + index * granule;
      const Bytes inside = std::min(block.address + block.size, start + granule) - std::max(block.address, start);
      Granule& entry = granules[index];
      if (block.state == SnapshotBlock::State::inactive) {
        entry.free += inside;
        entry.free_blocks.push_back(i);
      } else {
        entry.in_use = true;
      }
    }
  }
  std::set<std::size_t> holding;
  for (const auto& [index, entry] : granules) {
    if (!entry.in_use) continue;
    figures.inactive_split_bytes[pool] += entry.free;
    for (std::size_t block : entry.free_blocks) {
      if (entry.free > 0) holding.insert(block);
    }
  }
  figures.inactive_split[pool] += holding.size();
}

Figures recompute(const AllocatorSnapshot& snapshot) {
  std::set<Address> shared;  // the addresses of shared blocks, from the slivers lent to them
  for (const SnapshotSegment& segment : snapshot.segments) {
    for (const SnapshotBlock& block : segment.blocks) {
      if (block.lent_to != 0) shared.insert(block.lent_to);
    }
  }
  Figures figures;
  for (const SnapshotSegment& segment : snapshot.segments) {
    const std::size_t pool = index_of(segment.pool);
    if (segment.mapped_size > 0) {
      figures.segment[pool] += 1;
      figures.reserved[pool] += segment.mapped_size;
    }
    bool is_shared = false;
    for (const SnapshotBlock& block : segment.blocks) {
      is_shared = is_shared || shared.count(block.address) > 0;
      // A lent sliver is a part of its shared block, which counts it.
      if (block.state == SnapshotBlock::State::inactive || block.lent_to != 0) continue;
      figures.active[pool] += 1;
      figures.active_bytes[pool] += block.size;
      if (!segment.paused) {
        EXPECT_EQ(block.mapped_bytes, block.size) << "a block in use has pages";
      }
    }
    if (segment.paused) {
      EXPECT_EQ(segment.mapped_size, 0u) << "a paused tag holds no page";
      continue;
    }
    if (!is_shared) add_inactive_split(segment, pool, figures);
  }
  for (auto* figure : {&figures.active, &figures.active_bytes, &figures.segment, &figures.reserved,
                       &figures.inactive_split, &figures.inactive_split_bytes}) {
    (*figure)[all] = (*figure)[small] + (*figure)[large];
  }
  figures.reserved[all] += snapshot.pooled_bytes;  // pooled pages belong to no pool
  return figures;
}

class PoolStatisticsTest : public ::testing::Test {
 protected:
  void make(std::size_t granules, std::string_view conf) {
    driver_ = must(make_host_driver({.capacity = granules * granule, .granularity = granule}));
    allocator_ = must(make_tessera_allocator(*driver_, must(parse_allocator_config(conf))));
  }

  void TearDown() override {
    if (!allocator_) return;
    driver_->stream_control()->complete(held_);
    for (const auto& [address, size] : std::map(live_)) free(address);
    empty_cache();
    check(Figures{});
    allocator_.reset();
  }

  // Each call to the allocator is checked: a peak may be reached by any of them.
  Address allocate(Bytes size, StreamId stream = default_stream) {
    const Address block = must(allocator_->allocate(size, stream));
    live_[block] = size;
    check();
    return block;
  }
  // Freed while a held stream may still use it: active until the stream completes.
  void free(Address block, bool waits = false) {
    if (waits) must(allocator_->record_stream(block, held_));
    must(allocator_->deallocate(block));
    live_.erase(block);
    check();
  }
  void empty_cache() {
    must(allocator_->empty_cache());
    check();
  }

  // Every figure against the snapshot; every peak against the running maximum (`expected`, when given,
  // against the recomputation too).
  void check(const std::optional<Figures>& expected = std::nullopt) {
    ASSERT_EQ(allocator_->check(), std::nullopt);
    const Figures now = recompute(allocator_->snapshot());
    if (expected) {
      EXPECT_EQ(now.active, expected->active);
      EXPECT_EQ(now.segment, expected->segment);
      EXPECT_EQ(now.reserved, expected->reserved);
    }
    const Usage usage = allocator_->usage();
    const std::array<const PoolUsage*, 3> pools{&usage.small_pool, &usage.large_pool, &usage.all};
    const TesseraStats stats = allocator_->tessera_stats();
    for (std::size_t pool = 0; pool < 3; ++pool) {
      SCOPED_TRACE(testing::Message() << "pool " << pool << " after step " << step_);
      const PoolUsage& counters = *pools[pool];
      const Stat& reserved = pool == all ? usage.reserved_bytes : counters.mapped_bytes;
      const std::array<std::pair<const Stat*, std::uint64_t>, 4> pairs{
          {{&counters.active, now.active[pool]},
           {&counters.active_bytes, now.active_bytes[pool]},
           {&counters.segment, now.segment[pool]},
           {&reserved, now.reserved[pool]}}};
      for (std::size_t figure = 0; figure < pairs.size(); ++figure) {
        const auto& [counter, value] = pairs[figure];
        EXPECT_EQ(counter->current, value) << "figure " << figure;
        EXPECT_EQ(counter->allocated - counter->freed, counter->current) << "figure " << figure;
        std::uint64_t& peak = peaks_[pool][figure];
        peak = std::max(peak, value);
        // Garbage collection unmaps pages in the allocation that mapped some: a peak inside one step.
        if (figure >= 2 && !whole_step_peaks_) {
          EXPECT_GE(counter->peak, peak) << "figure " << figure;
          peak = counter->peak;
        } else {
          EXPECT_EQ(counter->peak, peak) << "figure " << figure;
        }
      }
      std::uint64_t split_bytes = 0, split_blocks = 0, mapped = 0, segments = 0;
      for (const std::size_t one : pool == all ? std::vector<std::size_t>{small, large} : std::vector<std::size_t>{pool}) {
        split_bytes += stats.pools[one].inactive_split_bytes;
        split_blocks += stats.pools[one].inactive_split;
        mapped += stats.pools[one].mapped_bytes;
        segments += stats.pools[one].segments;
      }
      EXPECT_EQ(split_bytes, now.inactive_split_bytes[pool]);
      EXPECT_EQ(split_blocks, now.inactive_split[pool]);
      EXPECT_EQ(segments, now.segment[pool]);
      EXPECT_EQ(mapped + (pool == all ? stats.pooled_bytes : 0), now.reserved[pool]);
    }
    EXPECT_EQ(usage.reserved_bytes.current, stats.common.reserved_bytes);
    EXPECT_EQ(usage.all.active.current - usage.all.allocation.current, pending_blocks());
    ++step_;
    seen_.pending = seen_.pending || usage.all.active.current > usage.all.allocation.current;
    seen_.split_small = seen_.split_small || now.inactive_split_bytes[small] > 0;
    seen_.split_large = seen_.split_large || now.inactive_split_bytes[large] > 0;
    seen_.pooled = seen_.pooled || stats.pooled_bytes > 0;
    seen_.segments = std::max(seen_.segments, now.segment[all]);
  }

  std::uint64_t pending_blocks() const {
    std::uint64_t pending = 0;
    for (const SnapshotSegment& segment : allocator_->snapshot().segments) {
      for (const SnapshotBlock& block : segment.blocks) {
        pending += block.state == SnapshotBlock::State::active_pending_free ? 1 : 0;
      }
    }
    return pending;
  }

  void reset_peaks() {
    allocator_->reset_peak_usage();
    const Figures now = recompute(allocator_->snapshot());
    for (std::size_t pool = 0; pool < 3; ++pool) {
      peaks_[pool] = {now.active[pool], now.active_bytes[pool], now.segment[pool], now.reserved[pool]};
    }
  }

  // A seeded run: allocations on two streams in both pools, frees (a third of them waiting for the held
  // stream), the held stream completing, empty_cache, a peak reset half way, and a tag paused and resumed.
  void run(unsigned seed, int steps) {
    std::mt19937_64 rng(seed);
    driver_->stream_control()->hold(held_);
    Address paused_block = 0;
    for (int i = 0; i < steps; ++i) {
      const std::uint64_t roll = rng() % 100;
      if (roll < 55 || live_.empty()) {
        const Bytes size = rng() % 2 == 0 ? 256 + rng() % (16 * KiB) : 16 * KiB + rng() % (400 * KiB);
        allocate(size, rng() % 3 == 0 ? StreamId{1} : default_stream);
      } else if (roll < 88) {
        auto it = live_.begin();
        std::advance(it, static_cast<std::ptrdiff_t>(rng() % live_.size()));
        if (it->first != paused_block) free(it->first, rng() % 3 == 0);
      } else if (roll < 94) {
        driver_->stream_control()->complete(held_);
        driver_->stream_control()->hold(held_);
        check();
      } else if (roll < 97) {
        empty_cache();
      } else {
        const Bytes size = 8 * KiB + rng() % (200 * KiB);
        TagScope scope("statistics-paused");
        paused_block = allocate(size);
        must(allocator_->pause("statistics-paused", false));
        check();
        must(allocator_->resume("statistics-paused"));
        check();
      }
      if (i == steps / 2) reset_peaks();
    }
    // What the run went through, so that the figures were checked in those states.
    EXPECT_TRUE(seen_.pending) << "a free waited for the held stream";
    EXPECT_TRUE(seen_.split_small && seen_.split_large) << "free bytes beside blocks in use, in both pools";
    EXPECT_TRUE(seen_.pooled) << "pages unmapped and kept";
    EXPECT_GE(seen_.segments, 4u) << "two streams, both pools";
    EXPECT_NE(paused_block, 0u) << "a tag paused";
  }

  std::unique_ptr<Driver> driver_;
  std::unique_ptr<TesseraAllocator> allocator_;
  std::map<Address, Bytes> live_;
  StreamId held_{7};
  std::array<std::array<std::uint64_t, 4>, 3> peaks_{};
  int step_ = 0;
  bool whole_step_peaks_ = true;  // every peak is reached at the end of a step
  struct {
    bool pending = false, split_small = false, split_large = false, pooled = false;
    std::uint64_t segments = 0;
  } seen_;
};

TEST_F(PoolStatisticsTest, EveryFigureIsTheSnapshotsAfterEveryStep) {
  make(2048, "small_max_kb:16");
  run(1701, 400);
}

TEST_F(PoolStatisticsTest, PagesOfSeveralGranules) {
  make(2048, "small_max_kb:16,page_max_mb:1");
  run(1702, 300);
}

TEST_F(PoolStatisticsTest, GarbageCollectionUnmapsIdlePages) {
  make(512, "small_max_kb:16,garbage_collection_threshold:0.1");
  whole_step_peaks_ = false;
  run(1703, 300);
  EXPECT_GT(allocator_->tessera_stats().pages_reclaimed, 0u) << "the run collected garbage";
}

// The figures of a few blocks, worked out by hand: a small block between two freed ones in one granule,
// a large block of whole granules, and a free that waits.
TEST_F(PoolStatisticsTest, AFewBlocksByHand) {
  make(64, "small_max_kb:16");
  driver_->stream_control()->hold(held_);
  const Address a = allocate(1 * KiB);
  const Address b = allocate(2 * KiB);
  const Address c = allocate(4 * KiB);
  const Address big = allocate(3 * granule);
  Figures expected;
  expected.active = {3, 1, 4};
  expected.segment = {1, 1, 2};
  // "all" counts the pooled granules too: the first chunk grew by one granule past a's (a block larger than all
  // that was held), and the big block took that one before a chunk for the two it lacked.
  expected.reserved = {granule, 3 * granule, 4 * granule};
  check(expected);
  // Small blocks grow up from the region's start: a, b, c, then the free rest of the granule.
  ASSERT_EQ(b, a + 1 * KiB);
  ASSERT_EQ(c, b + 2 * KiB);
  TesseraStats stats = allocator_->tessera_stats();
  EXPECT_EQ(stats.pools[small].inactive_split_bytes, granule - 7 * KiB) << "the rest of c's granule";
  EXPECT_EQ(stats.pools[small].inactive_split, 1u);
  EXPECT_EQ(stats.pools[large].inactive_split_bytes, 0u) << "whole granules";
  free(a);
  free(c, true);  // waits for the held stream: still active, its bytes not free
  stats = allocator_->tessera_stats();
  EXPECT_EQ(stats.pools[small].inactive_split_bytes, granule - 6 * KiB) << "a's bytes and the rest past c";
  EXPECT_EQ(stats.pools[small].inactive_split, 2u);
  expected.active = {2, 1, 3};
  check(expected);
  EXPECT_EQ(allocator_->usage().small_pool.active_bytes.current, 6 * KiB) << "b, and c until its stream completes";
  driver_->stream_control()->complete(held_);
  const Address d = allocate(1 * KiB);  // processes the completed free first
  EXPECT_EQ(d, a);
  expected.active = {2, 1, 3};
  check(expected);
  EXPECT_EQ(allocator_->usage().small_pool.active.freed, 2u);
  EXPECT_EQ(allocator_->usage().small_pool.active.peak, 3u);
  free(big);
  empty_cache();
  expected.active = {2, 0, 2};
  expected.segment = {1, 0, 1};
  expected.reserved = {granule, 0, 2 * granule};  // a's chunk goes back only whole: its other granule stays pooled
  check(expected);
  EXPECT_EQ(allocator_->usage().large_pool.mapped_bytes.peak, 3 * granule);
  EXPECT_EQ(allocator_->usage().all.segment.peak, 2u);
}

// A block over slivers (the out-of-memory ladder's last step) is a segment of its own; the slivers lent to
// it are not counted twice, and its free waits for its stream's work like any shared block's.
TEST_F(PoolStatisticsTest, ABlockOverSliversIsASegmentOfItsOwn) {
  make(7, "small_max_kb:4");
  driver_->stream_control()->hold(held_);
  // Five granules under three large blocks with a free half granule between each pair (sliver_sharing_test).
  const Bytes half = granule / 2;
  const Address l3 = allocate(3 * half);
  const Address tail = allocate(half);
  const Address l2 = allocate(granule);
  const Address head = allocate(half);
  const Address l1 = allocate(3 * half);
  free(head);
  free(tail);
  const Address shared = allocate(3 * granule);
  ASSERT_EQ(allocator_->tessera_stats().shared_blocks, 1u);
  Figures expected;
  expected.active = {0, 4, 4};
  expected.segment = {0, 2, 2};
  expected.reserved = {0, 7 * granule, 7 * granule};
  check(expected);
  EXPECT_EQ(allocator_->tessera_stats().pools[large].inactive_split_bytes, 0u) << "both slivers lent";
  free(shared, true);
  expected.active = {0, 4, 4};
  check(expected);
  driver_->stream_control()->complete(held_);
  free(l2);
  const Address again = allocate(granule);  // processes the pending free: the shared block taken apart
  (void)again;
  expected.active = {0, 3, 3};
  expected.segment = {0, 1, 1};
  expected.reserved = {0, 5 * granule, 7 * granule};
  check(expected);
  (void)l1;
  (void)l3;
}

}  // namespace
}  // namespace tessera
