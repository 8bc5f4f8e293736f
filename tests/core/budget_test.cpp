// The budget over a mapper on the sim driver, without the allocator: the limit, the room under it as
// chunks are created and released, and the limit a memory fraction sets.
#include "core/budget.hpp"

#include <gtest/gtest.h>

#include "driver/driver_fixtures.hpp"
#include "support/must.hpp"
#include "tessera/driver_decorators.hpp"
#include "tessera/drivers.hpp"

namespace tessera::core {
namespace {

using test_support::must;

constexpr Bytes granule = 2 * MiB;

struct BudgetTest : ::testing::Test {
  // A capacity that is not a whole number of granules: 64.5 of them.
  CapacityLimitDriver driver{must(make_sim_driver({.capacity = 80 * granule, .granularity = granule})).driver,
                             64 * granule + granule / 2};
  Observers observers;
  Mapper mapper{driver, observers};
  Budget budget{mapper};

  ChunkId create(std::uint32_t granules) {
    std::uint32_t size = granules;
    const ChunkId chunk = must(mapper.create_chunk(size));
    EXPECT_EQ(size, granules);
    mapper.pool_page(Page{chunk, granules, 0});  // held, pooled
    return chunk;
  }
};

TEST_F(BudgetTest, TheLimitIsTheCapacityInWholeGranules) {
  EXPECT_EQ(budget.limit(), 64 * granule);
  EXPECT_EQ(budget.free_bytes(), 64 * granule);
  EXPECT_EQ(budget.room(), 64u);
  EXPECT_EQ(budget.room_below_half(), 32u);
  EXPECT_FALSE(budget.above_half());
}

TEST_F(BudgetTest, TheRoomShrinksWithWhatIsHeldWhetherMappedOrPooled) {
  create(20);
  EXPECT_EQ(budget.room(), 44u);
  EXPECT_EQ(budget.room_below_half(), 12u);
  create(13);
  EXPECT_EQ(budget.room(), 31u);
  EXPECT_EQ(budget.room_below_half(), 0u);
  EXPECT_TRUE(budget.above_half());
  EXPECT_EQ(budget.free_bytes(), 31 * granule);
  must(mapper.release_pooled(0));
  EXPECT_EQ(budget.room(), 64u);
  EXPECT_FALSE(budget.above_half());
}

TEST_F(BudgetTest, AFractionLowersTheLimitToWholeGranulesAndNeverBelowOne) {
  budget.set_fraction(0.5);
  EXPECT_EQ(budget.limit(), 32 * granule);  // 32.25 granules, rounded down
  budget.set_fraction(0.3);
  EXPECT_EQ(budget.limit(), 19 * granule);  // 19.35
  budget.set_fraction(1e-9);
  EXPECT_EQ(budget.limit(), granule);
  budget.set_fraction(1.0);
  EXPECT_EQ(budget.limit(), 64 * granule);
}

TEST_F(BudgetTest, HoldingMoreThanALoweredLimitLeavesNoRoomAndNoWrapAround) {
  create(40);
  budget.set_fraction(0.25);
  EXPECT_EQ(budget.limit(), 16 * granule);
  EXPECT_EQ(budget.free_bytes(), 0u);
  EXPECT_EQ(budget.room(), 0u);
  EXPECT_EQ(budget.room_below_half(), 0u);
  EXPECT_TRUE(budget.above_half());
}

TEST_F(BudgetTest, TheShareOfTheLimitIsGarbageCollectionsTarget) {
  budget.set_fraction(0.5);
  EXPECT_EQ(budget.share(0.75), 24 * granule);
  EXPECT_EQ(budget.share(0.0), 0u);
}

}  // namespace
}  // namespace tessera::core
