// The training workload against the published accounting: 16 bytes per parameter for mixed-precision Adam
// (Rajbhandari et al. 2020, ZeRO), sharded per ZeRO stage, plus Korthikanti et al. 2022's activations per
// layer, s b h (34 + 5 a s / h) bytes, for the micro-batches in flight.
#include <gtest/gtest.h>

#include "tessera/workload.hpp"

namespace tessera {
namespace {

using Settings = std::map<std::string, std::string>;

Trace generate(const Settings& settings) {
  Result<Trace> trace = generate_workload("training", settings);
  if (!trace.ok()) throw std::runtime_error(trace.error().message);
  const Result<void> valid = validate(*trace);
  if (!valid.ok()) throw std::runtime_error(valid.error().message);
  return std::move(trace).value();
}

// Live bytes before the first iteration: what model, DDP and optimizer construction allocated.
Bytes persistent(const Trace& trace) {
  Bytes live = 0;
  for (const TraceEvent& event : trace.events) {
    if (event.kind == TraceEventKind::iteration) break;
    live += event.kind == TraceEventKind::alloc ? event.size : 0;
  }
  return live;
}

double ratio(double actual, double expected) { return actual / expected; }

// GPT-3 1.3B: 24 layers, h 2048, 16 heads, s 2048, vocabulary 50257 padded to 50304.
constexpr double L = 24, h = 2048, a = 16, s = 2048, V = 50304;
// 12 h^2 + 13 h per layer (QKV, projection, two MLP matrices of 4h, their biases, two LayerNorms), the
// word and position embeddings, the final LayerNorm; the output layer is tied.
constexpr double phi = L * (12 * h * h + 13 * h) + V * h + s * h + 2 * h;
// Per layer and sequence (b = 1).
constexpr double layer_activations = s * h * (34 + 5 * a * s / h);
// At the loss: the bf16 logits and their fp32 copy.
constexpr double logits = 6 * s * V;

TEST(TrainingWorkload, PeakMatchesTheAnalyticFormula) {
  const Settings base = {{"dp", "1"}, {"steps", "2"}, {"micro_batches", "2"}, {"workspace_mb", "0"}};
  const Trace trace = generate(base);
  EXPECT_EQ(persistent(trace), static_cast<Bytes>(16 * phi));
  const double expected = 16 * phi + L * layer_activations + logits;
  EXPECT_NEAR(ratio(static_cast<double>(summarize(trace).peak_live_bytes), expected), 1.0, 0.02);

  Settings two = base;
  two["micro_batch"] = "2";
  EXPECT_NEAR(ratio(static_cast<double>(summarize(generate(two)).peak_live_bytes),
                    16 * phi + 2 * (L * layer_activations + logits)),
              1.0, 0.02);
}

TEST(TrainingWorkload, ZeroStagesShardPersistentBytes) {
  const double d = 8;
  const double expected[] = {16 * phi, 4 * phi + 12 * phi / d, 2 * phi + 14 * phi / d, 16 * phi / d};
  Bytes previous = ~Bytes{0};
  for (int stage = 0; stage <= 3; ++stage) {
    const Trace trace = generate({{"dp", "8"}, {"zero", std::to_string(stage)}, {"steps", "1"}});
    const Bytes held = persistent(trace);
    EXPECT_NEAR(ratio(static_cast<double>(held), expected[stage]), 1.0, 0.001) << "zero " << stage;
    EXPECT_LT(held, previous);
    previous = held;
    EXPECT_EQ(summarize(trace).live_bytes_at_end, held) << "every temporary is freed";
  }
}

TEST(TrainingWorkload, RecomputationLowersThePeak) {
  auto activations = [](const std::string& recompute) {
    const Trace trace = generate({{"dp", "1"}, {"steps", "1"}, {"recompute", recompute}, {"workspace_mb", "0"}});
    return static_cast<double>(summarize(trace).peak_live_bytes) - 16 * phi;
  };
  const double none = activations("none");
  const double selective = activations("selective");
  const double full = activations("full");
  EXPECT_LT(selective, none);
  EXPECT_LT(full, selective);
  // Selective keeps 34 s b h per layer; full keeps each layer's input and rebuilds one layer at a time.
  EXPECT_NEAR(ratio(selective, L * 34 * s * h + logits), 1.0, 0.05);
  EXPECT_LT(full, L * 2 * s * h + layer_activations + 2 * logits);
  // Flash attention keeps no s x s tensors either.
  const Trace flash = generate({{"dp", "1"}, {"steps", "1"}, {"flash_attention", "true"}, {"workspace_mb", "0"}});
  EXPECT_NEAR(ratio(static_cast<double>(summarize(flash).peak_live_bytes) - 16 * phi, selective), 1.0, 0.02);
}

TEST(TrainingWorkload, IterationEventsMarkEachStep) {
  const Trace trace = generate({{"preset", "tiny"}, {"steps", "7"}});
  std::vector<std::uint64_t> marks;
  for (const TraceEvent& event : trace.events) {
    if (event.kind == TraceEventKind::iteration) marks.push_back(event.size);
  }
  EXPECT_EQ(marks, (std::vector<std::uint64_t>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(summarize(trace).iterations, 7u);
}

TEST(TrainingWorkload, ReproducibleAndSeededOnlyThroughWorkspaces) {
  const Settings settings = {{"preset", "tiny"}, {"steps", "2"}};
  EXPECT_TRUE(generate(settings) == generate(settings));
  Settings other = settings;
  other["seed"] = "2";
  EXPECT_FALSE(generate(settings) == generate(other));
  // Without workspaces nothing in dense training is random.
  Settings plain = settings;
  plain["workspace_mb"] = "0";
  Settings plain_other = plain;
  plain_other["seed"] = "2";
  EXPECT_TRUE(generate(plain) == generate(plain_other));
}

TEST(TrainingWorkload, FirstPipelineStageHoldsPpMicroBatches) {
  auto activations = [](const std::string& stage) {
    const Trace trace = generate({{"pp", "4"}, {"stage", stage}, {"micro_batches", "8"}, {"steps", "1"},
                                  {"dp", "1"}, {"workspace_mb", "0"}});
    return static_cast<double>(summarize(trace).peak_live_bytes - persistent(trace));
  };
  const double per_micro_batch = (L / 4) * layer_activations;
  EXPECT_NEAR(ratio(activations("0"), 4 * per_micro_batch), 1.0, 0.03);
  EXPECT_NEAR(ratio(activations("1"), 3 * per_micro_batch), 1.0, 0.03);
  EXPECT_NEAR(ratio(activations("3"), per_micro_batch + logits), 1.0, 0.05);
}

TEST(TrainingWorkload, TensorAndSequenceParallelismSplitTheDevice) {
  const Trace one = generate({{"steps", "1"}, {"dp", "1"}});
  const Trace two = generate({{"steps", "1"}, {"dp", "1"}, {"tp", "2"}});
  const Trace sequence = generate({{"steps", "1"}, {"dp", "1"}, {"tp", "2"}, {"sequence_parallel", "true"}});
  EXPECT_NEAR(ratio(static_cast<double>(persistent(two)), static_cast<double>(persistent(one))), 0.5, 0.01);
  // Without sequence parallelism 10 s b h per layer stay replicated (Korthikanti et al., eq. 2).
  const double tp_activations = static_cast<double>(summarize(two).peak_live_bytes - persistent(two));
  EXPECT_NEAR(ratio(tp_activations, L * s * h * (10 + 24.0 / 2 + 5 * a * s / (h * 2)) + logits / 2), 1.0, 0.05);
  EXPECT_LT(summarize(sequence).peak_live_bytes, summarize(two).peak_live_bytes);
  EXPECT_EQ(persistent(sequence), persistent(two));
}

TEST(TrainingWorkload, GradientBucketsTravelOnTheCommunicationStream) {
  auto comm_allocs = [](const Settings& settings) {
    const Trace trace = generate(settings);
    std::size_t count = 0;
    for (const TraceEvent& event : trace.events) {
      if (event.kind == TraceEventKind::alloc && event.stream == 1) {
        ++count;
        EXPECT_GE(event.size, 25 * MiB);  // a full bucket, or a parameter larger than one
      }
    }
    return count;
  };
  const std::size_t zero0 = comm_allocs({{"steps", "2"}, {"micro_batches", "3"}});
  EXPECT_GT(zero0, 0u);
  // ZeRO-2 reduces every micro-batch, ZeRO-0 only the last of each step.
  EXPECT_EQ(comm_allocs({{"steps", "2"}, {"micro_batches", "3"}, {"zero", "2"}}), 3 * zero0);
  const Trace alone = generate({{"steps", "1"}, {"dp", "1"}});
  EXPECT_EQ(alone.streams.size(), 1u);  // nothing to reduce
  const Trace serial = generate({{"steps", "1"}, {"comm_stream", "false"}});
  EXPECT_EQ(serial.streams.size(), 1u);
}

// Every combination generates a valid trace whose temporaries are all freed.
TEST(TrainingWorkload, OptionSweepStaysConsistent) {
  const std::vector<Settings> variants = {
      {{"recompute", "selective"}, {"tp", "2"}, {"sequence_parallel", "true"}},
      {{"recompute", "full"}, {"zero", "3"}},
      {{"recompute", "full"}, {"flash_attention", "true"}, {"pp", "2"}, {"stage", "1"}},
      {{"zero", "2"}, {"pp", "2"}, {"micro_batches", "1"}},
      {{"zero", "3"}, {"tp", "2"}, {"pp", "2"}, {"sequence_parallel", "true"}, {"fused_wgrad", "true"}},
      {{"preset", "llama2-7b"}, {"layers", "4"}, {"tp", "4"}, {"pp", "2"}, {"stage", "1"}, {"zero", "1"}},
      {{"preset", "llama2-7b"}, {"layers", "2"}, {"kv_heads", "8"}, {"recompute", "selective"}},
      {{"bucket_mb", "1"}, {"micro_batch", "3"}, {"seq", "100"}},
  };
  for (Settings settings : variants) {
    if (!settings.contains("preset")) settings["preset"] = "tiny";
    settings["steps"] = "2";
    const Trace trace = generate(settings);
    const TraceSummary summary = summarize(trace);
    EXPECT_EQ(summary.live_bytes_at_end, persistent(trace));
    EXPECT_EQ(summary.iterations, 2u);
    EXPECT_GT(summary.peak_live_bytes, persistent(trace));
  }
}

// The training generators (training, moe, finetune share their parameters) refuse settings whose trace
// cannot fit the event limit from the parameters, before generating, naming the parameter and the bound.
TEST(TrainingWorkload, RefusesSettingsPastTheEventLimitBeforeGenerating) {
  for (const std::string workload : {"training", "moe", "finetune"}) {
    const Settings settings = {{"preset", workload == "moe" ? "tiny-moe" : "tiny"}, {"steps", "1048576"},
                               {"micro_batches", "65536"}};
    const Result<Trace> trace = generate_workload(workload, settings);
    ASSERT_FALSE(trace.ok()) << workload;
    EXPECT_EQ(trace.error().code, Errc::invalid_argument);
    const std::string& message = trace.error().message;
    EXPECT_NE(message.find("micro_batches=65536: the trace would need at least about"), std::string::npos) << message;
    EXPECT_NE(message.find("over the limit of 20000000 events"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace tessera
