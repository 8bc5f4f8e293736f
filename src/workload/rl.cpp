// `rl`: colocated reinforcement-learning post-training on one device (the verl / OpenRLHF way): an inference
// engine and the trained actor share the GPU and take turns. Every RL step is
//
//   rollout   the engine generates answers: its weights (tag "weights", loaded once), a paged KV cache
//             (tag "kv_cache") that grows block by block as the sequences grow, and untagged activations;
//   sleep     pause "weights" with backup (copied to host memory), "kv_cache" without (its content is
//             recomputed by the next rollout);
//   training  the actor, sharded over `fsdp` devices (FSDP / ZeRO-3), loaded from host memory: fp32
//             weights, fp32 gradients, Adam's two fp32 moments, each layer gathered whole in bf16 while it
//             runs; activations of micro-batches, with activation checkpointing when `recompute` is set;
//   wake      resume "weights", copy the new actor weights into the engine (a layer gathered at a time),
//             offload the actor, resume "kv_cache".
//
// All sizes follow from the model shape; the formulas are beside each allocation. Per device, with P the
// parameter count: engine weights 2 P / tp bytes; KV cache 2 (K and V) x layers x kv_heads / tp x head_dim x
// 2 bytes a token, in blocks of kv_block_tokens tokens; actor state 16 P / fsdp bytes (4 weights, 4
// gradients, 8 Adam). The defaults: Llama 2 7B, the engine at tensor parallelism 2, the actor sharded over
// 8 GPUs: 6.7 GB of engine weights, 13.5 GB of actor state, a KV cache of a few GB.
//
// Assumptions: decoding runs under CUDA graphs, so its per-layer activations live in one pool allocated when
// the engine starts (untagged, as vLLM's graph pool is ordinary allocator memory) and a decode step
// allocates only the sampling buffers; prefill runs eagerly, a chunk of at most max_prefill_tokens at a
// time. The engine keeps the KV blocks it allocated: a finished sequence's blocks go back to its free list,
// not to the allocator.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "workload/actor_training.hpp"
#include "workload/emitter.hpp"
#include "workload/engine.hpp"
#include "workload/event_estimate.hpp"
#include "workload/model.hpp"
#include "workload/random.hpp"
#include "workload/workloads.hpp"

namespace tessera::workload {
namespace {

constexpr Bytes half = 2;  // bf16 weights and activations
constexpr Bytes int64 = 8;

struct RlSettings {
  ModelShape model;
  std::uint64_t tp = 1;    // the engine's tensor parallelism
  std::uint64_t fsdp = 1;  // devices the actor is sharded over
  std::uint64_t steps = 1;
  std::uint64_t rollout_batch = 1;
  std::uint64_t mean_prompt = 0, max_prompt = 0, mean_output = 0, max_output = 0;
  double length_sigma = 0;
  std::uint64_t max_prefill_tokens = 0;
  std::uint64_t block_tokens = 0;
  std::uint64_t micro_batch = 1;
  bool recompute = true;
  std::uint64_t seed = 0;
};

struct Sequence {
  std::uint64_t prompt = 0;
  std::uint64_t output = 0;
  std::uint64_t tokens = 0;      // in the KV cache so far
  std::vector<Handle> blocks;    // KV blocks taken from the engine
};

class Colocated {
 public:
  explicit Colocated(const RlSettings& settings)
      : s_(settings), emitter_("rl", {StreamId{0}}),
        weights_(emitter_.tag("weights")), kv_cache_(emitter_.tag("kv_cache")),
        actor_({s_.model, s_.fsdp, s_.micro_batch, s_.recompute, s_.max_prompt + s_.max_output}, emitter_),
        // K and V of one token in every layer, this device's KV heads.
        kv_block_bytes_(2 * s_.model.layers * (s_.model.kv_heads / s_.tp) * s_.model.head_dim() * half *
                        s_.block_tokens) {}

  Result<Trace> run() {
    start_engine();
    for (std::uint64_t step = 0; step < s_.steps && !emitter_.full(); ++step) {
      emitter_.iteration(step);
      const std::vector<Sequence> sequences = rollout(step);
      emitter_.pause(weights_, /*backup=*/true);
      emitter_.pause(kv_cache_, /*backup=*/false);
      std::vector<std::uint64_t> lengths;
      for (const Sequence& sequence : sequences) lengths.push_back(sequence.prompt + sequence.output);
      actor_.train(lengths);
      wake();
    }
    return std::move(emitter_).finish("steps or rollout_batch");
  }

