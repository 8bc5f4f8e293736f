// The private pools' bookkeeping (core/private_pools.hpp) on its own: uses, the active list and its order,
// release, reuse of an index, and the refusals, each naming the pool.
#include "core/private_pools.hpp"

#include <gtest/gtest.h>

#include <string>

namespace tessera::core {
namespace {

constexpr PoolId graph_a{1, 7};
constexpr PoolId graph_b{1, 8};
const StreamId side{0x51de};

StreamFilter only(StreamId stream) {
  return [stream](StreamId asked) { return asked == stream; };
}
StreamFilter every_stream() {
  return [](StreamId) { return true; };
}

TEST(PrivatePools, BeginningAPoolThatExistsAddsAUseAndKeepsItsIndex) {
  PrivatePools pools;
  const auto first = pools.begin(graph_a, only(default_stream), PoolKind::graph).value();
  EXPECT_TRUE(first.made);
  EXPECT_NE(first.index, shared_cache);
  const auto second = pools.begin(graph_a, only(side), PoolKind::graph).value();
  EXPECT_FALSE(second.made);
  EXPECT_EQ(second.index, first.index);
  EXPECT_EQ(pools.size(), 1u);
  // Two uses: the first release keeps the pool, the second releases it.
  ASSERT_TRUE(pools.end(graph_a).ok());
  ASSERT_TRUE(pools.end(graph_a).ok());
  EXPECT_EQ(pools.release(graph_a).value(), std::nullopt);
  EXPECT_EQ(pools.release(graph_a).value(), first.index);
  EXPECT_EQ(pools.size(), 0u);
  EXPECT_EQ(pools.check(), std::nullopt);
}

TEST(PrivatePools, AnAllocationGoesToTheFirstActivePoolThatAcceptsItsStream) {
  PrivatePools pools;
  EXPECT_EQ(pools.pool_for(default_stream), shared_cache) << "no pool active";
  const PrivatePoolIndex a = pools.begin(graph_a, only(side), PoolKind::graph).value().index;
  EXPECT_EQ(pools.pool_for(default_stream), shared_cache) << "the filter refuses it";
  EXPECT_EQ(pools.pool_for(side), a);
  const PrivatePoolIndex b = pools.begin(graph_b, every_stream(), PoolKind::graph).value().index;
  EXPECT_EQ(pools.pool_for(side), a) << "begun first, accepted first";
  EXPECT_EQ(pools.pool_for(default_stream), b);
  ASSERT_EQ(pools.end(graph_a).value(), a);
  EXPECT_EQ(pools.pool_for(side), b);
  ASSERT_EQ(pools.end(graph_b).value(), b);
  EXPECT_FALSE(pools.any_active());
  EXPECT_EQ(pools.pool_for(side), shared_cache);
}

TEST(PrivatePools, EndStopsTheLatestBeginOfThatPool) {
  PrivatePools pools;
  const PrivatePoolIndex a = pools.begin(graph_a, only(default_stream), PoolKind::graph).value().index;
  ASSERT_TRUE(pools.begin(graph_a, only(side), PoolKind::graph).ok());
  ASSERT_TRUE(pools.end(graph_a).ok());
  EXPECT_EQ(pools.pool_for(default_stream), a) << "the first capture still allocates";
  EXPECT_EQ(pools.pool_for(side), shared_cache) << "the second one ended";
}

TEST(PrivatePools, RefusalsNameThePoolAndChangeNothing) {
  PrivatePools pools;
  auto ended = pools.end(graph_a);
  ASSERT_FALSE(ended.ok());
  EXPECT_EQ(ended.error().code, Errc::not_found);
  EXPECT_NE(ended.error().message.find("pool (1, 7)"), std::string::npos) << ended.error().message;
  auto released = pools.release(graph_a);
  ASSERT_FALSE(released.ok());
  EXPECT_EQ(released.error().code, Errc::not_found);
  EXPECT_NE(released.error().message.find("pool (1, 7)"), std::string::npos) << released.error().message;

  const PrivatePoolIndex a = pools.begin(graph_a, only(default_stream), PoolKind::graph).value().index;
  auto still_active = pools.release(graph_a);
  ASSERT_FALSE(still_active.ok()) << "its last use, while allocations go to it";
  EXPECT_EQ(still_active.error().code, Errc::invalid_argument);
  EXPECT_NE(still_active.error().message.find("still being allocated to"), std::string::npos);
  EXPECT_EQ(pools.pool_for(default_stream), a) << "still active";

  auto other_kind = pools.begin(graph_a, only(side), PoolKind::plain);
  ASSERT_FALSE(other_kind.ok());
  EXPECT_EQ(other_kind.error().code, Errc::invalid_argument);
  EXPECT_NE(other_kind.error().message.find("graph pool"), std::string::npos) << other_kind.error().message;
  EXPECT_EQ(pools.pool_for(side), shared_cache) << "the refused begin added nothing";
  EXPECT_EQ(pools.check(), std::nullopt);
}

TEST(PrivatePools, AReleasedIndexGoesToANewPoolOnlyOnceReused) {
  PrivatePools pools;
  const PrivatePoolIndex a = pools.begin(graph_a, only(default_stream), PoolKind::graph).value().index;
  ASSERT_TRUE(pools.end(graph_a).ok());
  ASSERT_EQ(pools.release(graph_a).value(), a);
  EXPECT_EQ(pools.kind_of(a), std::nullopt);
  EXPECT_EQ(pools.released(), std::vector<PrivatePoolIndex>{a});
  // Not reused yet (its blocks may be live): a new pool, even of the same id, gets another index.
  const PrivatePoolIndex b = pools.begin(graph_a, only(default_stream), PoolKind::plain).value().index;
  EXPECT_NE(b, a);
  EXPECT_EQ(pools.kind_of(b), PoolKind::plain);
  pools.reuse(a);
  EXPECT_TRUE(pools.released().empty());
  const PrivatePoolIndex c = pools.begin(graph_b, only(side), PoolKind::graph).value().index;
  EXPECT_EQ(c, a);
  EXPECT_EQ(pools.id_of(c), graph_b);
  EXPECT_EQ(pools.check(), std::nullopt);
}

}  // namespace
}  // namespace tessera::core
