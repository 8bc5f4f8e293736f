// Replaying traces with tags, pause and resume: Tessera and the memory-saver model give the paused memory
// back, the expandable model cannot and says so, out of memory on resume ends the replay at that event, and
// the report shows the pause figures only for such traces.
#include <gtest/gtest.h>

#include <string>

#include "tessera/replay.hpp"
#include "tessera/report.hpp"

namespace tessera {
namespace {

// 64 MiB of weights (backed up) and 32 MiB of cache (discarded) are paused while 96 MiB of training is live.
Trace colocated_trace() {
  Trace trace;
  trace.name = "colocated";
  trace.streams = {default_stream};
  trace.tags = {"default", "replay_weights", "replay_cache"};
  trace.events = {
      TraceEvent::tagged_alloc(0, 64 * MiB, 0, 1),
      TraceEvent::tagged_alloc(1, 32 * MiB, 0, 2),
      TraceEvent::pause(1, true),
      TraceEvent::pause(2, false),
      TraceEvent::alloc(2, 96 * MiB, 0),
      TraceEvent::free(2, 96 * MiB, 0),
      TraceEvent::resume(1),
      TraceEvent::resume(2),
  };
  trace.block_count = 3;
  return trace;
}

ReplayResult replayed(const Trace& trace, std::string allocator, std::optional<Bytes> capacity = std::nullopt) {
  ReplayOptions options;
  options.allocator = std::move(allocator);
  options.capacity = capacity;
  auto result = capacity ? replay(trace, options) : replay_with_min_capacity(trace, options);
  EXPECT_TRUE(result.ok()) << result.error().message;
  return result ? *result : ReplayResult{};
}

TEST(PauseReplay, TesseraNeedsOnlyTheResidentBytes) {
  const ReplayResult result = replayed(colocated_trace(), "tessera");
  EXPECT_EQ(result.pauses, 2u);
  EXPECT_EQ(result.resumes, 2u);
  EXPECT_FALSE(result.pause_unsupported);
  ASSERT_TRUE(result.min_capacity.has_value());
  EXPECT_LE(*result.min_capacity, 100 * MiB) << "96 MiB resident at most, not the 192 MiB live";
  // At a capacity of the resident bytes the paused memory serves the training: no chunk grows past what fits
  // (unlimited, the training's chunk grows past its block while paused, and the surplus counts as reserved).
  const ReplayResult at_capacity = replayed(colocated_trace(), "tessera", 100 * MiB);
  EXPECT_FALSE(at_capacity.oom);
  ASSERT_TRUE(at_capacity.peak_reserved_while_paused.has_value());
  EXPECT_LE(*at_capacity.peak_reserved_while_paused, 100 * MiB);
  EXPECT_GT(result.pause_driver_calls.calls_of(DriverCall::copy_to_host), 0u) << "the weights are backed up";
  EXPECT_GT(result.resume_driver_calls.calls_of(DriverCall::copy_to_device), 0u);
  EXPECT_GT(result.pause_time_ns + result.resume_time_ns, 0u);
}

TEST(PauseReplay, TheMemorySaverModelPausesPerAllocation) {
  const ReplayResult result = replayed(colocated_trace(), "memory-saver");
  EXPECT_FALSE(result.pause_unsupported);
  ASSERT_TRUE(result.min_capacity.has_value());
  EXPECT_EQ(*result.min_capacity, 96 * MiB);
  const CallTally& pause = result.pause_driver_calls;
  EXPECT_EQ(pause.calls_of(DriverCall::synchronize_device), 2u);  // once per tag
  EXPECT_EQ(pause.calls_of(DriverCall::allocate_host), 1u);
  EXPECT_EQ(pause.calls_of(DriverCall::copy_to_host), 1u);
  EXPECT_EQ(pause.calls_of(DriverCall::unmap), 2u);
  EXPECT_EQ(pause.calls_of(DriverCall::release_chunk), 2u);
  const CallTally& resume = result.resume_driver_calls;
  EXPECT_EQ(resume.calls_of(DriverCall::create_chunk), 2u);
  EXPECT_EQ(resume.calls_of(DriverCall::map), 2u);
  EXPECT_EQ(resume.calls_of(DriverCall::copy_to_device), 1u);
  EXPECT_EQ(resume.calls_of(DriverCall::free_host), 1u);
}

TEST(PauseReplay, TheExpandableModelCannotPauseAndKeepsItsMemory) {
  const ReplayResult result = replayed(colocated_trace(), "expandable");
  EXPECT_TRUE(result.pause_unsupported);
  EXPECT_EQ(result.pauses, 2u);
  ASSERT_TRUE(result.min_capacity.has_value());
  EXPECT_GE(*result.min_capacity, 192 * MiB);
  ASSERT_TRUE(result.peak_reserved_while_paused.has_value());
  EXPECT_GE(*result.peak_reserved_while_paused, 192 * MiB);
  EXPECT_EQ(result.pause_driver_calls.total_calls(), 0u);
  EXPECT_NE(format_table(std::span<const ReplayResult>(&result, 1)).find("cannot pause"), std::string::npos);
}

TEST(PauseReplay, OutOfMemoryOnResumeEndsTheReplayThere) {
  Trace trace = colocated_trace();
  trace.events.erase(trace.events.begin() + 5);  // the training block stays live through the resume
  for (const char* allocator : {"tessera", "memory-saver"}) {
    const ReplayResult result = replayed(trace, allocator, 150 * MiB);
    EXPECT_TRUE(result.oom) << allocator;
    EXPECT_EQ(result.oom_event, std::optional<std::size_t>(5)) << allocator << ": the resume of the weights";
  }
}

TEST(PauseReplay, UntaggedReportsAreUnchanged) {
  Trace trace;
  trace.name = "plain";
  trace.streams = {default_stream};
  trace.events = {TraceEvent::alloc(0, 4 * MiB, 0), TraceEvent::free(0, 4 * MiB, 0)};
  trace.block_count = 1;
  const ReplayResult plain = replayed(trace, "tessera");
  EXPECT_FALSE(plain.peak_reserved_while_paused.has_value());
  const std::string json = format_json_report(std::span<const ReplayResult>(&plain, 1));
  EXPECT_EQ(json.find("\"pause\""), std::string::npos);
  EXPECT_EQ(json.find("allocate_host"), std::string::npos);
  EXPECT_EQ(format_table(std::span<const ReplayResult>(&plain, 1)).find("pause/resume"), std::string::npos);

  const ReplayResult tagged = replayed(colocated_trace(), "memory-saver");
  const std::string tagged_json = format_json_report(std::span<const ReplayResult>(&tagged, 1));
  EXPECT_NE(tagged_json.find("\"peak_reserved_while_paused\""), std::string::npos);
  EXPECT_NE(tagged_json.find("\"allocate_host\": 1"), std::string::npos) << tagged_json;
}

}  // namespace
}  // namespace tessera
