// fork() and the allocator: a child's frees, allocations and empty_cache never reach the parent's memory,
// both may allocate at once, and a fork while another thread is inside the allocator never leaves the
// child a lock nobody will release.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "support/child_process.hpp"
#include "support/must.hpp"
#include "tessera/allocator.hpp"
#include "tessera/drivers.hpp"

namespace tessera {
namespace {

using test_support::describe;
using test_support::must;
using test_support::run_in_child;
using test_support::start_child;
using test_support::wait_for_child;

unsigned char* bytes_at(Address address) {
  return reinterpret_cast<unsigned char*>(static_cast<std::uintptr_t>(address));
}

void fill(Address at, Bytes size, unsigned char seed) {
  unsigned char* bytes = bytes_at(at);
  for (Bytes i = 0; i < size; ++i) bytes[i] = static_cast<unsigned char>(seed + i * 7);
}

bool holds(Address at, Bytes size, unsigned char seed) {
  const unsigned char* bytes = bytes_at(at);
  for (Bytes i = 0; i < size; ++i) {
    if (bytes[i] != static_cast<unsigned char>(seed + i * 7)) return false;
  }
  return true;
}

class AllocatorFork : public ::testing::Test {
 protected:
  void SetUp() override {
    driver_ = must(make_host_driver({.capacity = 256 * MiB}));
    allocator_ = must(make_tessera_allocator(*driver_));
  }
  void TearDown() override { EXPECT_EQ(allocator_->check(), std::nullopt); }

  std::unique_ptr<Driver> driver_;
  std::unique_ptr<TesseraAllocator> allocator_;
};

// Both processes allocate, write and check 24 blocks at once; the child first frees the parent's live
// block and empties its cache, as a DataLoader worker that drops an inherited tensor would.
TEST_F(AllocatorFork, ChildAndParentNeverShareABlock) {
  constexpr Bytes live_size = 1 * MiB;
  constexpr Bytes block_size = 1536 * KiB;
  constexpr int blocks = 24;
  const Address live = must(allocator_->allocate(live_size, default_stream));
  fill(live, live_size, 0xa1);
  must(allocator_->deallocate(must(allocator_->allocate(8 * MiB, default_stream))));  // cached: the child may take it

  int go[2];
  ASSERT_EQ(pipe(go), 0);
  auto churn = [&](unsigned char seed) {
    std::vector<Address> mine;
    for (int i = 0; i < blocks; ++i) {
      mine.push_back(must(allocator_->allocate(block_size, default_stream)));
      fill(mine.back(), block_size, static_cast<unsigned char>(seed + i));
    }
    for (int i = 0; i < blocks; ++i) {
      if (!holds(mine[i], block_size, static_cast<unsigned char>(seed + i))) return false;
    }
    for (Address block : mine) must(allocator_->deallocate(block));
    return true;
  };
  const pid_t child = start_child([&] {
    if (!holds(live, live_size, 0xa1)) return 10;
    if (!allocator_->deallocate(live)) return 11;
    const Address mine = must(allocator_->allocate(live_size, default_stream));
    fill(mine, live_size, 0xff);
    char token = 0;
    if (read(go[0], &token, 1) != 1) return 12;  // the parent churns now too
    if (!churn(0x30)) return 13;
    if (!allocator_->deallocate(mine) || !allocator_->empty_cache()) return 14;
    return allocator_->check() ? 15 : 0;
  });
  ASSERT_GT(child, 0);
  ASSERT_EQ(write(go[1], "x", 1), 1);
  EXPECT_TRUE(churn(0x90)) << "a block of the parent changed while the child allocated";
  const auto end = wait_for_child(child);
  close(go[0]);
  close(go[1]);
  EXPECT_EQ(end.exit_code, 0) << describe(end);
  EXPECT_TRUE(holds(live, live_size, 0xa1)) << "the child's free and allocation overwrote the parent's block";
  EXPECT_EQ(allocator_->stats().allocated_bytes, live_size) << "the child's free freed the parent's block";
  must(allocator_->deallocate(live));
}

// Another thread is inside the allocator (slow paths too: empty_cache unmaps and releases) at each fork.
TEST_F(AllocatorFork, ForkDuringAllocationNeverDeadlocksTheChild) {
  std::atomic<bool> stop{false};
  std::thread worker([&] {
    for (unsigned round = 0; !stop.load(std::memory_order_relaxed); ++round) {
      auto block = allocator_->allocate((1 + round % 7) * MiB, default_stream);
      if (block) (void)allocator_->deallocate(*block);
      if (round % 3 == 0) (void)allocator_->empty_cache();
    }
  });
  int hung = 0;
  int failed = 0;
  for (int i = 0; i < 40; ++i) {
    const auto end = run_in_child(
        [&] {
          const Address block = must(allocator_->allocate(3 * MiB, default_stream));
          fill(block, 3 * MiB, 0x5c);
          if (!holds(block, 3 * MiB, 0x5c)) return 10;
          must(allocator_->deallocate(block));
          return allocator_->check() ? 11 : 0;
        },
        std::chrono::seconds(10));
    hung += end.hung ? 1 : 0;
    failed += !end.hung && end.exit_code != 0 ? 1 : 0;
  }
  stop = true;
  worker.join();
  EXPECT_EQ(hung, 0) << "children that found the allocator's lock held for ever";
  EXPECT_EQ(failed, 0);
}

}  // namespace
}  // namespace tessera
