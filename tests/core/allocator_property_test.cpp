// Random operation sequences (seeded) on the host driver, with every invariant checked after every
// operation and the data oracle: each live block keeps the bytes written into it at allocation through
// every stitch, reclaim, garbage collection and empty_cache. From several threads: allocator_stress_test.cpp.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <unordered_map>

#include "tessera/allocator.hpp"
#include "tessera/drivers.hpp"
#include "support/must.hpp"

namespace tessera {
namespace {

constexpr Bytes granule = 64 * KiB;

using test_support::must;

unsigned char pattern_byte(std::uint64_t seed, Bytes offset) {
  return static_cast<unsigned char>((seed * 0x9e3779b97f4a7c15ull + offset * 131 + (offset >> 9)) >> 7);
}

void write_pattern(Address at, Bytes size, std::uint64_t seed) {
  auto* bytes = reinterpret_cast<unsigned char*>(static_cast<std::uintptr_t>(at));
  for (Bytes i = 0; i < size; ++i) bytes[i] = pattern_byte(seed, i);
}

// The offset of the first wrong byte, or -1.
long long first_wrong(Address at, Bytes size, std::uint64_t seed) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(static_cast<std::uintptr_t>(at));
  for (Bytes i = 0; i < size; ++i) {
    if (bytes[i] != pattern_byte(seed, i)) return static_cast<long long>(i);
  }
  return -1;
}

Bytes random_size(std::mt19937_64& random) {
  switch (random() % 4) {
    case 0: return 1 + random() % (4 * KiB);
    case 1: return 1 + random() % (256 * KiB);
    case 2: return granule * (1 + random() % 6) + random() % 1024;
    default: return granule * (1 + random() % 16);
  }
}

struct Live {
  Bytes size;
  std::uint64_t seed;
};

class AllocatorProperty : public ::testing::TestWithParam<std::uint64_t> {};

TEST_P(AllocatorProperty, InvariantsAndDataHoldThroughRandomOperations) {
  const std::uint64_t seed = GetParam();
  std::mt19937_64 random(seed);
  const Bytes capacity = 64 * granule;
  auto driver = must(make_host_driver({.capacity = capacity, .granularity = granule}));
  AllocatorConfig config;
  config.small_max = 32 * KiB;
  if (seed % 3 == 0) config.garbage_collection_threshold = 0.6;
  if (seed % 4 == 1) config.roundup_power2_divisions = 4;
  auto allocator = must(make_tessera_allocator(*driver, config));
  StreamControl& streams = *driver->stream_control();
  const StreamId stream_ids[] = {default_stream, StreamId{1}, StreamId{2}};

  std::unordered_map<Address, Live> live;
  std::vector<Address> order;  // for picking a random live block
  std::uint64_t next_seed = seed << 20;
  std::size_t ooms = 0;

  auto verify_all = [&](int step) {
    for (const auto& [address, block] : live) {
      const long long wrong = first_wrong(address, block.size, block.seed);
      ASSERT_EQ(wrong, -1) << "step " << step << ": block " << std::hex << address << std::dec << " of " << block.size
                           << " bytes lost its data at offset " << wrong;
    }
  };

  for (int step = 0; step < 1500; ++step) {
    const auto choice = random() % 100;
    if (choice < 50 || live.empty()) {
      const Bytes size = random_size(random);
      const StreamId stream = stream_ids[random() % 3];
      auto block = allocator->allocate(size, stream);
      if (!block) {
        ASSERT_EQ(block.error().code, Errc::out_of_memory) << describe(block.error());
        ++ooms;
      } else {
        for (const auto& [address, other] : live) {
          ASSERT_TRUE(*block + size <= address || address + other.size <= *block) << "live blocks overlap";
        }
        const std::uint64_t block_seed = next_seed++;
        write_pattern(*block, size, block_seed);
        live.emplace(*block, Live{size, block_seed});
        order.push_back(*block);
      }
    } else if (choice < 92) {
      const std::size_t index = random() % order.size();
      const Address address = order[index];
      ASSERT_EQ(first_wrong(address, live.at(address).size, live.at(address).seed), -1) << "step " << step;
      if (random() % 5 == 0) {
        const StreamId user = stream_ids[random() % 3];
        must(allocator->record_stream(address, user));
        if (random() % 2 == 0) streams.hold(user);
      }
      must(allocator->deallocate(address));
      live.erase(address);
      order[index] = order.back();
      order.pop_back();
    } else if (choice < 97) {
      streams.complete(stream_ids[random() % 3]);
    } else {
      must(allocator->empty_cache());
    }

    const auto broken = allocator->check();
    ASSERT_EQ(broken, std::nullopt) << "step " << step << ": " << *broken;
    const AllocatorStats stats = allocator->stats();
    ASSERT_LE(stats.reserved_bytes, capacity);
    ASSERT_EQ(driver->census().page_bytes, stats.reserved_bytes) << "step " << step;
    if (step % 50 == 0) verify_all(step);
  }
  verify_all(-1);
  const TesseraStats exercised = allocator->tessera_stats();
  EXPECT_GT(exercised.pages_stitched, 0u) << "the sequence never stitched: the test would prove little";
  EXPECT_GT(exercised.pages_reclaimed, 0u);
  for (StreamId stream : stream_ids) streams.complete(stream);
  for (Address address : order) must(allocator->deallocate(address));
  must(allocator->empty_cache());
  EXPECT_EQ(allocator->stats().reserved_bytes, 0u);
  EXPECT_EQ(allocator->stats().allocated_bytes, 0u);
  EXPECT_EQ(driver->census().pages, 0u);
  RecordProperty("ooms", static_cast<int>(ooms));
}

INSTANTIATE_TEST_SUITE_P(Seeds, AllocatorProperty, ::testing::Range<std::uint64_t>(1, 25));

}  // namespace
}  // namespace tessera
