// The replay engine's metrics, on hand-made traces whose answers are known.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <optional>

#include "tessera/replay.hpp"

namespace tessera {
namespace {

// One block live before the trace, then a few allocations and frees on one stream.
Trace small_trace() {
  Trace trace;
  trace.name = "small";
  trace.streams = {default_stream};
  trace.initial_blocks = {{0, 1 * MiB, 0}};
  trace.events = {
      TraceEvent::alloc(1, 4 * MiB, 0),  // 5 MiB live
      TraceEvent::alloc(2, 6 * MiB, 0),  // 11 MiB live: the peak
      TraceEvent::free(1, 4 * MiB, 0),
      TraceEvent::alloc(3, 3 * MiB, 0),
      TraceEvent::free(2, 6 * MiB, 0),
      TraceEvent::free(3, 3 * MiB, 0),
  };
  trace.block_count = 4;
  return trace;
}

// The same step three times, marked as iterations.
Trace repeating_trace() {
  Trace trace;
  trace.name = "repeating";
  trace.streams = {default_stream};
  BlockId next = 0;
  for (std::uint64_t iteration = 0; iteration < 3; ++iteration) {
    trace.events.push_back(TraceEvent::iteration(iteration));
    const BlockId a = next++;
    const BlockId b = next++;
    trace.events.push_back(TraceEvent::alloc(a, 7 * MiB, 0));
    trace.events.push_back(TraceEvent::alloc(b, 300 * KiB, 0));
    trace.events.push_back(TraceEvent::free(a, 7 * MiB, 0));
    trace.events.push_back(TraceEvent::free(b, 300 * KiB, 0));
  }
  trace.block_count = next;
  return trace;
}

ReplayResult must(Result<ReplayResult> result) {
  if (!result) throw std::runtime_error(describe(result.error()));
  return std::move(result).value();
}

TEST(Replay, MeasuresPeaksAndFragmentationAsDefined) {
  const Trace trace = small_trace();
  const ReplayResult result = must(replay(trace, {}));
  EXPECT_EQ(result.peak_allocated, 11 * MiB) << "initial blocks count towards the peak";
  EXPECT_GE(result.peak_reserved, 12 * MiB) << "at least the granules under the live bytes";
  EXPECT_LE(result.reserved_at_peak_allocated, result.peak_reserved);
  EXPECT_DOUBLE_EQ(result.frag_at_peak, 1.0 - 11.0 * MiB / static_cast<double>(result.peak_reserved));
  EXPECT_GT(result.avg_frag, 0.0);
  EXPECT_LT(result.avg_frag, 1.0);
  EXPECT_EQ(result.events, trace.events.size());
  EXPECT_FALSE(result.oom);
  EXPECT_GT(result.driver_calls.calls_of(DriverCall::create_chunk), 0u);
  EXPECT_GT(result.driver_time_ns, 0u) << "the sim driver charges modelled time";
  EXPECT_EQ(result.driver_calls.calls_of(DriverCall::release_chunk), 0u) << "a caching allocator keeps its pages";
}

TEST(Replay, MinCapacityFitsAndOneGranuleLessDoesNot) {
  const Trace trace = small_trace();
  for (const char* allocator : {"tessera", "pytorch", "expandable", "gmlake"}) {
    ReplayOptions options;
    options.allocator = allocator;
    const ReplayResult result = must(replay_with_min_capacity(trace, options));
    ASSERT_TRUE(result.min_capacity.has_value()) << allocator;
    const Bytes fits = *result.min_capacity;
    EXPECT_EQ(fits % (2 * MiB), 0u) << allocator;
    EXPECT_GE(fits, 12 * MiB) << allocator;
    ASSERT_TRUE(result.overhead.has_value());
    EXPECT_DOUBLE_EQ(*result.overhead, static_cast<double>(fits) / (11.0 * MiB) - 1.0);
    options.capacity = fits;
    EXPECT_FALSE(must(replay(trace, options)).oom) << allocator << " at its min capacity";
    options.capacity = fits - 2 * MiB;
    EXPECT_TRUE(must(replay(trace, options)).oom) << allocator << " one granule below its min capacity";
  }
}

TEST(Replay, OutOfMemoryEndsTheReplayAndSaysWhere) {
  ReplayOptions options;
  options.capacity = 6 * MiB;
  const ReplayResult result = must(replay(small_trace(), options));
  EXPECT_TRUE(result.oom);
  ASSERT_TRUE(result.oom_event.has_value());
  EXPECT_EQ(*result.oom_event, 1u) << "the 6 MiB allocation does not fit beside 5 MiB live";
  EXPECT_NE(result.oom_message.find("out of memory"), std::string::npos);
  EXPECT_EQ(result.events, 1u);
}

TEST(Replay, CountsDriverCallsPerIterationAndTesseraReachesZero) {
  const ReplayResult result = must(replay(repeating_trace(), {}));
  ASSERT_EQ(result.calls_per_iteration.size(), 3u);
  EXPECT_GT(result.calls_per_iteration[0], 0u) << "the first iteration maps its pages";
  EXPECT_EQ(result.calls_per_iteration[1], 0u);
  EXPECT_EQ(result.calls_per_iteration[2], 0u);
}

// The sim driver as an Ascend card: the models make no set-access call there (ACL has none), and the result
// says which platform the sim stood for. Only the sim models a platform.
TEST(Replay, AscendPlatformOfTheSimDriverHasNoSetAccess) {
  ReplayOptions cuda;
  cuda.allocator = "pytorch";
  ReplayOptions ascend = cuda;
  ascend.sim_platform = SimPlatform::ascend;
  const ReplayResult on_cuda = must(replay(repeating_trace(), cuda));
  const ReplayResult on_ascend = must(replay(repeating_trace(), ascend));
  EXPECT_GT(on_cuda.driver_calls.calls_of(DriverCall::set_access), 0u);
  EXPECT_EQ(on_ascend.driver_calls.calls_of(DriverCall::set_access), 0u);
  EXPECT_EQ(on_cuda.driver, "sim");
  EXPECT_EQ(on_ascend.driver, "sim (ascend)");
  EXPECT_EQ(on_ascend.peak_reserved, on_cuda.peak_reserved);

  ascend.driver = "host";
  auto host = replay(repeating_trace(), ascend);
  ASSERT_FALSE(host.ok());
  EXPECT_NE(host.error().message.find("sim driver only"), std::string::npos);
}

// The per_byte latency model changes what the driver time is, never what the allocator does; the result
// names it. PyTorch's model creates a 2 MiB segment for the initial block and one of 20 MiB for the rest.
TEST(Replay, PerByteLatencyModelChargesLargeChunksMore) {
  ReplayOptions per_call;
  per_call.allocator = "pytorch";
  ReplayOptions per_byte = per_call;
  per_byte.sim_latency = LatencyScaling::per_byte;
  const ReplayResult by_call = must(replay(small_trace(), per_call));
  const ReplayResult by_byte = must(replay(small_trace(), per_byte));
  EXPECT_EQ(by_call.driver, "sim");
  EXPECT_EQ(by_byte.driver, "sim (per_byte)");
  EXPECT_EQ(by_byte.driver_calls.calls, by_call.driver_calls.calls);
  EXPECT_EQ(by_byte.peak_reserved, by_call.peak_reserved);
  ASSERT_EQ(by_call.driver_calls.calls_of(DriverCall::create_chunk), 2u);
  // The 2 MiB create costs 193 us in both; the 20 MiB one 10 + 10 x 183 us instead of 193 us.
  EXPECT_EQ(by_byte.driver_time_ns, by_call.driver_time_ns + (1'840'000u - 193'000u));

  per_byte.driver = "host";
  auto host = replay(small_trace(), per_byte);
  ASSERT_FALSE(host.ok());
  EXPECT_NE(host.error().message.find("sim driver only"), std::string::npos);
}

TEST(Replay, IdealIsTheLiveBytesRoundedToTheGranule) {
  const ReplayResult ideal = ideal_result(small_trace(), 2 * MiB);
  EXPECT_EQ(ideal.peak_allocated, 11 * MiB);
  EXPECT_EQ(ideal.peak_reserved, 11 * MiB);
  EXPECT_EQ(ideal.min_capacity, 12 * MiB);
  EXPECT_DOUBLE_EQ(*ideal.overhead, 12.0 / 11.0 - 1.0);
}

TEST(Replay, KeepsAddressesAndTheTesseraStateWhenAsked) {
  ReplayOptions options;
  options.keep_state = true;
  const ReplayResult tessera = must(replay(small_trace(), options));
  ASSERT_EQ(tessera.addresses.size(), 4u);
  for (Address address : tessera.addresses) EXPECT_NE(address, 0u);
  EXPECT_TRUE(tessera.final_state.has_value());
  options.allocator = "pytorch";
  const ReplayResult pytorch = must(replay(small_trace(), options));
  EXPECT_EQ(pytorch.addresses.size(), 4u);
  EXPECT_FALSE(pytorch.final_state.has_value()) << "only Tessera's allocator has a snapshot of its own";
}

TEST(Replay, BadInputIsANamedError) {
  Trace broken = small_trace();
  broken.events.push_back(TraceEvent::free(3, 3 * MiB, 0));  // a second free of block 3
  auto refused = replay(broken, {});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, Errc::invalid_argument);

  ReplayOptions unknown;
  unknown.allocator = "jemalloc";
  auto named = replay(small_trace(), unknown);
  ASSERT_FALSE(named.ok());
  EXPECT_NE(named.error().message.find("'jemalloc'"), std::string::npos);
  EXPECT_NE(named.error().message.find("tessera"), std::string::npos);

  ReplayOptions driver;
  driver.driver = "cuda";
  auto no_device = replay(small_trace(), driver);
  ASSERT_FALSE(no_device.ok());
  EXPECT_NE(no_device.error().message.find("sim or host"), std::string::npos);
}

// A request of 2^63 - 1 bytes, the largest a trace's int64 size holds, between two ordinary ones.
Trace huge_request_trace() {
  Trace trace;
  trace.name = "huge";
  trace.streams = {default_stream};
  trace.events = {
      TraceEvent::alloc(0, 1 * MiB, 0),
      TraceEvent::alloc(1, (Bytes{1} << 63) - 1, 0),
      TraceEvent::free(0, 1 * MiB, 0),
  };
  trace.block_count = 2;
  return trace;
}

TEST(Replay, RefusesAGranuleUnderTheHostPage) {
  // The sim driver takes any power of two, but Tessera's allocator maps pages of a few granules: at 64 B
  // it would map a page for every 64 B of a trace.
  for (const Bytes granule : {Bytes{1}, Bytes{64}, Bytes{2048}, 3 * KiB}) {
    ReplayOptions options;
    options.granularity = granule;
    auto refused = replay(small_trace(), options);
    ASSERT_FALSE(refused.ok()) << granule;
    EXPECT_EQ(refused.error().code, Errc::invalid_argument);
    EXPECT_NE(refused.error().message.find(fmt::format("granularity {} bytes", granule)), std::string::npos)
        << refused.error().message;
    EXPECT_NE(refused.error().message.find("at least 4096 bytes"), std::string::npos) << refused.error().message;
  }
  ReplayOptions page;
  page.granularity = min_replay_granularity;
  EXPECT_FALSE(must(replay(small_trace(), page)).oom);
}

TEST(Replay, ARequestLargerThanAnyCapacityIsEachAllocatorsOutOfMemoryAnswer) {
  const Trace trace = huge_request_trace();
  for (const char* driver : {"sim", "host"}) {
    for (const std::optional<Bytes> capacity : {std::optional<Bytes>{}, std::optional<Bytes>{80 * GiB}}) {
      if (driver == std::string_view("host") && !capacity) continue;  // unlimited there is 16 TiB of address space
      for (const char* allocator : {"tessera", "pytorch", "expandable", "gmlake"}) {
        ReplayOptions options;
        options.allocator = allocator;
        options.driver = driver;
        options.capacity = capacity;
        auto result = replay(trace, options);
        ASSERT_TRUE(result.ok()) << allocator << " on " << driver << ": " << describe(result.error());
        EXPECT_TRUE(result->oom) << allocator << " on " << driver;
        EXPECT_EQ(result->oom_event, std::optional<std::size_t>{1}) << allocator << " on " << driver;
        EXPECT_EQ(result->peak_allocated, 1 * MiB) << allocator;
        EXPECT_NE(result->oom_message.find("out of memory"), std::string::npos) << result->oom_message;
      }
    }
  }
  // The reference lines are the trace's own figures, with no capacity to run out of.
  const ReplayResult ideal = ideal_result(trace, 2 * MiB);
  EXPECT_TRUE(ideal.failure.empty()) << ideal.failure;
  EXPECT_EQ(ideal.peak_allocated, (Bytes{1} << 63) - 1 + 1 * MiB);
  EXPECT_EQ(ideal.min_capacity, (Bytes{1} << 63) + 2 * MiB);
  EXPECT_TRUE(ideal_cache_result(trace, 2 * MiB, 10).failure.empty());
}

TEST(Replay, MinCapacityOfATraceThatNeverFitsStaysUnknown) {
  for (const char* allocator : {"tessera", "pytorch", "expandable", "gmlake"}) {
    ReplayOptions options;
    options.allocator = allocator;
    const ReplayResult result = must(replay_with_min_capacity(huge_request_trace(), options));
    EXPECT_TRUE(result.oom) << allocator;
    EXPECT_FALSE(result.min_capacity.has_value()) << allocator;
  }
}

TEST(Replay, LiveBytesPast2To64AreAFailureOfTheReferenceLinesThatNamesTheEvent) {
  Trace trace;
  trace.name = "past";
  trace.streams = {default_stream};
  const Bytes most = (Bytes{1} << 63) - 1;
  trace.events = {TraceEvent::alloc(0, most, 0), TraceEvent::alloc(1, most, 0), TraceEvent::alloc(2, most, 0)};
  trace.block_count = 3;
  for (const ReplayResult& line : {ideal_result(trace, 2 * MiB), ideal_cache_result(trace, 2 * MiB, 10)}) {
    EXPECT_EQ(line.failure, fmt::format("event 2 (alloc of {} bytes): the live bytes pass 2^64", most)) << line.allocator;
    EXPECT_FALSE(line.min_capacity.has_value());
  }
  // A replay answers out of memory at the first of them.
  EXPECT_EQ(must(replay(trace, {})).oom_event, std::optional<std::size_t>{0});
}

}  // namespace
}  // namespace tessera