 private:
  // The engine's weights, one tensor per parameter as a loader creates them (QKV and gate+up fused), 2 P /
  // tp bytes; norms and row-parallel biases replicated over tp. And the CUDA-graph pool of decoding: one
  // layer's activations for a full batch (QKV, attention, MLP in and out), which the graphs reuse layer
  // after layer.
  void start_engine() {
    const ModelShape& m = s_.model;
    const std::uint64_t t = s_.tp;
    const std::uint64_t h = m.hidden;
    load_engine_weights(emitter_, m, t, s_.max_prompt + s_.max_output, {0, weights_});
    emitter_.alloc(half * s_.rollout_batch * (m.qkv_features() / t + h / t + m.fc1_features() / t + m.ffn / t + h));
  }

  // KV blocks until the sequence's cache holds `tokens`: from the engine's free list, else new.
  void reserve(Sequence& sequence, std::uint64_t tokens) {
    while (sequence.blocks.size() * s_.block_tokens < tokens && !emitter_.full()) {
      if (!free_blocks_.empty()) {
        sequence.blocks.push_back(free_blocks_.back());
        free_blocks_.pop_back();
      } else {
        sequence.blocks.push_back(emitter_.alloc(kv_block_bytes_, 0, kv_cache_));
      }
    }
    sequence.tokens = tokens;
  }

  void give_back(Sequence& sequence) {
    free_blocks_.insert(free_blocks_.end(), sequence.blocks.begin(), sequence.blocks.end());
    sequence.blocks.clear();
  }

  std::vector<Sequence> rollout(std::uint64_t step) {
    Rng lengths(mix(s_.seed, step), "rl-lengths");
    std::vector<Sequence> sequences(s_.rollout_batch);
    for (Sequence& sequence : sequences) {
      sequence.prompt = lengths.length(s_.mean_prompt, s_.max_prompt, s_.length_sigma);
      sequence.output = lengths.length(s_.mean_output, s_.max_output, s_.length_sigma);
    }
    // Prefill: chunks of whole prompts within the token budget, each an eager forward pass.
    for (std::size_t first = 0; first < sequences.size() && !emitter_.full();) {
      std::uint64_t tokens = 0;
      std::size_t end = first;
      while (end < sequences.size() && (end == first || tokens + sequences[end].prompt <= s_.max_prefill_tokens)) {
        tokens += sequences[end].prompt;
        reserve(sequences[end], sequences[end].prompt);
        ++end;
      }
      prefill(tokens, end - first);
      first = end;
    }
    // Decode: one token of every running sequence a step; a finished sequence's blocks return to the engine.
    std::uint64_t running = sequences.size();
    for (std::uint64_t generated = 1; running > 0 && !emitter_.full(); ++generated) {
      running = 0;
      for (Sequence& sequence : sequences) {
        if (generated >= sequence.output) {
          if (!sequence.blocks.empty()) give_back(sequence);
          continue;
        }
        reserve(sequence, sequence.prompt + generated);
        ++running;
      }
      if (running > 0) sample(emitter_, s_.model, s_.tp, running);
    }
    return sequences;
  }

  // An eager forward pass over `tokens` prompt tokens: every op's output a new tensor, freed when the next
  // op is done with it; attention writes K and V into the cache.
  void prefill(std::uint64_t tokens, std::uint64_t sequences) {
    const ModelShape& m = s_.model;
    const std::uint64_t t = s_.tp;
    const std::uint64_t h = m.hidden;
    const Handle ids = emitter_.alloc(int64 * tokens);
    Handle hidden = emitter_.alloc(half * tokens * h);
    const Handle residual = emitter_.alloc(half * tokens * h);
    hidden = run_layers(emitter_, m, t, tokens, hidden);
    sample(emitter_, s_.model, s_.tp, sequences);
    emitter_.free(residual);
    emitter_.free(hidden);
    emitter_.free(ids);
  }

  // Wake: the engine's weights first, the new actor weights copied in (a unit gathered in bf16 at a time),
  // the actor offloaded, then the KV cache.
  void wake() {
    emitter_.resume(weights_);
    actor_.hand_over();
    emitter_.resume(kv_cache_);
  }

