// The seed experiment's scenarios: each fits a 64 GiB 910B card, full recomputation keeps less than
// selective, and the distributed optimizer holds 12 bytes per parameter over the data-parallel ranks.
#include <gtest/gtest.h>

#include "tessera/workload.hpp"

namespace tessera {
namespace {

using Settings = std::map<std::string, std::string>;

Trace generate(std::string_view name, const Settings& settings = {}) {
  Result<Trace> trace = generate_workload(name, settings);
  if (!trace.ok()) throw std::runtime_error(trace.error().message);
  const Result<void> valid = validate(*trace);
  if (!valid.ok()) throw std::runtime_error(valid.error().message);
  return std::move(trace).value();
}

// Live bytes before the first iteration: weights, gradient buffers, optimizer states.
Bytes persistent(const Trace& trace) {
  Bytes live = 0;
  for (const TraceEvent& event : trace.events) {
    if (event.kind == TraceEventKind::iteration) break;
    live += event.kind == TraceEventKind::alloc ? event.size : 0;
  }
  return live;
}

std::vector<std::string> seed_names() {
  std::vector<std::string> names;
  for (const WorkloadScenario& scenario : workload_scenarios()) {
    if (scenario.name.starts_with("seed-")) names.push_back(scenario.name);
  }
  return names;
}

TEST(SeedScenarios, LlamaAndPanguWithSelectiveAndFullRecomputation) {
  const std::vector<std::string> names = seed_names();
  for (const char* model : {"llama2-7b", "pangu-13b"}) {
    for (const char* recompute : {"-selective", "-full"}) {
      const bool found = std::any_of(names.begin(), names.end(), [&](const std::string& name) {
        return name.find(model) != std::string::npos && name.ends_with(recompute);
      });
      EXPECT_TRUE(found) << model << recompute;
    }
  }
}

TEST(SeedScenarios, EachFitsA64GiBCard) {
  for (const std::string& name : seed_names()) {
    const Trace trace = generate(name);
    EXPECT_EQ(trace.name, name);
    const TraceSummary summary = summarize(trace);
    EXPECT_LE(summary.peak_live_bytes, 64 * GiB) << name;
    EXPECT_GT(summary.peak_live_bytes, 16 * GiB) << name << ": far from the card's size, not the seed's regime";
    EXPECT_GE(summary.iterations, 2u) << name;
  }
}

TEST(SeedScenarios, FullRecomputationPeaksBelowSelective) {
  for (const std::string& name : seed_names()) {
    if (!name.ends_with("-full")) continue;
    const std::string selective = name.substr(0, name.size() - 5) + "-selective";
    const Bytes full_peak = summarize(generate(name, {{"steps", "1"}})).peak_live_bytes;
    const Bytes selective_peak = summarize(generate(selective, {{"steps", "1"}})).peak_live_bytes;
    EXPECT_LT(full_peak, selective_peak) << name;
    // The same model and layout: the same persistent bytes, only the activations differ.
    EXPECT_EQ(persistent(generate(name, {{"steps", "1"}})), persistent(generate(selective, {{"steps", "1"}})));
  }
}

// Llama-2-7B on tp 2: this card's parameters Φ. Per layer two RMSNorm weights h (replicated over tp), QKV
// 3h·h/2, projection h·h/2, gate+up 2f·h/2, down f·h/2; the embedding and the output layer V'h/2 each (V'
// = 32000, already a multiple of 128·tp), the final norm h.
constexpr double h = 4096, f = 11008, V = 32000, L = 32;
constexpr double phi_tp2 = L * (2 * h + (3 * h * h + h * h + 2 * f * h + f * h) / 2) + 2 * V * h / 2 + h;

TEST(SeedScenarios, DistributedOptimizerHoldsTwelveBytesPerParameterOverDataParallelRanks) {
  // bf16 weights and gradients whole (2 + 2), fp32 master weights and Adam's moments sharded: 12 / dp.
  const Settings one_step = {{"steps", "1"}};
  const double dp2 = static_cast<double>(persistent(generate("seed-llama2-7b-tp2dp2-full", one_step)));
  EXPECT_NEAR(dp2 / (4 * phi_tp2 + 12 * phi_tp2 / 2), 1.0, 1e-6);
  Settings dp1 = one_step;
  dp1["dp"] = "1";
  const double whole = static_cast<double>(persistent(generate("seed-llama2-7b-tp2dp2-full", dp1)));
  EXPECT_NEAR(whole / (16 * phi_tp2), 1.0, 1e-6);
}

TEST(SeedScenarios, ExplicitSettingsGoOverTheScenarios) {
  const Trace trace = generate("seed-llama2-7b-tp2dp2-full", {{"steps", "1"}, {"micro_batches", "1"}});
  EXPECT_EQ(summarize(trace).iterations, 1u);
  auto bad = generate_workload("seed-llama2-7b-tp2dp2-full", {{"nosuch", "1"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("'nosuch'"), std::string::npos);
  auto unknown = generate_workload("seed-nosuch");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message.find("seed-llama2-7b-tp2pp2-selective"), std::string::npos);
}

}  // namespace
}  // namespace tessera
