// The C ABI when host memory runs out inside the allocator: the entry point's exception barrier turns
// std::bad_alloc into TESSERA_ERROR_HOST_OUT_OF_MEMORY and a message, and the allocator stays consistent.
// Host memory is made to run out by this program's own operator new, which libtessera_c.so's calls reach
// (the executable's definition interposes on libstdc++'s), and which throws once when `fail_next` is set,
// so that the barrier's message can still be built.
#include <gtest/gtest.h>

#include <cstdlib>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "tessera/tessera_c.h"

namespace {
thread_local bool fail_next = false;
}  // namespace

void* operator new(std::size_t size) {
  if (fail_next) {
    fail_next = false;
    throw std::bad_alloc();
  }
  if (void* memory = std::malloc(size == 0 ? 1 : size)) return memory;
  throw std::bad_alloc();
}
void operator delete(void* memory) noexcept { std::free(memory); }
void operator delete(void* memory, std::size_t) noexcept { std::free(memory); }

namespace {

constexpr std::size_t kib = 1024;

std::uint64_t allocated_bytes(int device) {
  tessera_memory_stats stats{};
  EXPECT_EQ(tessera_get_memory_stats(device, &stats), 0) << tessera_last_error();
  return stats.allocated_bytes;
}

// Serves blocks of new sizes, each call with its first host allocation failing, until a call fails; the blocks
// served before that are returned in `served` (calls that needed no host memory). Fails the test when no call fails within `attempts`.
template <class Allocate>
void allocate_until_host_memory_fails(Allocate allocate, std::vector<void*>& served, int attempts = 4096) {
  for (int i = 1; i <= attempts; ++i) {
    fail_next = true;
    void* block = allocate(static_cast<std::size_t>(i) * 4 * kib);
    fail_next = false;
    if (block == nullptr) return;
    served.push_back(block);
  }
  ADD_FAILURE() << "no allocation needed host memory in " << attempts << " attempts";
}

class HostOutOfMemory : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(tessera_configure("host", ""), 0) << tessera_last_error(); }
};

TEST_F(HostOutOfMemory, TesseraAllocFailsWithItsOwnCodeAndTheAllocatorStaysWhole) {
  void* first = tessera_alloc(4 * kib, 0, nullptr);  // the device exists: the fast path from here on
  ASSERT_NE(first, nullptr) << tessera_last_error();
  const std::uint64_t before = allocated_bytes(0);
  std::vector<void*> served;
  allocate_until_host_memory_fails([](std::size_t size) { return tessera_alloc(size, 0, nullptr); }, served);
  EXPECT_EQ(tessera_last_error_code(), TESSERA_ERROR_HOST_OUT_OF_MEMORY);
  const std::string message = tessera_last_error();
  EXPECT_NE(message.find("tessera_alloc"), std::string::npos) << message;
  EXPECT_NE(message.find("out of host memory"), std::string::npos) << message;

  for (void* block : served) tessera_free(block, 0, 0, nullptr);
  EXPECT_EQ(tessera_last_error_code(), TESSERA_OK) << tessera_last_error();
  EXPECT_EQ(allocated_bytes(0), before) << "the failed call left a block live";
  void* again = tessera_alloc(64 * kib, 0, nullptr);  // and the allocator serves again
  ASSERT_NE(again, nullptr) << tessera_last_error();
  tessera_free(again, 0, 0, nullptr);
  tessera_free(first, 0, 0, nullptr);
  EXPECT_EQ(allocated_bytes(0), 0u);
}

TEST_F(HostOutOfMemory, TheTorchEntryPointThrowsInsteadOfReturningNull) {
  void* first = tessera_torch_alloc(4 * kib, 0, nullptr);
  ASSERT_NE(first, nullptr) << tessera_last_error();
  std::vector<void*> served;
  bool threw = false;
  allocate_until_host_memory_fails(
      [&](std::size_t size) -> void* {
        try {
          return tessera_torch_alloc(size, 0, nullptr);
        } catch (const std::runtime_error& error) {
          threw = true;
          EXPECT_NE(std::string(error.what()).find("out of host memory"), std::string::npos) << error.what();
          return nullptr;
        }
      },
      served);
  EXPECT_TRUE(threw);
  EXPECT_EQ(tessera_last_error_code(), TESSERA_ERROR_HOST_OUT_OF_MEMORY);
  for (void* block : served) tessera_free(block, 0, 0, nullptr);
  tessera_free(first, 0, 0, nullptr);
  EXPECT_EQ(allocated_bytes(0), 0u);
}

}  // namespace
