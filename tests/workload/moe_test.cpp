// The moe workload: experts whose token counts change every micro-batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "tessera/workload.hpp"

namespace tessera {
namespace {

using Settings = std::map<std::string, std::string>;

Trace generate(Settings settings) {
  if (!settings.contains("preset")) settings["preset"] = "tiny-moe";
  Result<Trace> trace = generate_workload("moe", settings);
  if (!trace.ok()) throw std::runtime_error(trace.error().message);
  const Result<void> valid = validate(*trace);
  if (!valid.ok()) throw std::runtime_error(valid.error().message);
  return std::move(trace).value();
}

// The sorted allocation sizes of each step.
std::vector<std::vector<std::uint64_t>> sizes_per_step(const Trace& trace) {
  std::vector<std::vector<std::uint64_t>> steps;
  for (const TraceEvent& event : trace.events) {
    if (event.kind == TraceEventKind::iteration) steps.emplace_back();
    if (event.kind == TraceEventKind::alloc && !steps.empty()) steps.back().push_back(event.size);
  }
  for (auto& step : steps) std::sort(step.begin(), step.end());
  return steps;
}

TEST(MoeWorkload, ExpertSizesChangeEveryStepWithSkew) {
  const Trace skewed = generate({{"steps", "3"}, {"skew", "1"}, {"workspace_mb", "0"}});
  const auto skewed_steps = sizes_per_step(skewed);
  ASSERT_EQ(skewed_steps.size(), 3u);
  EXPECT_NE(skewed_steps[0], skewed_steps[1]);
  EXPECT_NE(skewed_steps[1], skewed_steps[2]);
  // Balanced routing gives every step the same sizes.
  const auto balanced = sizes_per_step(generate({{"steps", "3"}, {"skew", "0"}, {"workspace_mb", "0"}}));
  EXPECT_EQ(balanced[0], balanced[1]);
  EXPECT_EQ(balanced[1], balanced[2]);
  const std::set<std::uint64_t> skewed_sizes(skewed_steps[0].begin(), skewed_steps[0].end());
  const std::set<std::uint64_t> balanced_sizes(balanced[0].begin(), balanced[0].end());
  EXPECT_GT(skewed_sizes.size(), balanced_sizes.size());
}

TEST(MoeWorkload, AllLocalExpertsTogetherSeeEveryToken) {
  // With every expert on this device, a grouped GEMM runs over all routed tokens whatever the skew.
  const Settings settings = {{"steps", "3"}, {"skew", "2"}, {"ep", "1"}, {"grouped_gemm", "true"}, {"workspace_mb", "0"}};
  const auto steps = sizes_per_step(generate(settings));
  EXPECT_EQ(steps[0], steps[1]);
  EXPECT_EQ(steps[1], steps[2]);
}

TEST(MoeWorkload, ReproducibleAndSeeded) {
  const Settings settings = {{"steps", "2"}};
  EXPECT_TRUE(generate(settings) == generate(settings));
  EXPECT_FALSE(generate(settings) == generate({{"steps", "2"}, {"seed", "7"}}));
}

TEST(MoeWorkload, ExpertParallelismSpreadsTheExperts) {
  // tiny-moe: 4 experts of two 256 x 1024 matrices with biases, per layer, over 2 layers; 16 bytes each.
  const double expert_bytes = 16.0 * 2 * 4 * (2 * 256 * 1024 + 1024 + 256);
  const Trace all = generate({{"steps", "1"}, {"ep", "1"}, {"dp", "4"}, {"zero", "0"}});
  const Trace quarter = generate({{"steps", "1"}, {"ep", "4"}, {"dp", "4"}, {"zero", "0"}});
  EXPECT_DOUBLE_EQ(static_cast<double>(summarize(all).live_bytes_at_end - summarize(quarter).live_bytes_at_end),
                   expert_bytes * 3 / 4);
}

TEST(MoeWorkload, CapacityFactorDropsTokens) {
  const Settings skewed = {{"steps", "2"}, {"skew", "2"}, {"ep", "1"}, {"dp", "1"}, {"workspace_mb", "0"}};
  Settings capped = skewed;
  capped["capacity_factor"] = "1";
  EXPECT_LT(summarize(generate(capped)).peak_live_bytes, summarize(generate(skewed)).peak_live_bytes);
}

TEST(MoeWorkload, OptionSweepStaysConsistent) {
  const std::vector<Settings> variants = {
      {{"recompute", "full"}, {"zero", "3"}},
      {{"recompute", "selective"}, {"tp", "2"}, {"sequence_parallel", "true"}, {"ep", "2"}},
      {{"grouped_gemm", "true"}, {"pp", "2"}, {"stage", "1"}},
      {{"preset", "mixtral-8x7b"}, {"layers", "2"}, {"tp", "2"}, {"ep", "8"}, {"dp", "8"}, {"flash_attention", "true"}},
      {{"top_k", "1"}, {"experts", "8"}, {"ep", "2"}},
  };
  for (Settings settings : variants) {
    settings["steps"] = "2";
    const Trace trace = generate(settings);
    EXPECT_EQ(summarize(trace).iterations, 2u);
  }
}

TEST(MoeWorkload, ChecksRouting) {
  const Result<Trace> ep = generate_workload("moe", {{"ep", "3"}});
  ASSERT_FALSE(ep.ok());
  EXPECT_NE(ep.error().message.find("ep=3: must divide experts=8"), std::string::npos) << ep.error().message;
  const Result<Trace> top = generate_workload("moe", {{"top_k", "9"}});
  ASSERT_FALSE(top.ok());
  EXPECT_NE(top.error().message.find("top_k=9"), std::string::npos);
  const Result<Trace> dp = generate_workload("moe", {{"dp", "2"}});
  ASSERT_FALSE(dp.ok());
  EXPECT_NE(dp.error().message.find("ep=4: must divide dp=2"), std::string::npos) << dp.error().message;
}

}  // namespace
}  // namespace tessera
