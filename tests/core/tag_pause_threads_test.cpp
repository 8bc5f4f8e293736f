// Pausing and resuming a tag while other threads allocate, write and free under other tags: in the thread
// tests' binary, which ThreadSanitizer runs (the tsan preset). The single-threaded pause tests:
// tag_pause_test.cpp.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "support/must.hpp"
#include "tessera/allocator.hpp"
#include "tessera/drivers.hpp"
#include "tessera/tags.hpp"

namespace tessera {
namespace {

constexpr Bytes granule = 64 * KiB;

using test_support::must;

// One thread pauses and resumes a tag while others allocate, write and free under other tags.
TEST(TagPauseThreadsTest, OtherTagsAllocateWhileOneIsPausedAndResumed) {
  auto driver = must(make_host_driver({.capacity = 512 * granule, .granularity = granule}));
  auto allocator = must(make_tessera_allocator(*driver));
  std::vector<Address> kv;
  {
    TagScope scope("kv_cache");
    for (int i = 0; i < 8; ++i) {
      kv.push_back(must(allocator->allocate(100 * KiB, default_stream)));
      const std::vector<unsigned char> bytes(100 * KiB, static_cast<unsigned char>(i + 1));
      must(driver->write(kv.back(), bytes.data(), bytes.size()));
    }
  }
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
  std::vector<std::thread> workers;
  for (int worker = 0; worker < 3; ++worker) {
    workers.emplace_back([&, worker] {
      TagScope scope(worker == 0 ? "default" : "worker" + std::to_string(worker));
      for (int round = 0; !stop.load() || round < 50; ++round) {
        const Bytes size = static_cast<Bytes>(1000 + (round * 7919 + worker * 104729) % (300 * KiB));
        auto block = allocator->allocate(size, default_stream);
        if (!block) {
          ++failures;
          continue;
        }
        // Through the host pointer: the driver itself is not thread-safe (the allocator serializes its calls).
        const unsigned char value = static_cast<unsigned char>(round + worker);
        auto* bytes = reinterpret_cast<unsigned char*>(*block);
        std::memset(bytes, value, size);
        for (Bytes i = 0; i < size; i += 4093) failures += bytes[i] != value ? 1 : 0;
        if (!allocator->deallocate(*block)) ++failures;
        if (round > 2000) break;
      }
    });
  }
  for (int cycle = 0; cycle < 20; ++cycle) {
    must(allocator->pause("kv_cache", true));
    must(allocator->resume("kv_cache"));
  }
  stop = true;
  for (std::thread& worker : workers) worker.join();
  EXPECT_EQ(failures.load(), 0);
  for (std::size_t i = 0; i < kv.size(); ++i) {
    std::vector<unsigned char> back(100 * KiB);
    must(driver->read(kv[i], back.data(), back.size()));
    EXPECT_EQ(back, std::vector<unsigned char>(100 * KiB, static_cast<unsigned char>(i + 1)));
    must(allocator->deallocate(kv[i]));
  }
  EXPECT_EQ(allocator->check(), std::nullopt);
}

}  // namespace
}  // namespace tessera
