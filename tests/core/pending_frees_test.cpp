// The pending frees over a mapper on the sim driver, without the allocator: a block other streams used
// waits for an event on each, drains only once they completed, and no failure loses a block or an event.
#include "core/pending_frees.hpp"

#include <gtest/gtest.h>

#include "driver/driver_fixtures.hpp"
#include "support/must.hpp"
#include "tessera/driver_decorators.hpp"
#include "tessera/drivers.hpp"

namespace tessera::core {
namespace {

using test_support::must;

constexpr Bytes granule = 2 * MiB;

Block live_block(Address address, Bytes requested) {
  Block block;
  block.address = address;
  block.size = 512;
  block.requested = requested;
  block.live = true;
  return block;
}
const StreamId own{1};
const StreamId side{2};
const StreamId copy{3};

struct PendingFreesTest : ::testing::Test {
  FaultInjectingDriver driver{must(make_sim_driver({.capacity = 64 * granule, .granularity = granule})).driver};
  Observers observers;
  Mapper mapper{driver, observers};
  PendingFrees pending{mapper};
  Arena arena{0, own, SizePool::large, default_tag, granule};
  Block block = live_block(0x1000, 100);

  StreamControl& streams() { return *driver.stream_control(); }
  BlockEvent freed() const { return BlockEvent{block.address, block.size, block.requested, own, SizePool::large, true}; }
};

TEST_F(PendingFreesTest, AStreamRecordedTwiceIsOneUser) {
  EXPECT_EQ(pending.users_of(&block), nullptr);
  pending.record_stream(&block, side);
  pending.record_stream(&block, copy);
  pending.record_stream(&block, side);
  const auto* users = pending.users_of(&block);
  ASSERT_NE(users, nullptr);
  EXPECT_EQ(*users, (std::vector<StreamId>{side, copy}));
  pending.forget_users(&block);
  EXPECT_EQ(pending.users_of(&block), nullptr);
}

TEST_F(PendingFreesTest, ABlockLeavesOnlyOnceTheWorkOfEveryUserCompleted) {
  streams().hold(side);
  streams().hold(copy);
  const std::vector<StreamId> users{side, copy};
  TESSERA_OK(pending.wait_for(&arena, &block, users, freed()));
  EXPECT_FALSE(block.live);
  EXPECT_TRUE(block.pending);
  EXPECT_TRUE(pending.waits(&block));
  EXPECT_EQ(driver.census().events, 2u);

  EXPECT_TRUE(pending.drain(false).completed.empty());
  streams().complete(side);
  EXPECT_TRUE(pending.drain(false).completed.empty()) << "the copy stream's work is still queued";
  streams().complete(copy);
  PendingFrees::Drained drained = pending.drain(false);
  TESSERA_OK(drained.failure);
  ASSERT_EQ(drained.completed.size(), 1u);
  EXPECT_EQ(drained.completed[0].block, &block);
  EXPECT_EQ(drained.completed[0].arena, &arena);
  ASSERT_TRUE(drained.completed[0].freed.has_value());
  EXPECT_EQ(drained.completed[0].freed->address, block.address);
  EXPECT_TRUE(pending.empty());
  EXPECT_EQ(mapper.spare_events(), 2u) << "every event kept once it completed";
  EXPECT_EQ(driver.census().events, 2u) << "and none other";
  mapper.release_spare_events();
  EXPECT_EQ(driver.census().events, 0u);
}

// A completed free's events are recorded again by the next free: a record and a query for each, no create
// and no destroy (PyTorch's event pool).
TEST_F(PendingFreesTest, TheNextFreeRecordsTheSpareEventsAgain) {
  streams().hold(side);
  TESSERA_OK(pending.wait_for(&arena, &block, std::vector<StreamId>{side}, freed()));
  streams().complete(side);
  ASSERT_EQ(pending.drain(false).completed.size(), 1u);
  ASSERT_EQ(mapper.spare_events(), 1u);
  streams().hold(side);
  block.live = true;
  TESSERA_OK(pending.wait_for(&arena, &block, std::vector<StreamId>{side}, freed()));
  EXPECT_EQ(mapper.spare_events(), 0u);
  EXPECT_EQ(driver.census().events, 1u) << "the spare was recorded again, none created";
  EXPECT_TRUE(pending.drain(false).completed.empty()) << "recorded anew: the side stream's new work is still queued";
  streams().complete(side);
  EXPECT_EQ(pending.drain(false).completed.size(), 1u);
  EXPECT_EQ(mapper.spare_events(), 1u);
  EXPECT_EQ(driver.census().events, 1u) << "kept again, not destroyed";
}

// Where events are not reusable_events (Ascend's plain events), a completed one is destroyed, not kept.
TEST(PendingFreesOnAscend, ACompletedEventIsDestroyedWhereEventsAreNotReusable) {
  FaultInjectingDriver driver{
      must(make_sim_driver({.capacity = 64 * granule, .granularity = granule, .platform = SimPlatform::ascend}))
          .driver};
  ASSERT_FALSE(driver.capabilities().reusable_events);
  Observers observers;
  Mapper mapper{driver, observers};
  PendingFrees pending{mapper};
  Arena arena{0, own, SizePool::large, default_tag, granule};
  Block block = live_block(0x1000, 100);
  const BlockEvent freed{block.address, block.size, block.requested, own, SizePool::large, true};
  TESSERA_OK(pending.wait_for(&arena, &block, std::vector<StreamId>{side}, freed));
  EXPECT_EQ(driver.census().events, 1u);
  ASSERT_EQ(pending.drain(false).completed.size(), 1u);
  EXPECT_EQ(mapper.spare_events(), 0u);
  EXPECT_EQ(driver.census().events, 0u);
}

// Spares are bounded: a burst of frees waiting at once leaves at most 1,024 events behind, the rest destroyed.
TEST_F(PendingFreesTest, AtMostSoManySpareEventsAreKept) {
  constexpr std::size_t burst = 1100;
  std::vector<Block> blocks;
  blocks.reserve(burst);
  for (std::size_t i = 0; i < burst; ++i) blocks.push_back(live_block(0x1000 + i * 512, 512));
  for (Block& each : blocks) TESSERA_OK(pending.wait_for(&arena, &each, std::vector<StreamId>{side}, freed()));
  EXPECT_EQ(driver.census().events, burst);
  EXPECT_EQ(pending.drain(false).completed.size(), burst);
  EXPECT_EQ(mapper.spare_events(), 1024u);
  EXPECT_EQ(driver.census().events, 1024u) << "the others destroyed";
}

// A spare whose record fails is destroyed, not kept: the failure may have left it in any state.
TEST_F(PendingFreesTest, ASpareEventWhoseRecordFailsIsDestroyed) {
  TESSERA_OK(pending.wait_for(&arena, &block, std::vector<StreamId>{side}, freed()));
  ASSERT_EQ(pending.drain(false).completed.size(), 1u);
  ASSERT_EQ(mapper.spare_events(), 1u);
  block.live = true;
  block.pending = false;
  driver.fail(DriverCall::record_event, 1);
  EXPECT_FALSE(pending.wait_for(&arena, &block, std::vector<StreamId>{side}, freed()));
  EXPECT_TRUE(block.live);
  EXPECT_EQ(mapper.spare_events(), 0u);
  EXPECT_EQ(driver.census().events, 0u);
}

TEST_F(PendingFreesTest, DrainingWithWaitTakesEveryBlock) {
  streams().hold(side);
  Block other = live_block(0x9000, 512);
  TESSERA_OK(pending.wait_for(&arena, &block, std::vector<StreamId>{side}, freed()));
  TESSERA_OK(pending.wait_for(&arena, &other, std::vector<StreamId>{side}, freed()));
  PendingFrees::Drained drained = pending.drain(true);
  TESSERA_OK(drained.failure);
  EXPECT_EQ(drained.completed.size(), 2u);
  EXPECT_TRUE(pending.empty());
  EXPECT_EQ(driver.census().events, mapper.spare_events());
  EXPECT_EQ(mapper.spare_events(), 2u);
}

TEST_F(PendingFreesTest, AFailedEventRecordChangesNothing) {
  pending.record_stream(&block, side);
  pending.record_stream(&block, copy);
  driver.fail(DriverCall::record_event, 2);
  EXPECT_FALSE(pending.wait_for(&arena, &block, *pending.users_of(&block), freed()));
  EXPECT_TRUE(block.live) << "the caller may free it again";
  EXPECT_FALSE(block.pending);
  EXPECT_TRUE(pending.empty());
  EXPECT_NE(pending.users_of(&block), nullptr) << "its users are still known";
  EXPECT_EQ(driver.census().events, 0u) << "the event recorded before the failure is destroyed";
  TESSERA_OK(pending.wait_for(&arena, &block, *pending.users_of(&block), freed()));
  EXPECT_EQ(pending.users_of(&block), nullptr);
}

TEST_F(PendingFreesTest, AFailedQueryProvesNothingAndAFailedWaitStopsTheDrainLosingNothing) {
  streams().hold(side);
  Block other = live_block(0x9000, 512);
  TESSERA_OK(pending.wait_for(&arena, &block, std::vector<StreamId>{side}, freed()));
  TESSERA_OK(pending.wait_for(&arena, &other, std::vector<StreamId>{side}, freed()));
  streams().complete(side);
  driver.fail(DriverCall::query_event, 1, FaultInjectingDriver::Repeat::from_then_on);
  EXPECT_TRUE(pending.drain(false).completed.empty());
  EXPECT_EQ(pending.size(), 2u);
  driver.clear_all();
  streams().hold(side);
  driver.fail(DriverCall::synchronize_event, 2);
  PendingFrees::Drained drained = pending.drain(true);
  EXPECT_FALSE(drained.failure);
  EXPECT_EQ(drained.completed.size(), 1u) << "the block before the failed wait is done";
  EXPECT_EQ(pending.size(), 1u) << "the other still waits";
  drained = pending.drain(true);
  TESSERA_OK(drained.failure);
  EXPECT_EQ(drained.completed.size(), 1u);
  EXPECT_EQ(driver.census().events, 2u) << "both kept as spares, none lost";
  EXPECT_EQ(mapper.spare_events(), 2u);
}

TEST_F(PendingFreesTest, ABlockToRetryAndARequeuedOneDrainWithoutEvents) {
  pending.retry_later(nullptr, &block);
  EXPECT_TRUE(block.pending);
  PendingFrees::Drained drained = pending.drain(false);
  ASSERT_EQ(drained.completed.size(), 1u);
  EXPECT_FALSE(drained.completed[0].freed.has_value());
  pending.requeue(std::move(drained.completed[0]));
  EXPECT_TRUE(pending.waits(&block));
  EXPECT_EQ(pending.drain(false).completed.size(), 1u);
}

TEST_F(PendingFreesTest, TeardownSeesEveryUserStreamAndEveryEvent) {
  streams().hold(side);
  Block other = live_block(0x9000, 512);
  pending.record_stream(&other, copy);
  TESSERA_OK(pending.wait_for(&arena, &block, std::vector<StreamId>{side, copy}, freed()));
  EXPECT_EQ(pending.user_streams(), std::vector<StreamId>{copy});
  EXPECT_EQ(pending.all_events().size(), 2u);
  mapper.destroy_events(pending.all_events());
}

}  // namespace
}  // namespace tessera::core
