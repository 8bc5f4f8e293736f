// The finetune workload: variable sequence lengths, LoRA.
#include <gtest/gtest.h>

#include <set>

#include "tessera/workload.hpp"

namespace tessera {
namespace {

using Settings = std::map<std::string, std::string>;

Trace generate(const Settings& settings) {
  Result<Trace> trace = generate_workload("finetune", settings);
  if (!trace.ok()) throw std::runtime_error(trace.error().message);
  const Result<void> valid = validate(*trace);
  if (!valid.ok()) throw std::runtime_error(valid.error().message);
  return std::move(trace).value();
}

// Llama 2 7B as trained (bf16): per layer QKV, projection, gate+up, down, two RMSNorms; embedding, output
// layer, final norm.
constexpr double h = 4096, f = 11008, V = 32000, L = 32, r = 16;
constexpr double base = L * (4 * h * h + 3 * h * f + 2 * h) + 2 * V * h + h;
// LoRA on QKV (A: r x h, B: 3h x r) and the projection (A: r x h, B: h x r).
constexpr double adapters = L * r * (h + 3 * h + h + h);

TEST(FinetuneWorkload, LoraTrainsOnlyTheAdapters) {
  const Trace lora = generate({{"steps", "1"}});
  EXPECT_EQ(summarize(lora).live_bytes_at_end, static_cast<Bytes>(2 * base + 16 * adapters));
  // Full fine-tuning of the same model holds 16 bytes per parameter.
  const Trace full = generate({{"steps", "1"}, {"lora_rank", "0"}, {"layers", "2"}, {"max_seq", "512"}});
  const double two_layers = 2 * (4 * h * h + 3 * h * f + 2 * h) + 2 * V * h + h;
  EXPECT_EQ(summarize(full).live_bytes_at_end, static_cast<Bytes>(16 * two_layers));
}

TEST(FinetuneWorkload, LoraKeepsFewerActivations) {
  const Settings base_settings = {{"steps", "2"}, {"preset", "gpt3-1.3b"}, {"min_seq", "2048"}, {"max_seq", "2048"}};
  Settings full = base_settings;
  full["lora_rank"] = "0";
  const Trace with_lora = generate(base_settings);
  const Trace without = generate(full);
  const TraceSummary a = summarize(with_lora);
  const TraceSummary b = summarize(without);
  EXPECT_LT(a.peak_live_bytes - a.live_bytes_at_end, b.peak_live_bytes - b.live_bytes_at_end);
}

TEST(FinetuneWorkload, SequenceLengthsChangePerMicroBatch) {
  const Trace varied = generate({{"steps", "4"}, {"micro_batches", "1"}, {"workspace_mb", "0"}});
  std::set<std::uint64_t> peaks;
  Bytes live = 0;
  Bytes peak = 0;
  bool stepping = false;
  for (const TraceEvent& event : varied.events) {
    if (event.kind == TraceEventKind::iteration) {
      if (stepping) peaks.insert(peak);
      stepping = true;
      peak = 0;
      continue;
    }
    live = event.kind == TraceEventKind::alloc ? live + event.size : live - event.size;
    peak = std::max(peak, live);
  }
  peaks.insert(peak);
  EXPECT_EQ(peaks.size(), 4u);  // four different lengths, four different peaks
  // Lengths are padded up to the multiple: every draw from 65..128 becomes 128.
  EXPECT_TRUE(generate({{"steps", "2"}, {"min_seq", "65"}, {"max_seq", "128"}, {"seq_multiple", "64"}}) ==
              generate({{"steps", "2"}, {"min_seq", "128"}, {"max_seq", "128"}, {"seq_multiple", "64"}}));
}

TEST(FinetuneWorkload, ReproducibleAndSeeded) {
  const Settings settings = {{"steps", "2"}, {"preset", "tiny"}};
  EXPECT_TRUE(generate(settings) == generate(settings));
  EXPECT_FALSE(generate(settings) == generate({{"steps", "2"}, {"preset", "tiny"}, {"seed", "3"}}));
}

TEST(FinetuneWorkload, OptionSweepStaysConsistent) {
  const std::vector<Settings> variants = {
      {{"lora_mlp", "true"}, {"recompute", "full"}},
      {{"lora_rank", "0"}, {"zero", "3"}, {"dp", "4"}, {"recompute", "selective"}, {"flash_attention", "false"}},
      {{"lora_rank", "8"}, {"tp", "2"}, {"pp", "2"}, {"sequence_parallel", "true"}},
      {{"lora_rank", "4"}, {"zero", "2"}, {"dp", "2"}, {"micro_batch", "2"}},
  };
  for (Settings settings : variants) {
    settings["preset"] = "tiny";
    settings["steps"] = "2";
    const Trace trace = generate(settings);
    EXPECT_EQ(summarize(trace).iterations, 2u);
  }
  const Result<Trace> backwards = generate_workload("finetune", {{"min_seq", "900"}, {"max_seq", "800"}});
  ASSERT_FALSE(backwards.ok());
  EXPECT_NE(backwards.error().message.find("min_seq=900: must not exceed max_seq=800"), std::string::npos);
}

}  // namespace
}  // namespace tessera
