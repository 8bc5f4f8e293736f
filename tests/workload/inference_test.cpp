// The inference workload: continuous batching with growing KV caches.
#include <gtest/gtest.h>

#include "tessera/workload.hpp"

namespace tessera {
namespace {

using Settings = std::map<std::string, std::string>;

Trace generate(const Settings& settings) {
  Result<Trace> trace = generate_workload("inference", settings);
  if (!trace.ok()) throw std::runtime_error(trace.error().message);
  const Result<void> valid = validate(*trace);
  if (!valid.ok()) throw std::runtime_error(valid.error().message);
  return std::move(trace).value();
}

// Llama 2 7B in fp16: per layer QKV (3 h^2), output projection (h^2), gate+up (2 h f), down (f h), two
// RMSNorms; the embedding and the untied output layer (V h each) and the final norm.
constexpr std::uint64_t h = 4096, f = 11008, V = 32000, L = 32;
constexpr std::uint64_t weights = 2 * (L * (4 * h * h + 3 * h * f + 2 * h) + 2 * V * h + h);
constexpr std::uint64_t kv_per_token = 2 * L * h * 2;  // K and V of every layer, fp16

TEST(InferenceWorkload, WeightsStayAndEveryCacheIsFreed) {
  const Trace trace = generate({{"steps", "200"}});
  const TraceSummary summary = summarize(trace);
  EXPECT_EQ(summary.live_bytes_at_end, weights);
  EXPECT_EQ(summary.initial_bytes, 0u);
  // max_batch requests of at most max_prompt + max_output tokens, rounded to the growth, plus temporaries.
  EXPECT_LT(summary.peak_live_bytes, weights + 32 * kv_per_token * (2048 + 512) + 2 * GiB);
  EXPECT_GT(summary.peak_live_bytes, weights + 2 * GiB);  // caches of real size
}

TEST(InferenceWorkload, IterationsMarkEveryFewSteps) {
  EXPECT_EQ(summarize(generate({{"steps", "100"}, {"mark_every", "10"}})).iterations, 10u);
  EXPECT_EQ(summarize(generate({{"steps", "101"}, {"mark_every", "10"}})).iterations, 11u);
}

TEST(InferenceWorkload, ContiguousCachesGrowInChunksPagedOnesBlockByBlock) {
  const Settings base = {{"steps", "300"}, {"preset", "llama2-7b"}};
  Settings contiguous = base;
  contiguous["kv_growth_tokens"] = "64";
  Settings paged = base;
  paged["kv"] = "paged";
  const Trace grown = generate(contiguous);
  const Trace blocks = generate(paged);
  std::size_t cache_allocs = 0;
  for (const TraceEvent& event : grown.events) {
    if (event.kind == TraceEventKind::alloc && event.size % (64 * kv_per_token) == 0) ++cache_allocs;
  }
  EXPECT_GT(cache_allocs, 100u);
  std::size_t block_allocs = 0;
  for (const TraceEvent& event : blocks.events) {
    if (event.kind == TraceEventKind::alloc && event.size == 16 * kv_per_token) ++block_allocs;
  }
  EXPECT_GT(block_allocs, 1000u);
  // Paged blocks are small; a contiguous cache is one block of up to max_prompt + max_output tokens.
  EXPECT_EQ(summarize(blocks).largest_alloc, 2 * V * h);  // the embedding
  EXPECT_GT(summarize(grown).largest_alloc, 2 * V * h);
  EXPECT_LE(summarize(grown).largest_alloc, (2048 + 512) * kv_per_token);
}

TEST(InferenceWorkload, ReproducibleAndSeeded) {
  const Settings settings = {{"steps", "64"}, {"preset", "tiny"}};
  EXPECT_TRUE(generate(settings) == generate(settings));
  EXPECT_FALSE(generate(settings) == generate({{"steps", "64"}, {"preset", "tiny"}, {"seed", "9"}}));
}

TEST(InferenceWorkload, ServesAFixedNumberOfRequests) {
  // steps=0: until every request is served; then only the weights remain.
  Settings settings = {{"steps", "0"}, {"requests", "20"}, {"preset", "tiny"}, {"max_prompt", "100"},
                       {"mean_prompt", "50"}, {"max_output", "60"}, {"mean_output", "30"}, {"max_prefill_tokens", "100"}};
  const TraceSummary summary = summarize(generate(settings));
  EXPECT_GT(summary.iterations, 0u);
  settings["requests"] = "1";
  const Trace weights_only = generate(settings);
  EXPECT_EQ(summary.live_bytes_at_end, summarize(weights_only).live_bytes_at_end);
}

TEST(InferenceWorkload, ChecksItsLimits) {
  const Result<Trace> endless = generate_workload("inference", {{"steps", "0"}});
  ASSERT_FALSE(endless.ok());
  EXPECT_NE(endless.error().message.find("steps=0"), std::string::npos) << endless.error().message;
  const Result<Trace> budget = generate_workload("inference", {{"max_prefill_tokens", "1000"}});
  ASSERT_FALSE(budget.ok());
  EXPECT_NE(budget.error().message.find("max_prefill_tokens=1000"), std::string::npos);
}

// Settings whose trace cannot fit the event limit are refused from the parameters, before generating: a
// million arrivals a step queued 480 million requests (about 30 GB) first. The refusal names the parameter
// and the bound.
TEST(InferenceWorkload, RefusesSettingsPastTheEventLimitBeforeGenerating) {
  const std::vector<std::pair<Settings, std::string>> cases = {
      {{{"preset", "tiny"}, {"arrival_rate", "1000000"}}, "arrival_rate=1000000: "},
      {{{"preset", "tiny"}, {"steps", "100000000"}}, "steps=100000000: "},
      {{{"preset", "tiny"}, {"steps", "0"}, {"requests", "100000000"}, {"arrival_rate", "1000"}}, "requests=100000000: "},
  };
  for (const auto& [settings, named] : cases) {
    const Result<Trace> trace = generate_workload("inference", settings);
    ASSERT_FALSE(trace.ok()) << named;
    EXPECT_EQ(trace.error().code, Errc::invalid_argument);
    const std::string& message = trace.error().message;
    EXPECT_NE(message.find(named + "the trace would need at least about"), std::string::npos) << message;
    EXPECT_NE(message.find("over the limit of 20000000 events"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace tessera
