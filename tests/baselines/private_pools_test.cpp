// Private pools (CUDA graphs) in every baseline model, with PyTorch's rules (docs/baselines.md, "Private
// pools"): a pool's blocks serve only allocations into it, captures share a pool by use count, a pool released
// by its last user gives its cached segments back at the next release_cached_blocks (empty_cache, the last
// step of the out-of-memory ladder), its live blocks' segments once they are freed; misuse is an error that
// names the pool and changes nothing.
#include <string>

#include <gtest/gtest.h>

#include "baselines/baseline_fixtures.hpp"

namespace tessera::testing {
namespace {

constexpr StreamId capturing{1};
constexpr PoolId graph_pool{1, 1};

StreamFilter only(StreamId stream) {
  return [stream](StreamId asked) { return asked == stream; };
}

bool overlaps(Address a, Bytes a_size, Address b, Bytes b_size) { return a < b + b_size && b < a + a_size; }

void expect_empty(const Driver& driver) {
  const DriverCensus census = driver.census();
  EXPECT_EQ(census.pages, 0u);
  EXPECT_EQ(census.reservations, 0u);
  EXPECT_EQ(census.mappings, 0u);
}

class EveryModelsPools : public ::testing::TestWithParam<std::string_view> {
 protected:
  std::unique_ptr<DeviceAllocator> make(Driver& driver) { return make_model(GetParam(), driver); }
  // The model's reserved bytes are the driver's pages: its bookkeeping and the device agree.
  static void expect_consistent(const DeviceAllocator& allocator, const Driver& driver) {
    EXPECT_EQ(allocator.stats().reserved_bytes, driver.census().page_bytes);
  }
};

std::string model_name(const ::testing::TestParamInfo<std::string_view>& info) {
  std::string name(info.param);
  for (char& c : name) {
    if (c == '-') c = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(Baselines, EveryModelsPools,
                         ::testing::Values("pytorch", "expandable", "gmlake", "memory-saver"), model_name);

// Small and large requests: the pool has a small and a large block pool of its own.
constexpr Bytes kSizes[] = {4 * KiB, 30 * MiB};

TEST_P(EveryModelsPools, APoolsFreedBlockNeverServesAnAllocationOutsideIt) {
  auto driver = sim_driver();
  auto allocator = make(*driver);
  for (Bytes size : kSizes) {
    TESSERA_OK(allocator->begin_allocate_to_pool(graph_pool, only(capturing)));
    const Address captured = alloc(*allocator, size, capturing);
    release(*allocator, captured);
    // While the pool is active, a stream its filter rejects goes to the shared cache.
    const Address eager_during = alloc(*allocator, size, default_stream);
    EXPECT_FALSE(overlaps(eager_during, size, captured, size)) << size;
    TESSERA_OK(allocator->end_allocate_to_pool(graph_pool));
    // After the capture, the capturing stream's allocations go to the shared cache too.
    const Address eager_after = alloc(*allocator, size, capturing);
    EXPECT_FALSE(overlaps(eager_after, size, captured, size)) << size;
    release(*allocator, eager_during);
    release(*allocator, eager_after);
    TESSERA_OK(allocator->release_pool(graph_pool));
    TESSERA_OK(allocator->empty_cache());
    expect_consistent(*allocator, *driver);
  }
  expect_empty(*driver);
}

TEST_P(EveryModelsPools, ABlockFreedInThePoolServesTheNextAllocationIntoIt) {
  auto driver = sim_driver();
  auto allocator = make(*driver);
  TESSERA_OK(allocator->begin_allocate_to_pool(graph_pool, only(capturing)));
  for (Bytes size : kSizes) {
    const Address first = alloc(*allocator, size, capturing);
    release(*allocator, first);
    const Bytes reserved = allocator->stats().reserved_bytes;
    const Address second = alloc(*allocator, size, capturing);
    EXPECT_EQ(second, first) << size;
    EXPECT_EQ(allocator->stats().reserved_bytes, reserved) << "served from the pool's cache, nothing new: " << size;
    release(*allocator, second);
  }
  TESSERA_OK(allocator->end_allocate_to_pool(graph_pool));
  TESSERA_OK(allocator->release_pool(graph_pool));
  TESSERA_OK(allocator->empty_cache());
  expect_empty(*driver);
}

TEST_P(EveryModelsPools, TwoCapturesShareAPoolUntilBothReleaseIt) {
  auto driver = sim_driver();
  auto allocator = make(*driver);
  TESSERA_OK(allocator->begin_allocate_to_pool(graph_pool, only(capturing)));
  const Address first = alloc(*allocator, 30 * MiB, capturing);
  release(*allocator, first);
  TESSERA_OK(allocator->end_allocate_to_pool(graph_pool));
  // The second graph captures into the same pool: it finds the first graph's freed block.
  TESSERA_OK(allocator->begin_allocate_to_pool(graph_pool, only(StreamId{2})));
  const Address second = alloc(*allocator, 30 * MiB, StreamId{2});
  EXPECT_NE(second, first) << "blocks are cached per stream, in the pool as in the shared cache";
  release(*allocator, second);
  TESSERA_OK(allocator->end_allocate_to_pool(graph_pool));
  TESSERA_OK(allocator->begin_allocate_to_pool(graph_pool, only(capturing)));
  EXPECT_EQ(alloc(*allocator, 30 * MiB, capturing), first) << "the shared pool's cache serves a third capture";
  release(*allocator, first);
  TESSERA_OK(allocator->end_allocate_to_pool(graph_pool));
  const Bytes reserved = allocator->stats().reserved_bytes;
  ASSERT_GT(reserved, 0u);

  // Three uses: two releases leave one, and the pool keeps its memory through empty_cache.
  TESSERA_OK(allocator->release_pool(graph_pool));
  TESSERA_OK(allocator->release_pool(graph_pool));
  TESSERA_OK(allocator->empty_cache());
  EXPECT_EQ(allocator->stats().reserved_bytes, reserved) << "a graph still uses the pool";
  TESSERA_OK(allocator->release_pool(graph_pool));
  TESSERA_OK(allocator->empty_cache());
  EXPECT_EQ(allocator->stats().reserved_bytes, 0u);
  expect_empty(*driver);
  auto again = allocator->release_pool(graph_pool);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().code, Errc::not_found);
}

TEST_P(EveryModelsPools, ReleasingAPoolWhoseBlocksAreFreeGivesItsSegmentsBack) {
  auto driver = sim_driver();
  auto allocator = make(*driver);
  TESSERA_OK(allocator->begin_allocate_to_pool(graph_pool, only(capturing)));
  const Address small = alloc(*allocator, 4 * KiB, capturing);
  const Address large = alloc(*allocator, 30 * MiB, capturing);
  release(*allocator, small);
  release(*allocator, large);
  TESSERA_OK(allocator->end_allocate_to_pool(graph_pool));
  const Bytes reserved = allocator->stats().reserved_bytes;
  ASSERT_GT(reserved, 0u);
  TESSERA_OK(allocator->empty_cache());
  EXPECT_EQ(allocator->stats().reserved_bytes, reserved) << "empty_cache leaves a pool in use alone";
  TESSERA_OK(allocator->release_pool(graph_pool));
  // PyTorch gives nothing back at the release itself, only at the next release_cached_blocks.
  EXPECT_EQ(allocator->stats().reserved_bytes, reserved);
  TESSERA_OK(allocator->empty_cache());
  EXPECT_EQ(allocator->stats().reserved_bytes, 0u);
  expect_empty(*driver);
  // The id may name a new pool now.
  TESSERA_OK(allocator->begin_allocate_to_pool(graph_pool, only(capturing)));
  release(*allocator, alloc(*allocator, 4 * KiB, capturing));
  TESSERA_OK(allocator->end_allocate_to_pool(graph_pool));
  TESSERA_OK(allocator->release_pool(graph_pool));
  TESSERA_OK(allocator->empty_cache());
  expect_empty(*driver);
}

TEST_P(EveryModelsPools, ReleaseWhileABlockIsAllocatedKeepsItUntilItsFree) {
  auto driver = sim_driver();
  auto allocator = make(*driver);
  TESSERA_OK(allocator->begin_allocate_to_pool(graph_pool, only(capturing)));
  const Address kept = alloc(*allocator, 30 * MiB, capturing);
  TESSERA_OK(allocator->end_allocate_to_pool(graph_pool));
  TESSERA_OK(allocator->release_pool(graph_pool));
  TESSERA_OK(allocator->empty_cache());
  EXPECT_GE(allocator->stats().reserved_bytes, 30 * MiB) << "the graph's output is still live";
  EXPECT_EQ(allocator->stats().requested_bytes, 30 * MiB);
  // Freed, the block goes back to its (released) pool, not to the shared cache.
  release(*allocator, kept);
  const Address eager = alloc(*allocator, 30 * MiB, capturing);
  EXPECT_FALSE(overlaps(eager, 30 * MiB, kept, 30 * MiB));
  release(*allocator, eager);
  TESSERA_OK(allocator->empty_cache());
  expect_consistent(*allocator, *driver);
  expect_empty(*driver);
}

TEST_P(EveryModelsPools, MisuseIsAnErrorNamingThePoolAndChangesNothing) {
  auto driver = sim_driver();
  auto allocator = make(*driver);
  const Address live = alloc(*allocator, 4 * KiB);
  const AllocatorStats before = allocator->stats();
  auto expect_error = [&](Result<void> result, Errc code, std::string_view words) {
    ASSERT_FALSE(result.ok());
    EXPECT_EQ(result.error().code, code) << result.error().message;
    EXPECT_NE(result.error().message.find(words), std::string::npos) << result.error().message;
    EXPECT_EQ(result.error().message.rfind(std::string(GetParam()) + ": ", 0), 0u) << result.error().message;
  };
  expect_error(allocator->release_pool(PoolId{5, 6}), Errc::not_found, "release_pool of pool (5, 6)");
  expect_error(allocator->end_allocate_to_pool(PoolId{5, 6}), Errc::not_found, "end_allocate_to_pool of pool (5, 6)");
  TESSERA_OK(allocator->begin_allocate_to_pool(graph_pool, only(capturing)));
  expect_error(allocator->begin_allocate_to_pool(graph_pool, only(StreamId{2})), Errc::invalid_argument,
               "pool (1, 1), which is already being allocated to");
  expect_error(allocator->release_pool(graph_pool), Errc::invalid_argument,
               "release_pool of pool (1, 1), which is still being allocated to");
  TESSERA_OK(allocator->end_allocate_to_pool(graph_pool));
  expect_error(allocator->end_allocate_to_pool(graph_pool), Errc::not_found,
               "end_allocate_to_pool of pool (1, 1), which is not being allocated to");
  TESSERA_OK(allocator->release_pool(graph_pool));
  expect_error(allocator->release_pool(graph_pool), Errc::not_found, "release_pool of pool (1, 1)");
  const AllocatorStats after = allocator->stats();
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes);
  EXPECT_EQ(after.reserved_bytes, before.reserved_bytes);
  release(*allocator, live);
}

// A graph pool holds its memory against eager work until it is released; then the out-of-memory ladder's
// last step (release_cached_blocks) gives it back and the eager allocation fits.
TEST_P(EveryModelsPools, TheOutOfMemoryLadderFreesAReleasedPoolOnly) {
  for (bool released : {false, true}) {
    auto driver = sim_driver(100 * MiB);
    auto allocator = make(*driver);
    TESSERA_OK(allocator->begin_allocate_to_pool(graph_pool, only(capturing)));
    const Address captured = alloc(*allocator, 64 * MiB, capturing);
    release(*allocator, captured);
    TESSERA_OK(allocator->end_allocate_to_pool(graph_pool));
    if (released) TESSERA_OK(allocator->release_pool(graph_pool));
    auto eager = allocator->allocate(64 * MiB, default_stream);
    if (released) {
      ASSERT_TRUE(eager.ok()) << eager.error().message;
      release(*allocator, *eager);
    } else {
      ASSERT_FALSE(eager.ok());
      EXPECT_EQ(eager.error().code, Errc::out_of_memory);
      EXPECT_EQ(allocator->stats().num_ooms, 1u);
      // Still consistent: the pool still serves its graph.
      TESSERA_OK(allocator->begin_allocate_to_pool(graph_pool, only(capturing)));
      EXPECT_EQ(alloc(*allocator, 64 * MiB, capturing), captured);
      release(*allocator, captured);
      TESSERA_OK(allocator->end_allocate_to_pool(graph_pool));
      TESSERA_OK(allocator->release_pool(graph_pool));
      TESSERA_OK(allocator->release_pool(graph_pool));
    }
    expect_consistent(*allocator, *driver);
    TESSERA_OK(allocator->empty_cache());
    // Every page is back. (The failed eager allocation may leave `expandable` an address range that never got
    // a page: PyTorch keeps such a segment too, and it holds no memory.)
    EXPECT_EQ(driver->census().pages, 0u);
    EXPECT_EQ(driver->census().mappings, 0u);
    if (released) expect_empty(*driver);
  }
}

// While a capture is under way PyTorch does not synchronize, so the ladder's last step is skipped: the shared
// cache's free segment is not given back for the capture, which fails; after the capture it serves again.
TEST_P(EveryModelsPools, DuringACaptureTheSharedCacheIsNotFreedForThePool) {
  auto driver = sim_driver(64 * MiB);
  auto allocator = make(*driver);
  const Address cached = alloc(*allocator, 40 * MiB, capturing);
  release(*allocator, cached);
  TESSERA_OK(allocator->begin_allocate_to_pool(graph_pool, only(capturing)));
  auto captured = allocator->allocate(40 * MiB, capturing);
  ASSERT_FALSE(captured.ok());
  EXPECT_EQ(captured.error().code, Errc::out_of_memory);
  expect_consistent(*allocator, *driver);
  TESSERA_OK(allocator->end_allocate_to_pool(graph_pool));
  EXPECT_EQ(alloc(*allocator, 40 * MiB, capturing), cached) << "the shared cache kept its block";
  release(*allocator, cached);
  TESSERA_OK(allocator->release_pool(graph_pool));
  TESSERA_OK(allocator->empty_cache());
  expect_empty(*driver);
}

}  // namespace
}  // namespace tessera::testing
