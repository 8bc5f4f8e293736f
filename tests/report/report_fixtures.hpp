// A small replay for the report tests: one hand-made trace with iterations, replayed with Tessera (min
// capacity included, series kept) beside the ideal line.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "tessera/replay.hpp"
#include "tessera/trace.hpp"

namespace tessera::test {

// Two iterations: activations grow and are freed in reverse; one block is live before the trace.
inline Trace small_trace(std::string name = "small") {
  Trace trace;
  trace.name = std::move(name);
  trace.streams = {StreamId{0}};
  trace.initial_blocks = {{0, 4 * MiB, 0}};
  BlockId next = 1;
  for (std::uint64_t iteration = 0; iteration < 2; ++iteration) {
    trace.events.push_back(TraceEvent::iteration(iteration));
    std::vector<BlockId> live;
    for (std::uint64_t layer = 0; layer < 3; ++layer) {
      const std::uint64_t size = (layer + 2) * MiB + 512 * iteration;
      trace.events.push_back(TraceEvent::alloc(next, size, 0));
      live.push_back(next++);
    }
    for (std::uint64_t layer = 3; layer-- > 0;) {
      trace.events.push_back(TraceEvent::free(live[layer], (layer + 2) * MiB + 512 * iteration, 0));
    }
  }
  trace.block_count = next;
  return trace;
}

inline std::vector<ReplayResult> small_results(std::size_t series_points = 50) {
  const Trace trace = small_trace();
  ReplayOptions options;
  options.allocator = "tessera";
  options.series_points = series_points;
  auto replayed = replay_with_min_capacity(trace, options);
  EXPECT_TRUE(replayed.ok()) << (replayed ? "" : describe(replayed.error()));
  std::vector<ReplayResult> results;
  if (replayed) results.push_back(*replayed);
  results.push_back(ideal_result(trace, options.granularity));
  return results;
}

// A replay of `trace` by `allocator` that failed with `failure`, as run_replays reports one.
inline ReplayResult failed_result(std::string trace, std::string allocator, std::string failure) {
  ReplayResult failed;
  failed.trace = std::move(trace);
  failed.allocator = std::move(allocator);
  failed.failure = std::move(failure);
  return failed;
}

}  // namespace tessera::test
