// The "memory-saver" model (torch_memory_saver / vLLM's CuMemAllocator) on the host driver: one physical
// handle per tagged allocation, data kept through pause and resume with backup, addresses kept, the pages
// given back while paused, out of memory on resume an answer, and untagged memory the pytorch model's.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "baselines/baseline_fixtures.hpp"
#include "tessera/tags.hpp"

namespace tessera::testing {
namespace {

std::vector<unsigned char> pattern(Bytes size, unsigned char seed) {
  std::vector<unsigned char> bytes(size);
  for (Bytes i = 0; i < size; ++i) bytes[i] = static_cast<unsigned char>(seed + i * 31 + (i >> 12));
  return bytes;
}

struct MemorySaverModel : ::testing::Test {
  std::unique_ptr<Driver> host = host_driver(64 * MiB);
  CountingDriver* calls = nullptr;
  std::unique_ptr<DeviceAllocator> allocator;

  void SetUp() override {
    auto counting = std::make_unique<CountingDriver>(std::move(host));
    calls = counting.get();
    host = std::move(counting);
    allocator = make_model("memory-saver", *host);
  }
};

TEST_F(MemorySaverModel, TaggedAllocationsAreOneHandleEach) {
  Address first = 0;
  Address second = 0;
  {
    TagScope weights("ms_weights");
    first = alloc(*allocator, 3 * MiB);
    second = alloc(*allocator, 3 * MiB);
  }
  EXPECT_EQ(calls->tally().calls_of(DriverCall::reserve), 2u);
  EXPECT_EQ(calls->tally().calls_of(DriverCall::create_chunk), 2u);
  EXPECT_EQ(host->census().page_bytes, 8 * MiB) << "each rounded up to the 2 MiB granularity on its own";
  EXPECT_EQ(allocator->stats().reserved_bytes, 8 * MiB);
  release(*allocator, first);
  release(*allocator, second);
  EXPECT_EQ(host->census().pages, 0u) << "nothing is cached";
  EXPECT_EQ(host->census().reservations, 0u);
}

TEST_F(MemorySaverModel, PauseWithBackupKeepsDataAndAddresses) {
  Address weights = 0;
  Address cache = 0;
  {
    TagScope tag("ms_weights");
    weights = alloc(*allocator, 5 * MiB);
  }
  {
    TagScope tag("ms_cache");
    cache = alloc(*allocator, 4 * MiB);
  }
  const Address untagged = alloc(*allocator, 1 * MiB);
  const std::vector<unsigned char> data = pattern(5 * MiB, 7);
  ASSERT_TRUE(host->write(weights, data.data(), data.size()).ok());
  const Bytes before = host->census().page_bytes;

  ASSERT_TRUE(allocator->pause("ms_weights", true).ok());
  ASSERT_TRUE(allocator->pause("ms_cache", false).ok());
  EXPECT_EQ(host->census().page_bytes, before - 6 * MiB - 4 * MiB) << "both tags' pages given back";
  EXPECT_EQ(host->census().host_bytes, 5 * MiB) << "one backup, of the requested bytes";
  EXPECT_TRUE(allocator->pause("ms_weights", true).ok()) << "pausing a paused tag does nothing";
  EXPECT_EQ(host->census().host_bytes, 5 * MiB);

  // Another job uses the memory meanwhile.
  const Address other = alloc(*allocator, 8 * MiB);
  release(*allocator, other);

  ASSERT_TRUE(allocator->resume("ms_weights").ok());
  ASSERT_TRUE(allocator->resume("ms_cache").ok());
  EXPECT_EQ(host->census().host_buffers, 0u) << "the backup is freed";
  std::vector<unsigned char> back(data.size());
  ASSERT_TRUE(host->read(weights, back.data(), back.size()).ok()) << "mapped again at the same address";
  EXPECT_EQ(back, data);
  ASSERT_TRUE(host->write(cache, data.data(), 4 * MiB).ok()) << "the discarded tag is usable again";
  release(*allocator, weights);
  release(*allocator, cache);
  release(*allocator, untagged);
}

TEST_F(MemorySaverModel, OutOfMemoryOnResumeIsAnAnswerAndARetryWorks) {
  Address weights = 0;
  {
    TagScope tag("ms_weights");
    weights = alloc(*allocator, 40 * MiB);
  }
  const std::vector<unsigned char> data = pattern(40 * MiB, 3);
  ASSERT_TRUE(host->write(weights, data.data(), data.size()).ok());
  ASSERT_TRUE(allocator->pause("ms_weights", true).ok());
  const Address squatter = alloc(*allocator, 40 * MiB);
  const Result<void> refused = allocator->resume("ms_weights");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, Errc::out_of_memory);
  EXPECT_NE(refused.error().message.find("ms_weights"), std::string::npos) << refused.error().message;
  EXPECT_EQ(host->census().host_bytes, 40 * MiB) << "the backup is kept";

  release(*allocator, squatter);
  ASSERT_TRUE(allocator->empty_cache().ok());
  ASSERT_TRUE(allocator->resume("ms_weights").ok());
  std::vector<unsigned char> back(data.size());
  ASSERT_TRUE(host->read(weights, back.data(), back.size()).ok());
  EXPECT_EQ(back, data);
  release(*allocator, weights);
}

TEST_F(MemorySaverModel, FreeingAPausedBlockFreesItsBackupAndRange) {
  Address weights = 0;
  {
    TagScope tag("ms_weights");
    weights = alloc(*allocator, 2 * MiB);
  }
  ASSERT_TRUE(allocator->pause("ms_weights", true).ok());
  release(*allocator, weights);
  EXPECT_EQ(host->census().host_buffers, 0u);
  EXPECT_EQ(host->census().reservations, 0u);
  EXPECT_TRUE(allocator->resume("ms_weights").ok()) << "nothing left to resume";
  EXPECT_TRUE(allocator->pause("ms_never_used", true).ok());
}

}  // namespace
}  // namespace tessera::testing
