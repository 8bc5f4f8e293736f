// The `serving` workload: graphs captured into one shared graph pool on the capture stream under the "graph"
// tag, sizes that follow the model, three tags paused and resumed every cycle, settings checked; and replayed,
// Tessera needs the least memory and gives the graph pool's memory back while asleep.
#include <gtest/gtest.h>

#include <map>
#include <utility>
#include <vector>
#include <string>

#include "tessera/replay.hpp"
#include "tessera/workload.hpp"

namespace tessera {
namespace {

using Settings = std::map<std::string, std::string>;

Trace serving(Settings settings = {}) {
  auto trace = generate_workload("serving", settings);
  EXPECT_TRUE(trace.ok()) << (trace ? "" : trace.error().message);
  return trace ? std::move(trace).value() : Trace{};
}

// A small engine: the tiny model, few requests.
Settings small() {
  return {{"preset", "tiny"},        {"requests", "24"},  {"cycles", "2"},         {"mean_prompt", "64"},
          {"max_prompt", "128"},     {"mean_output", "32"}, {"max_output", "96"}, {"kv_tokens", "4096"},
          {"max_batch", "16"},       {"max_graph_batch", "16"}, {"max_prefill_tokens", "256"}, {"fsdp", "1"}};
}

TEST(ServingWorkload, GraphsAreCapturedIntoOnePoolUnderTheGraphTag) {
  const Trace trace = serving();
  ASSERT_TRUE(validate(trace).ok());
  ASSERT_EQ(trace.pools.size(), 1u);
  EXPECT_EQ(trace.pools[0].kind, PoolKind::graph);
  ASSERT_EQ(trace.streams.size(), 2u);
  TraceTag graph = 0;
  for (std::size_t t = 0; t < trace.tags.size(); ++t) {
    if (trace.tags[t] == "graph") graph = static_cast<TraceTag>(t);
  }
  ASSERT_NE(graph, trace_default_tag);
  std::size_t begins = 0;
  std::size_t releases = 0;
  std::size_t in_pool = 0;
  bool capturing = false;
  for (const TraceEvent& event : trace.events) {
    if (event.kind == TraceEventKind::begin_pool) {
      ++begins;
      capturing = true;
      EXPECT_EQ(event.stream, 1u) << "captured on the capture stream";
    } else if (event.kind == TraceEventKind::end_pool) {
      capturing = false;
    } else if (event.kind == TraceEventKind::release_pool) {
      ++releases;
    } else if (event.kind == TraceEventKind::alloc && capturing) {
      ++in_pool;
      EXPECT_EQ(event.stream, 1u);
      EXPECT_EQ(event.tag, graph) << "a captured allocation is graph memory";
    }
  }
  // 1, 2, 4, 8, 16, ..., 64: eleven decode graphs, each released when the engine shuts down.
  EXPECT_EQ(begins, 11u);
  EXPECT_EQ(releases, 11u);
  EXPECT_EQ(in_pool, 11u * (2 + 6 * 32)) << "hidden, residual and six tensors a layer per capture";
}

TEST(ServingWorkload, SizesFollowTheModel) {
  const Trace trace = serving();
  Bytes weights = 0;
  Bytes kv_cache = 0;
  std::vector<TraceTag> tags = {1, 2};  // weights, kv_cache: the first two the engine names
  ASSERT_EQ(trace.tags[1], "weights");
  ASSERT_EQ(trace.tags[2], "kv_cache");
  for (const TraceEvent& event : trace.events) {
    if (event.kind != TraceEventKind::alloc) continue;
    if (event.tag == 1) weights += event.size;
    if (event.tag == 2) kv_cache += event.size;
  }
  EXPECT_EQ(weights, 2 * Bytes{6'738'415'616}) << "Llama 2 7B in bf16, one device";
  EXPECT_EQ(kv_cache, Bytes{32768} * 32 * 2 * 32 * 128 * 2) << "32768 tokens of K and V in 32 layers";
}

TEST(ServingWorkload, EveryCyclePausesTheThreeTags) {
  const Trace trace = serving(small());
  const TraceSummary summary = summarize(trace);
  EXPECT_EQ(summary.pauses, 2u * 3u);
  EXPECT_EQ(summary.resumes, 2u * 3u);
  for (const TraceEvent& event : trace.events) {
    if (event.kind == TraceEventKind::pause) {
      EXPECT_EQ(event.backup, trace.tags[event.tag] == "weights") << trace.tags[event.tag];
    }
  }
  Settings level2 = small();
  level2["sleep_level"] = "2";
  for (const TraceEvent& event : serving(level2).events) {
    if (event.kind == TraceEventKind::pause) {
      EXPECT_FALSE(event.backup);
    }
  }
  Settings no_graphs = small();
  no_graphs["max_graph_batch"] = "0";
  EXPECT_EQ(summarize(serving(no_graphs)).pool_begins, 0u);
  EXPECT_EQ(serving(small()), serving(small())) << "the same seed, the same trace";
  Settings other = small();
  other["seed"] = "2";
  EXPECT_NE(serving(other), serving(small()));
}

TEST(ServingWorkload, SettingsAreChecked) {
  auto error = [](Settings settings) {
    auto trace = generate_workload("serving", settings);
    return trace ? std::string("(accepted)") : trace.error().message;
  };
  EXPECT_NE(error({{"kv_tokens", "100"}}).find("kv_tokens"), std::string::npos);
  EXPECT_NE(error({{"max_graph_batch", "128"}}).find("max_graph_batch"), std::string::npos);
  EXPECT_NE(error({{"sleep_level", "3"}}).find("sleep_level"), std::string::npos);
  EXPECT_NE(error({{"requests", "10000000"}, {"cycles", "1000"}}).find("requests"), std::string::npos);
}

ReplayResult replayed(const Trace& trace, const std::string& allocator) {
  ReplayOptions options;
  options.allocator = allocator;
  auto result = replay_with_min_capacity(trace, options);
  EXPECT_TRUE(result.ok()) << (result ? "" : result.error().message);
  return result ? *result : ReplayResult{};
}

TEST(ServingWorkload, TesseraNeedsTheLeastMemory) {
  const Trace trace = serving(small());
  const ReplayResult tessera = replayed(trace, "tessera");
  ASSERT_TRUE(tessera.min_capacity.has_value());
  EXPECT_FALSE(tessera.pool_unsupported);
  for (const std::string other : {"pytorch", "expandable", "gmlake", "memory-saver"}) {
    const ReplayResult result = replayed(trace, other);
    ASSERT_TRUE(result.min_capacity.has_value()) << other;
    EXPECT_LE(*tessera.min_capacity, *result.min_capacity) << other;
  }
}

// Reserved bytes just before and just after every pause of the "graph" tag (the first cycle's and later ones),
// from a replay that samples every event.
std::vector<std::pair<Bytes, Bytes>> around_graph_pauses(const Trace& trace, const std::string& allocator) {
  ReplayOptions options;
  options.allocator = allocator;
  options.series_points = trace.events.size() + 1;
  auto result = replay(trace, options);
  EXPECT_TRUE(result.ok()) << (result ? "" : result.error().message);
  std::vector<std::pair<Bytes, Bytes>> moments;
  if (!result) return moments;
  std::vector<Bytes> reserved_after(trace.events.size(), 0);
  for (const SeriesPoint& point : result->series) {
    if (point.event < reserved_after.size()) reserved_after[point.event] = point.reserved;
  }
  for (std::size_t i = 1; i < trace.events.size(); ++i) {
    const TraceEvent& event = trace.events[i];
    if (event.kind == TraceEventKind::pause && trace.tags[event.tag] == "graph") {
      moments.emplace_back(reserved_after[i - 1], reserved_after[i]);
    }
  }
  return moments;
}

TEST(ServingWorkload, PausingTheGraphTagGivesTheGraphPoolsMemoryBack) {
  const Trace trace = serving({{"requests", "8"}, {"cycles", "2"}});
  const auto tessera = around_graph_pauses(trace, "tessera");
  ASSERT_EQ(tessera.size(), 2u);
  for (const auto& [before, after] : tessera) {
    EXPECT_GE(before - after, 2 * MiB) << "at least a granule of graph memory given back";
  }
  // PyTorch's allocator cannot pause: the graph pool's memory stays.
  for (const auto& [before, after] : around_graph_pauses(trace, "pytorch")) EXPECT_EQ(before, after);
}

}  // namespace
}  // namespace tessera
