// The stress test: 8 threads × 4 streams of random allocate / free / record_stream on one allocator,
// a fixed count of operations, blocks handed between threads (a tensor freed by another thread), a
// monitor thread reading stats, snapshots and check() meanwhile. Built for ThreadSanitizer (the tsan
// preset runs this binary, tessera_thread_tests); in every build it checks the data oracle — each live
// block keeps the bytes written into it — and the end state: after everything is freed and empty_cache,
// nothing is reserved and the driver holds no page, mapping, reservation of a page, or event.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "tessera/allocator.hpp"
#include "tessera/driver_decorators.hpp"
#include "tessera/drivers.hpp"
#include "support/must.hpp"

namespace tessera {
namespace {

constexpr Bytes granule = 64 * KiB;
constexpr int thread_count = 8;
constexpr int stream_count = 4;
#ifndef TESSERA_STRESS_OPERATIONS
#define TESSERA_STRESS_OPERATIONS 3000
#endif
constexpr int operations_per_thread = TESSERA_STRESS_OPERATIONS;

using test_support::must;

// Word patterns: cheap to write and compare even under ThreadSanitizer.
std::uint64_t word(std::uint64_t seed, Bytes index) { return (seed + 1) * 0x9e3779b97f4a7c15ull ^ (index + 1) * 0xbf58476d1ce4e5b9ull; }

void write_pattern(Address at, Bytes size, std::uint64_t seed) {
  auto* words = reinterpret_cast<std::uint64_t*>(static_cast<std::uintptr_t>(at));
  for (Bytes i = 0; i < size / 8; ++i) words[i] = word(seed, i);
}

bool holds_pattern(Address at, Bytes size, std::uint64_t seed) {
  const auto* words = reinterpret_cast<const std::uint64_t*>(static_cast<std::uintptr_t>(at));
  for (Bytes i = 0; i < size / 8; ++i) {
    if (words[i] != word(seed, i)) return false;
  }
  return true;
}

Bytes random_size(std::mt19937_64& random) {
  switch (random() % 8) {
    case 0: return 8 + random() % 504;                       // under the 512 B rounding
    case 1: case 2: case 3: return 512 + random() % (64 * KiB);
    case 4: case 5: return 64 * KiB + random() % (1 * MiB);  // small pool's edge and above
    case 6: return granule * (1 + random() % 24);
    default: return granule * (1 + random() % 8) + 8 * (random() % 128);
  }
}

struct Block {
  Address address;
  Bytes size;
  std::uint64_t seed;
};

struct Counts {
  std::atomic<std::uint64_t> allocations{0}, frees{0}, handed_over{0}, record_streams{0}, ooms{0}, empty_caches{0};
  std::atomic<std::uint64_t> corrupted{0}, unexpected{0}, snapshots{0}, checks_failed{0};
};

TEST(AllocatorStress, EightThreadsFourStreamsEndEmpty) {
  // host → counter (the census of what the driver holds) → allocator.
  auto driver = std::make_unique<CountingDriver>(
      must(make_host_driver({.capacity = 192 * MiB, .granularity = granule})));
  auto allocator = must(make_tessera_allocator(*driver, must(parse_allocator_config("garbage_collection_threshold:0.8"))));
  allocator->record_history(4096);

  Counts counts;
  std::mutex exchange_mutex;
  std::vector<Block> exchange;  // blocks one thread allocated and another frees
  std::atomic<int> running{thread_count};

  auto worker = [&](int index) {
    std::mt19937_64 random(0x5eed0000 + static_cast<std::uint64_t>(index));
    std::vector<Block> mine;
    std::uint64_t next_seed = static_cast<std::uint64_t>(index) << 40;
    auto release = [&](const Block& block) {
      if (!holds_pattern(block.address, block.size, block.seed)) ++counts.corrupted;
      if (allocator->deallocate(block.address)) ++counts.frees;
      else ++counts.unexpected;
    };
    for (int op = 0; op < operations_per_thread; ++op) {
      const auto choice = random() % 100;
      if (mine.empty() || choice < 45) {
        const Bytes size = random_size(random);
        const StreamId stream{static_cast<std::uintptr_t>(random() % stream_count)};
        auto address = allocator->allocate(size, stream);
        if (!address) {
          if (address.error().code == Errc::out_of_memory) ++counts.ooms;
          else ++counts.unexpected;
          // Out of memory: free half of what this thread holds.
          for (std::size_t i = 0; i < mine.size() / 2; ++i) release(mine[i]);
          mine.erase(mine.begin(), mine.begin() + static_cast<std::ptrdiff_t>(mine.size() / 2));
          continue;
        }
        ++counts.allocations;
        write_pattern(*address, size, next_seed);
        mine.push_back({*address, size, next_seed++});
      } else if (choice < 80) {
        const std::size_t at = random() % mine.size();
        release(mine[at]);
        mine[at] = mine.back();
        mine.pop_back();
      } else if (choice < 92) {
        const Block& block = mine[random() % mine.size()];
        if (allocator->record_stream(block.address, StreamId{static_cast<std::uintptr_t>(random() % stream_count)})) {
          ++counts.record_streams;
        } else {
          ++counts.unexpected;
        }
      } else if (choice < 99) {
        // Hand a block to whichever thread takes from the exchange next; take one if there is one.
        std::lock_guard lock(exchange_mutex);
        const std::size_t at = random() % mine.size();
        exchange.push_back(mine[at]);
        mine[at] = mine.back();
        mine.pop_back();
        ++counts.handed_over;
        if (exchange.size() > 1) {
          mine.push_back(exchange.front());
          exchange.erase(exchange.begin());
        }
      } else {
        if (allocator->empty_cache()) ++counts.empty_caches;
        else ++counts.unexpected;
      }
    }
    for (const Block& block : mine) release(block);
    --running;
  };

  // Reads everything a user may read while the others allocate.
  auto monitor = [&] {
    while (running.load() > 0) {
      const AllocatorStats stats = allocator->stats();
      if (stats.reserved_bytes > driver->capacity()) ++counts.unexpected;
      if (allocator->check()) ++counts.checks_failed;
      (void)allocator->snapshot();
      (void)allocator->history();
      ++counts.snapshots;
      std::this_thread::yield();
    }
  };

  std::vector<std::thread> threads;
  for (int t = 0; t < thread_count; ++t) threads.emplace_back(worker, t);
  std::thread watcher(monitor);
  for (std::thread& thread : threads) thread.join();
  watcher.join();
  for (const Block& block : exchange) {
    EXPECT_TRUE(holds_pattern(block.address, block.size, block.seed));
    ASSERT_TRUE(allocator->deallocate(block.address));
    ++counts.frees;
  }

  EXPECT_EQ(counts.corrupted.load(), 0u) << "blocks whose bytes changed while live";
  EXPECT_EQ(counts.unexpected.load(), 0u) << "errors other than out of memory";
  EXPECT_EQ(counts.checks_failed.load(), 0u) << "check() found a broken invariant during the run";
  EXPECT_EQ(counts.allocations.load(), counts.frees.load());
  EXPECT_GT(counts.allocations.load(), static_cast<std::uint64_t>(thread_count * operations_per_thread / 3));
  EXPECT_GT(counts.record_streams.load(), 0u);
  EXPECT_GT(counts.handed_over.load(), 0u);
  EXPECT_EQ(allocator->check(), std::nullopt);

  const AllocatorStats before_empty = allocator->stats();
  EXPECT_EQ(before_empty.allocated_bytes, 0u);
  EXPECT_EQ(before_empty.requested_bytes, 0u);
  ASSERT_TRUE(allocator->empty_cache());
  EXPECT_EQ(allocator->stats().reserved_bytes, 0u);
  const DriverCensus census = driver->census();
  EXPECT_EQ(census.pages, 0u);
  EXPECT_EQ(census.page_bytes, 0u);
  EXPECT_EQ(census.mappings, 0u);
  EXPECT_EQ(census.events, 0u);

  const TesseraStats stats = allocator->tessera_stats();
  RecordProperty("allocations", static_cast<int>(counts.allocations.load()));
  RecordProperty("record_streams", static_cast<int>(counts.record_streams.load()));
  RecordProperty("ooms", static_cast<int>(counts.ooms.load()));
  std::printf("stress: %d threads x %d streams x %d operations: %llu allocations, %llu frees (%llu handed between "
              "threads), %llu record_stream, %llu out of memory, %llu empty_cache, %llu monitor reads; peak reserved "
              "%llu MiB, pages stitched %llu, reclaimed %llu, syncs %llu\n",
              thread_count, stream_count, operations_per_thread,
              static_cast<unsigned long long>(counts.allocations.load()),
              static_cast<unsigned long long>(counts.frees.load()),
              static_cast<unsigned long long>(counts.handed_over.load()),
              static_cast<unsigned long long>(counts.record_streams.load()),
              static_cast<unsigned long long>(counts.ooms.load()),
              static_cast<unsigned long long>(counts.empty_caches.load()),
              static_cast<unsigned long long>(counts.snapshots.load()),
              static_cast<unsigned long long>(stats.common.peak_reserved_bytes / MiB),
              static_cast<unsigned long long>(stats.pages_stitched),
              static_cast<unsigned long long>(stats.pages_reclaimed), static_cast<unsigned long long>(stats.syncs));
}

struct Live {
  Bytes size;
  std::uint64_t seed;
};

// Four threads on two streams, each allocating and freeing its own blocks: what the eight-thread test above
// adds to (handed-over blocks, record_stream, a monitor), in its simplest form.
TEST(AllocatorStress, ThreadsAllocateAndFreeConcurrentlyAndEverythingComesBack) {
  constexpr int threads = 4;
  constexpr int operations = 4000;
  auto driver = must(make_host_driver({.capacity = 256 * granule, .granularity = granule}));
  AllocatorConfig config;
  config.small_max = 32 * KiB;
  auto allocator = must(make_tessera_allocator(*driver, config));

  std::atomic<int> corrupted{0};
  std::atomic<int> unexpected{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937_64 random(1000 + t);
      std::vector<std::pair<Address, Live>> mine;
      std::uint64_t seeds = static_cast<std::uint64_t>(t) << 32;
      for (int i = 0; i < operations; ++i) {
        if (mine.empty() || random() % 2 == 0) {
          const Bytes size = random_size(random) / 4 + 1;
          auto block = allocator->allocate(size, StreamId{static_cast<std::uintptr_t>(t % 2)});
          if (!block) {
            if (block.error().code != Errc::out_of_memory) ++unexpected;
            continue;
          }
          write_pattern(*block, size, seeds);
          mine.push_back({*block, Live{size, seeds++}});
        } else {
          const std::size_t index = random() % mine.size();
          const auto [address, block] = mine[index];
          if (!holds_pattern(address, block.size, block.seed)) ++corrupted;
          if (!allocator->deallocate(address)) ++unexpected;
          mine[index] = mine.back();
          mine.pop_back();
        }
      }
      for (const auto& [address, block] : mine) {
        if (!holds_pattern(address, block.size, block.seed)) ++corrupted;
        if (!allocator->deallocate(address)) ++unexpected;
      }
    });
  }
  for (std::thread& worker : workers) worker.join();
  EXPECT_EQ(corrupted.load(), 0);
  EXPECT_EQ(unexpected.load(), 0);
  EXPECT_EQ(allocator->check(), std::nullopt);
  must(allocator->empty_cache());
  EXPECT_EQ(allocator->stats().reserved_bytes, 0u);
  EXPECT_EQ(driver->census().pages, 0u);
}

}  // namespace
}  // namespace tessera
