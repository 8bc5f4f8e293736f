// The `rl` workload: colocated RL steps. Sizes checked against the published parameter count of Llama 2 7B
// (6,738,415,616), the phases' order, the tags, and that the KV cache grows with the sequences.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "tessera/workload.hpp"

namespace tessera {
namespace {

using Settings = std::map<std::string, std::string>;

constexpr std::uint64_t llama2_7b_parameters = 6'738'415'616;
constexpr std::uint64_t llama2_7b_norm_parameters = (2 * 32 + 1) * 4096;  // RMSNorm weights, replicated over tp

struct Moment {
  std::size_t event = 0;
  std::vector<Bytes> live;  // per tag, paused tags included
};

// Live bytes per tag just before every pause and resume event.
std::vector<Moment> moments_before_pauses(const Trace& trace) {
  std::vector<Bytes> live(trace.tags.size(), 0);
  std::vector<TraceTag> tag(trace.block_count, trace_default_tag);
  std::vector<Moment> moments;
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    const TraceEvent& event = trace.events[i];
    switch (event.kind) {
      case TraceEventKind::alloc:
        tag[event.block] = event.tag;
        live[event.tag] += event.size;
        break;
      case TraceEventKind::free: live[tag[event.block]] -= event.size; break;
      case TraceEventKind::pause:
      case TraceEventKind::resume: moments.push_back({i, live}); break;
      default: break;
    }
  }
  return moments;
}

TEST(RlWorkload, PhasesComeInOrderUnderTheirTags) {
  const Result<Trace> trace = generate_workload("rl", {{"steps", "2"}});
  ASSERT_TRUE(trace.ok()) << trace.error().message;
  ASSERT_TRUE(validate(*trace).ok());
  EXPECT_EQ(trace->tags, (std::vector<std::string>{"default", "weights", "kv_cache"}));
  std::vector<TraceEvent> phases;
  for (const TraceEvent& event : trace->events) {
    if (event.kind == TraceEventKind::pause || event.kind == TraceEventKind::resume) phases.push_back(event);
  }
  const std::vector<TraceEvent> expected = {
      TraceEvent::pause(1, true), TraceEvent::pause(2, false), TraceEvent::resume(1), TraceEvent::resume(2),
      TraceEvent::pause(1, true), TraceEvent::pause(2, false), TraceEvent::resume(1), TraceEvent::resume(2),
  };
  EXPECT_EQ(phases, expected);
  EXPECT_EQ(summarize(*trace).iterations, 2u);
}

TEST(RlWorkload, SizesFollowTheModel) {
  const Result<Trace> trace = generate_workload("rl", {{"steps", "2"}});
  ASSERT_TRUE(trace.ok()) << trace.error().message;
  const std::vector<Moment> moments = moments_before_pauses(*trace);
  ASSERT_EQ(moments.size(), 8u);
  // Engine weights at tp 2: every matrix halved, the norms whole, 2 bytes a parameter.
  const Bytes engine = 2 * (llama2_7b_parameters - llama2_7b_norm_parameters) / 2 + 2 * llama2_7b_norm_parameters;
  EXPECT_EQ(moments[0].live[1], engine);
  EXPECT_EQ(moments[4].live[1], engine);  // loaded once, kept across steps
  // KV blocks of 16 tokens: K and V, 32 layers, 16 of 32 KV heads, head_dim 128, 2 bytes.
  const Bytes block = 16 * 2 * 32 * 16 * 128 * 2;
  EXPECT_GT(moments[0].live[2], 0u);
  EXPECT_EQ(moments[0].live[2] % block, 0u);
  EXPECT_GE(moments[4].live[2], moments[0].live[2]);  // the engine keeps its blocks
  // Before the first resume, the training step is over: the actor's fp32 weight shards (4 P / 8) remain,
  // with the decode graphs' pool (2 bytes x 32 sequences x (6144 + 2048 + 11008 + 5504 + 4096)).
  EXPECT_EQ(moments[2].live[0], 4 * llama2_7b_parameters / 8 + 2 * 32 * (6144 + 2048 + 11008 + 5504 + 4096));
  // Pausing matters: what must be resident is well below everything live at once.
  const TraceSummary summary = summarize(*trace);
  EXPECT_LT(summary.peak_resident_bytes + engine, summary.peak_live_bytes + 1);
  // Training holds the whole actor state (16 P / 8) at once.
  EXPECT_GT(summary.peak_resident_bytes, 16 * llama2_7b_parameters / 8);
}

TEST(RlWorkload, TheKvCacheGrowsWithTheSequences) {
  auto kv_bytes = [](const Settings& settings) {
    const Result<Trace> trace = generate_workload("rl", settings);
    EXPECT_TRUE(trace.ok()) << trace.error().message;
    return trace ? moments_before_pauses(*trace).front().live[2] : Bytes{0};
  };
  const Bytes short_answers = kv_bytes({{"steps", "1"}, {"mean_output", "128"}});
  const Bytes long_answers = kv_bytes({{"steps", "1"}, {"mean_output", "512"}});
  EXPECT_GT(long_answers, short_answers);
  const Bytes more = kv_bytes({{"steps", "1"}, {"rollout_batch", "64"}});
  EXPECT_GT(more, kv_bytes({{"steps", "1"}}));
}

TEST(RlWorkload, SeedsAndSettingsAreChecked) {
  const Result<Trace> one = generate_workload("rl", {{"steps", "1"}});
  const Result<Trace> other = generate_workload("rl", {{"steps", "1"}, {"seed", "2"}});
  ASSERT_TRUE(one.ok() && other.ok());
  EXPECT_FALSE(*one == *other);
  const Result<Trace> bad = generate_workload("rl", {{"max_prefill_tokens", "100"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("max_prefill_tokens=100"), std::string::npos) << bad.error().message;
}

// Settings whose trace cannot fit the event limit are refused from the parameters, before generating: the
// first of these once generated for a minute and ran out of memory. The refusal names the parameter, the
// formula and the bound (the emitter's own, after generating, says "would exceed" instead).
TEST(RlWorkload, RefusesSettingsPastTheEventLimitBeforeGenerating) {
  struct Case {
    Settings settings;
    std::string named;
  };
  const std::vector<Case> cases = {
      {{{"preset", "tiny"}, {"rollout_batch", "1048576"}, {"max_prompt", "16777216"},
        {"max_prefill_tokens", "16777216"}, {"mean_prompt", "16777216"}, {"steps", "1"}},
       "rollout_batch=1048576: "},
      {{{"preset", "tiny"}, {"mean_output", "16777216"}, {"max_output", "16777216"}, {"steps", "1000"}},
       "mean_output=16777216: "},
      {{{"preset", "tiny"}, {"rollout_batch", "1048576"}, {"micro_batch", "1"}, {"mean_prompt", "1"},
        {"mean_output", "1"}, {"steps", "1"}},
       "rollout_batch=1048576: "},
      {{{"preset", "tiny"}, {"layers", "1024"}, {"steps", "1000000"}}, "rollout_batch=32: "},
  };
  for (const Case& c : cases) {
    const Result<Trace> trace = generate_workload("rl", c.settings);
    ASSERT_FALSE(trace.ok()) << c.named;
    EXPECT_EQ(trace.error().code, Errc::invalid_argument);
    const std::string& message = trace.error().message;
    EXPECT_NE(message.find(c.named + "the trace would need at least about"), std::string::npos) << message;
    EXPECT_NE(message.find("over the limit of 20000000 events"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace tessera