  const RlSettings& s_;
  Emitter emitter_;
  const TraceTag weights_;
  const TraceTag kv_cache_;
  ActorTraining actor_;
  const Bytes kv_block_bytes_;
  std::vector<Handle> free_blocks_;  // KV blocks the engine holds and no sequence uses
};

// The events of the settings, counted low (lengths at their means, the fewest events of each phase), so
// that a refusal is sure and comes before the rollouts are drawn.
std::vector<EventTerm> rl_event_terms(const RlSettings& s) {
  const std::uint64_t layers = s.model.layers;
  const std::uint64_t prompt_tokens = saturating_mul(s.rollout_batch, s.mean_prompt);
  // Prefill chunks hold whole prompts within max_prefill_tokens: each a forward pass, 12 events a layer.
  const std::uint64_t chunks = std::max<std::uint64_t>(1, prompt_tokens / s.max_prefill_tokens);
  return {
      // Every prompt's KV blocks are taken before any sequence finishes.
      {"rollout_batch",
       fmt::format("rollout_batch={} x mean_prompt={} / kv_block_tokens={} KV blocks", s.rollout_batch, s.mean_prompt,
                   s.block_tokens),
       saturating_mul(s.rollout_batch, std::max<std::uint64_t>(1, s.mean_prompt / s.block_tokens))},
      {"rollout_batch",
       fmt::format("steps={} x rollout_batch={} x mean_prompt={} / max_prefill_tokens={} prefill chunks x 12 x "
                   "layers={}",
                   s.steps, s.rollout_batch, s.mean_prompt, s.max_prefill_tokens, layers),
       saturating_product({s.steps, chunks, 12, layers})},
      // A decode step samples: 8 events, until the longest answer is done.
      {"mean_output", fmt::format("steps={} x mean_output={} x 8 sampling events", s.steps, s.mean_output),
       saturating_product({s.steps, s.mean_output - 1, 8})},
      // A micro-batch's forward and backward: at least 20 events a layer.
      {"rollout_batch",
       fmt::format("steps={} x rollout_batch={} / micro_batch={} micro-batches x 20 x layers={}", s.steps,
                   s.rollout_batch, s.micro_batch, layers),
       saturating_product({s.steps, ceil_div(s.rollout_batch, s.micro_batch), 20, layers})},
      {"steps", fmt::format("steps={} x layers={} x 8 optimizer and wake events", s.steps, layers),
       saturating_product({s.steps, layers, 8})},
  };
}

}  // namespace

WorkloadDescription rl_description() {
  std::vector<WorkloadParameter> parameters = model_parameters("llama2-7b-tp2", {.seq = false, .dropout = false});
  const std::vector<WorkloadParameter> own = {
      {"steps", "3", "RL steps: rollout, sleep, training, wake"},
      {"fsdp", "8", "devices the actor's weights, gradients and optimizer states are sharded over (FSDP / ZeRO-3)"},
      {"rollout_batch", "32", "sequences this device's engine generates per rollout, and the actor trains on"},
      {"mean_prompt", "256", "mean prompt length in tokens (log-normal, clipped to max_prompt)"},
      {"max_prompt", "1024", "longest prompt"},
      {"mean_output", "384", "mean answer length in tokens (log-normal, clipped to max_output)"},
      {"max_output", "1024", "longest answer"},
      {"length_sigma", "0.6", "sigma of the log-normal lengths (0 = every sequence at the mean)"},
      {"max_prefill_tokens", "8192", "prompt tokens of one prefill chunk at most (>= max_prompt)"},
      {"kv_block_tokens", "16", "tokens per KV block (vLLM's block_size)"},
      {"micro_batch", "4", "sequences of a training micro-batch, padded to the longest"},
      {"recompute", "true", "activation checkpointing: a layer keeps its input and recomputes the rest in backward"},
      {"seed", "1", "random seed (lengths)"},
  };
  parameters.insert(parameters.end(), own.begin(), own.end());
  return {"rl",
          "colocated RL post-training: rollout (engine weights and a growing KV cache, tagged), sleep (weights "
          "paused with backup, KV cache without), FSDP training, wake",
          std::move(parameters), preset_names(false)};
}

Result<Trace> generate_rl(const Parameters& parameters) {
  ParameterReader reader(parameters);
  RlSettings s;
  s.model = read_model(reader, {.seq = false, .dropout = false});
  s.tp = reader.integer("tp", 1, 1024);
  s.fsdp = reader.integer("fsdp", 1, 1 << 20);
  s.steps = reader.integer("steps", 1, 1'000'000);
  s.rollout_batch = reader.integer("rollout_batch", 1, 1 << 20);
  s.mean_prompt = reader.integer("mean_prompt", 1, 1 << 24);
  s.max_prompt = reader.integer("max_prompt", 1, 1 << 24);
  s.mean_output = reader.integer("mean_output", 1, 1 << 24);
  s.max_output = reader.integer("max_output", 1, 1 << 24);
  s.length_sigma = reader.number("length_sigma", 0, 4);
  s.max_prefill_tokens = reader.integer("max_prefill_tokens", 1, 1 << 30);
  s.block_tokens = reader.integer("kv_block_tokens", 1, 1 << 20);
  s.micro_batch = reader.integer("micro_batch", 1, 1 << 20);
  s.recompute = reader.flag("recompute");
  s.seed = reader.integer("seed", 0, UINT64_MAX);
  if (reader.ok()) {
    check_engine_settings(reader, s.model, s.tp,
                          {s.mean_prompt, s.max_prompt, s.mean_output, s.max_output, s.max_prefill_tokens});
  }
  refuse_past_event_limit(reader, rl_event_terms(s));
  if (auto status = reader.status(); !status) return std::move(status).error();
  return Colocated(s).run();
}

}  // namespace tessera::workload
