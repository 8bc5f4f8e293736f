// The workload registry: descriptions, presets, settings and the errors that name what is wrong; the
// defaults of every workload (fast, moderate, fitting one 80 GB card).
#include <gtest/gtest.h>

#include <chrono>
#include <set>

#include "tessera/workload.hpp"
#include "workload/event_estimate.hpp"

namespace tessera {
namespace {

using Settings = std::map<std::string, std::string>;

void expect_invalid(std::string_view workload, const Settings& settings, std::string_view words) {
  const Result<Trace> trace = generate_workload(workload, settings);
  ASSERT_FALSE(trace.ok()) << "expected an error naming '" << words << "'";
  EXPECT_EQ(trace.error().code, Errc::invalid_argument);
  EXPECT_NE(trace.error().message.find(words), std::string::npos) << trace.error().message;
}

TEST(Workloads, DescribeEveryParameterOnce) {
  std::vector<std::string> names;
  for (const WorkloadDescription& description : workloads()) {
    names.push_back(description.name);
    EXPECT_FALSE(description.summary.empty());
    EXPECT_FALSE(description.presets.empty()) << description.name;
    std::set<std::string> keys;
    for (const WorkloadParameter& parameter : description.parameters) {
      EXPECT_TRUE(keys.insert(parameter.key).second) << description.name << " lists " << parameter.key << " twice";
      EXPECT_FALSE(parameter.default_value.empty()) << description.name << "." << parameter.key;
      EXPECT_FALSE(parameter.meaning.empty()) << description.name << "." << parameter.key;
    }
    EXPECT_TRUE(keys.contains("seed")) << description.name;
    EXPECT_TRUE(keys.contains("preset")) << description.name;
  }
  EXPECT_EQ(names, (std::vector<std::string>{"training", "moe", "inference", "finetune", "rl", "serving", "fsdp"}));
}

TEST(Workloads, UnknownWorkloadKeyOrValueIsNamed) {
  expect_invalid("pretraining", {}, "unknown workload 'pretraining'");
  expect_invalid("training", {{"layer", "2"}}, "has no parameter 'layer'");
  expect_invalid("training", {{"tp", "two"}}, "tp=two: expected an integer");
  expect_invalid("training", {{"tp", "0"}}, "tp=0: expected an integer from 1");
  expect_invalid("training", {{"recompute", "some"}}, "recompute=some: expected one of none, selective, full");
  expect_invalid("training", {{"flash_attention", "maybe"}}, "flash_attention=maybe: expected true or false");
  expect_invalid("training", {{"zero", "4"}}, "zero=4");
  expect_invalid("training", {{"preset", "gpt5"}}, "preset=gpt5: unknown preset");
  expect_invalid("training", {{"preset", "mixtral-8x7b"}}, "preset=mixtral-8x7b: unknown preset");  // moe only
  expect_invalid("training", {{"tp", "3"}}, "tp=3: must divide heads=16");
  expect_invalid("training", {{"pp", "5"}}, "pp=5: must divide layers=24");
  expect_invalid("training", {{"pp", "2"}, {"stage", "2"}}, "stage=2: must be below pp=2");
  expect_invalid("training", {{"hidden", "2001"}}, "hidden=2001: not divisible by heads=16");
  expect_invalid("moe", {{"skew", "-1"}}, "skew=-1: expected a number");
  expect_invalid("inference", {{"kv", "virtual"}}, "kv=virtual: expected one of contiguous, paged");
  expect_invalid("finetune", {{"seq", "128"}}, "has no parameter 'seq'");  // finetune draws its lengths
}

TEST(Workloads, ExplicitSettingsOverrideThePreset) {
  const Result<Trace> preset = generate_workload("training", {{"preset", "tiny"}, {"steps", "1"}});
  const Result<Trace> deeper = generate_workload("training", {{"preset", "tiny"}, {"steps", "1"}, {"layers", "4"}});
  ASSERT_TRUE(preset.ok() && deeper.ok());
  EXPECT_GT(summarize(*deeper).live_bytes_at_end, summarize(*preset).live_bytes_at_end);
  // The -tpN presets set tp; an explicit tp wins over it.
  const Result<Trace> tp2 = generate_workload("training", {{"preset", "gpt3-1.3b-tp2"}, {"steps", "1"}});
  const Result<Trace> tp1 =
      generate_workload("training", {{"preset", "gpt3-1.3b-tp2"}, {"tp", "1"}, {"steps", "1"}});
  ASSERT_TRUE(tp2.ok() && tp1.ok());
  EXPECT_NEAR(static_cast<double>(summarize(*tp2).live_bytes_at_end) /
                  static_cast<double>(summarize(*tp1).live_bytes_at_end), 0.5, 0.01);
}

TEST(Workloads, EveryPresetGeneratesAValidTrace) {
  for (const WorkloadDescription& description : workloads()) {
    for (const std::string& preset : description.presets) {
      Settings settings = {{"preset", preset}, {"steps", "1"}};
      if (description.name == "inference") settings["steps"] = "32";
      if (description.name == "moe") settings["dp"] = "8", settings["ep"] = "4";
      if (description.name == "serving") settings = {{"preset", preset}, {"cycles", "1"}, {"requests", "8"}};
      const Result<Trace> trace = generate_workload(description.name, settings);
      ASSERT_TRUE(trace.ok()) << description.name << " " << preset << ": " << trace.error().message;
      EXPECT_TRUE(validate(*trace).ok()) << description.name << " " << preset;
      EXPECT_GT(summarize(*trace).peak_live_bytes, 0u);
    }
  }
}

// Each default: well under a second, a moderate number of events, valid, reproducible, and a peak that
// one 80 GB card holds.
TEST(Workloads, DefaultsAreFastModerateAndFitOneCard) {
  for (const WorkloadDescription& description : workloads()) {
    const auto start = std::chrono::steady_clock::now();
    const Result<Trace> trace = generate_workload(description.name);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_TRUE(trace.ok()) << description.name << ": " << trace.error().message;
    EXPECT_LT(seconds, 1.0) << description.name;
    EXPECT_TRUE(validate(*trace).ok()) << description.name;
    const TraceSummary summary = summarize(*trace);
    EXPECT_LE(trace->events.size(), 220'000u) << description.name;
    EXPECT_GT(summary.iterations, 0u) << description.name;
    EXPECT_LT(summary.peak_live_bytes, 80 * GiB) << description.name;
    EXPECT_GT(summary.peak_live_bytes, 10 * GiB) << description.name;  // real sizes, not a toy
    EXPECT_EQ(trace->name, description.name);
    const Result<Trace> again = generate_workload(description.name);
    ASSERT_TRUE(again.ok());
    EXPECT_TRUE(*trace == *again) << description.name << " is not reproducible";
  }
}

// The event estimates multiply 64-bit parameters: a product past 2^64 stays at the maximum instead of
// wrapping to a small count that would pass the limit.
TEST(EventEstimate, ProductsSaturateInsteadOfWrapping) {
  using workload::saturated;
  EXPECT_EQ(workload::saturating_product({1u << 20, 1u << 24, 12}), std::uint64_t{12} << 44);
  EXPECT_EQ(workload::saturating_product({std::uint64_t{1} << 32, std::uint64_t{1} << 32}), saturated);
  EXPECT_EQ(workload::saturating_product({saturated, 0}), 0u);
  EXPECT_EQ(workload::saturating_add(saturated - 1, 2), saturated);
}

}  // namespace
}  // namespace tessera
