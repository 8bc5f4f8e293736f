// `serving`: an inference engine that serves with CUDA graphs and sleeps while a colocated trainer runs, as
// RL stacks drive vLLM's or SGLang's sleep mode. At start the engine
//
//   loads    its weights (tag "weights") and preallocates its KV cache, one K and V tensor per layer sized for
//            kv_tokens tokens (tag "kv_cache"), as vLLM sizes it from the memory it may use;
//   captures one decode graph per batch size (1, 2, 4, then every multiple of 8 up to max_graph_batch, largest
//            first, as vLLM does), all into one shared graph pool on the capture stream (stream 1) under tag
//            "graph": a warm-up pass outside the pool, then the captured pass, whose output the graph keeps.
//            The graphs' static inputs (token ids, positions, KV slots for the largest batch) are tagged
//            "graph" too.
//
// Then, every cycle:
//
//   serve    `requests` requests arrive (Poisson, arrival_rate a step) with seeded lengths; continuous batching
//            admits them while the batch, the prefill budget and the KV cache have room; a step with new
//            requests is an eager prefill, one without is a decode, replayed from the smallest captured graph
//            that holds the batch (no allocation) or run eagerly past max_graph_batch; every step samples
//            eagerly. Paged KV blocks come from the preallocated cache: no allocation.
//   sleep    pause "weights" (with backup at sleep_level 1, without at 2), "kv_cache" and "graph" without (the
//            graphs rewrite their memory at every replay);
//   train    the actor (workload/actor_training.hpp) trains one step on the cycle's sequences;
//   wake     resume "weights", copy the new actor weights in, resume "kv_cache" and "graph".
//
// At the end the graphs are destroyed: their outputs freed and the pool released once per capture.
#include <fmt/format.h>

#include <algorithm>
#include <deque>

#include "workload/actor_training.hpp"
#include "workload/emitter.hpp"
#include "workload/engine.hpp"
#include "workload/event_estimate.hpp"
#include "workload/model.hpp"
#include "workload/random.hpp"
#include "workload/workloads.hpp"

namespace tessera::workload {
namespace {

constexpr Bytes half = 2;
constexpr Bytes int64 = 8;
constexpr std::uint32_t eager = 0;    // the engine's stream
constexpr std::uint32_t capture = 1;  // the stream graphs are captured on
constexpr PoolId graph_pool_id{1, 0};  // the engine's one graph pool (torch.cuda.graph_pool_handle())

struct ServingSettings {
  ModelShape model;
  std::uint64_t tp = 1;
  std::uint64_t fsdp = 1;
  std::uint64_t cycles = 1;
  std::uint64_t requests = 1;  // per cycle
  double arrival_rate = 1;
  std::uint64_t mean_prompt = 0, max_prompt = 0, mean_output = 0, max_output = 0;
  double length_sigma = 0;
  std::uint64_t max_batch = 1;
  std::uint64_t max_prefill_tokens = 0;
  std::uint64_t kv_tokens = 0;
  std::uint64_t max_graph_batch = 0;
  std::uint64_t sleep_level = 1;
  std::uint64_t micro_batch = 1;
  bool recompute = true;
  std::uint64_t seed = 0;
};

// The decode batch sizes captured, largest first: 1, 2, 4, then multiples of 8 up to the largest.
std::vector<std::uint64_t> graph_batches(std::uint64_t largest) {
  std::vector<std::uint64_t> sizes;
  for (const std::uint64_t small : {1, 2, 4}) {
    if (small <= largest) sizes.push_back(small);
  }
  for (std::uint64_t size = 8; size <= largest; size += 8) sizes.push_back(size);
  if (largest > 4 && sizes.back() != largest) sizes.push_back(largest);
  std::reverse(sizes.begin(), sizes.end());
  return sizes;
}

struct Request {
  std::uint64_t prompt = 0;
  std::uint64_t output = 0;
  std::uint64_t generated = 0;
};

class ServingEngine {
 public:
  explicit ServingEngine(const ServingSettings& settings)
      : s_(settings), emitter_("serving", {StreamId{0}, StreamId{1}}), weights_(emitter_.tag("weights")),
        kv_cache_(emitter_.tag("kv_cache")), graph_(emitter_.tag("graph")),
        pool_(emitter_.pool(graph_pool_id, PoolKind::graph)),
        actor_({s_.model, s_.fsdp, s_.micro_batch, s_.recompute, s_.max_prompt + s_.max_output}, emitter_),
        batches_(graph_batches(s_.max_graph_batch)) {}

  Result<Trace> run() {
    start();
    for (std::uint64_t cycle = 0; cycle < s_.cycles && !emitter_.full(); ++cycle) {
      emitter_.iteration(cycle);
      const std::vector<std::uint64_t> lengths = serve(cycle);
      emitter_.pause(weights_, /*backup=*/s_.sleep_level == 1);
      emitter_.pause(kv_cache_, /*backup=*/false);
      if (!batches_.empty()) emitter_.pause(graph_, /*backup=*/false);
      actor_.train(lengths);
      emitter_.resume(weights_);
      actor_.hand_over();
      emitter_.resume(kv_cache_);
      if (!batches_.empty()) emitter_.resume(graph_);
    }
    shut_down();
    return std::move(emitter_).finish("cycles or requests");
  }

 private:
  void start() {
    const ModelShape& m = s_.model;
    load_engine_weights(emitter_, m, s_.tp, s_.max_prompt + s_.max_output, {eager, weights_});
    const Bytes kv_layer = 2 * (m.kv_heads / s_.tp) * m.head_dim() * half * s_.kv_tokens;  // K and V
    for (std::uint64_t l = 0; l < m.layers; ++l) emitter_.alloc(kv_layer, eager, kv_cache_);
    if (batches_.empty()) return;
    for (int input = 0; input < 3; ++input) {  // token ids, positions, KV slots
      static_inputs_.push_back(emitter_.alloc(int64 * batches_.front(), eager, graph_));
    }
    for (const std::uint64_t batch : batches_) {
      emitter_.free(pass(batch, {capture, trace_default_tag}));  // the warm-up, outside the pool
      emitter_.begin_pool(pool_, capture);
      outputs_.push_back(pass(batch, {capture, graph_}));
      emitter_.end_pool(pool_);
    }
  }

  // One pass of the layers over `tokens` tokens from a new hidden state and residual; the output is the caller's.
  Handle pass(std::uint64_t tokens, Placing placing) {
    const Bytes bytes = half * tokens * s_.model.hidden;
    const Handle hidden = emitter_.alloc(bytes, placing.stream, placing.tag);
    const Handle residual = emitter_.alloc(bytes, placing.stream, placing.tag);
    const Handle output = run_layers(emitter_, s_.model, s_.tp, tokens, hidden, placing);
    emitter_.free(residual);
    return output;
  }

  // Serves the cycle's requests to the end; the lengths (prompt and answer) of those served, in order.
  std::vector<std::uint64_t> serve(std::uint64_t cycle) {
    Rng arrivals(mix(s_.seed, cycle), "serving-arrivals");
    Rng lengths(mix(s_.seed, cycle), "serving-lengths");
    std::uint64_t arrived = 0;
    std::uint64_t kv_used = 0;  // tokens the running requests may fill, reserved at admission
    std::deque<Request> waiting;
    std::vector<Request> running;
    std::vector<std::uint64_t> served;
    while ((arrived < s_.requests || !waiting.empty() || !running.empty()) && !emitter_.full()) {
      for (std::uint64_t n = arrivals.poisson(s_.arrival_rate); n > 0 && arrived < s_.requests; --n, ++arrived) {
        Request request;
        request.prompt = lengths.length(s_.mean_prompt, s_.max_prompt, s_.length_sigma);
        request.output = lengths.length(s_.mean_output, s_.max_output, s_.length_sigma);
        waiting.push_back(request);
      }
      std::vector<Request> admitted;
      std::uint64_t prefill = 0;
      while (!waiting.empty() && running.size() + admitted.size() < s_.max_batch &&
             prefill + waiting.front().prompt <= s_.max_prefill_tokens &&
             kv_used + waiting.front().prompt + waiting.front().output <= s_.kv_tokens) {
        prefill += waiting.front().prompt;
        kv_used += waiting.front().prompt + waiting.front().output;
        admitted.push_back(waiting.front());
        waiting.pop_front();
      }
      if (!admitted.empty()) {
        emitter_.free(pass(prefill, {eager, trace_default_tag}));
        sample(emitter_, s_.model, s_.tp, admitted.size());
        for (Request& request : admitted) request.generated = 1;
        running.insert(running.end(), admitted.begin(), admitted.end());
      } else if (!running.empty()) {
        if (running.size() > s_.max_graph_batch) emitter_.free(pass(running.size(), {eager, trace_default_tag}));
        sample(emitter_, s_.model, s_.tp, running.size());
        for (Request& request : running) ++request.generated;
      }
      std::erase_if(running, [&](const Request& request) {
        if (request.generated < request.output) return false;
        kv_used -= request.prompt + request.output;
        served.push_back(request.prompt + request.output);
        return true;
      });
    }
    return served;
  }

  void shut_down() {
    for (const Handle output : outputs_) emitter_.free(output);
    for (const Handle input : static_inputs_) emitter_.free(input);
    for (std::size_t graph = 0; graph < outputs_.size(); ++graph) emitter_.release_pool(pool_);
  }

  const ServingSettings& s_;
  Emitter emitter_;
  const TraceTag weights_;
  const TraceTag kv_cache_;
  const TraceTag graph_;
  const std::uint32_t pool_;
  ActorTraining actor_;
  const std::vector<std::uint64_t> batches_;
  std::vector<Handle> static_inputs_;
  std::vector<Handle> outputs_;  // each graph's output, kept until the graph is destroyed
};

// The events of the settings, counted low, so that a refusal is sure and comes before anything is drawn.
std::vector<EventTerm> serving_event_terms(const ServingSettings& s) {
  const std::uint64_t layers = s.model.layers;
  const std::uint64_t decode_steps = saturating_mul(s.requests, s.mean_output) / s.max_batch;
  const std::uint64_t graphs = graph_batches(s.max_graph_batch).size();
  return {
      {"max_graph_batch", fmt::format("{} captured graphs x 2 passes x 12 x layers={}", graphs, layers),
       saturating_product({graphs, 2, 12, layers})},
      {"requests",
       fmt::format("cycles={} x requests={} x mean_output={} / max_batch={} decode steps x 8 sampling events",
                   s.cycles, s.requests, s.mean_output, s.max_batch),
       saturating_product({s.cycles, decode_steps, 8})},
      {"requests",
       fmt::format("cycles={} x requests={} / micro_batch={} micro-batches x 20 x layers={}", s.cycles, s.requests,
                   s.micro_batch, layers),
       saturating_product({s.cycles, ceil_div(s.requests, s.micro_batch), 20, layers})},
  };
}

}  // namespace

WorkloadDescription serving_description() {
  std::vector<WorkloadParameter> parameters = model_parameters("llama2-7b", {.seq = false, .dropout = false});
  const std::vector<WorkloadParameter> own = {
      {"cycles", "3", "serve, sleep, train, wake cycles"},
      {"requests", "64", "requests served per cycle"},
      {"arrival_rate", "4", "mean requests arriving per scheduler step (Poisson)"},
      {"mean_prompt", "512", "mean prompt length in tokens (log-normal, clipped to max_prompt)"},
      {"max_prompt", "2048", "longest prompt"},
      {"mean_output", "256", "mean answer length in tokens (log-normal, clipped to max_output)"},
      {"max_output", "1024", "longest answer"},
      {"length_sigma", "0.8", "sigma of the log-normal lengths (0 = every request at the mean)"},
      {"max_batch", "64", "most requests running at once"},
      {"max_prefill_tokens", "8192", "prompt tokens admitted per step at most (>= max_prompt)"},
      {"kv_tokens", "32768", "tokens the preallocated KV cache holds (>= max_prompt + max_output)"},
      {"max_graph_batch", "64", "the largest decode batch captured as a CUDA graph; 0 = no graphs"},
      {"sleep_level", "1", "1: the weights are backed up to host memory while asleep; 2: discarded too"},
      {"fsdp", "8", "devices the trained actor is sharded over (FSDP / ZeRO-3)"},
      {"micro_batch", "4", "sequences of a training micro-batch, padded to the longest"},
      {"recompute", "true", "activation checkpointing in training"},
      {"seed", "1", "random seed (arrivals and lengths)"},
  };
  parameters.insert(parameters.end(), own.begin(), own.end());
  return {"serving",
          "an engine with CUDA graphs in one shared graph pool and sleep mode, colocated with training: weights, "
          "KV cache and graph memory tagged and paused every cycle",
          std::move(parameters), preset_names(false)};
}

Result<Trace> generate_serving(const Parameters& parameters) {
  ParameterReader reader(parameters);
  ServingSettings s;
  s.model = read_model(reader, {.seq = false, .dropout = false});
  s.tp = reader.integer("tp", 1, 1024);
  s.cycles = reader.integer("cycles", 1, 1'000'000);
  s.requests = reader.integer("requests", 1, 1 << 24);
  s.arrival_rate = reader.number("arrival_rate", 0.001, 1e6);
  s.mean_prompt = reader.integer("mean_prompt", 1, 1 << 24);
  s.max_prompt = reader.integer("max_prompt", 1, 1 << 24);
  s.mean_output = reader.integer("mean_output", 1, 1 << 24);
  s.max_output = reader.integer("max_output", 1, 1 << 24);
  s.length_sigma = reader.number("length_sigma", 0, 4);
  s.max_batch = reader.integer("max_batch", 1, 1 << 20);
  s.max_prefill_tokens = reader.integer("max_prefill_tokens", 1, 1 << 30);
  s.kv_tokens = reader.integer("kv_tokens", 1, 1ULL << 40);
  s.max_graph_batch = reader.integer("max_graph_batch", 0, 1 << 16);
  s.sleep_level = reader.integer("sleep_level", 1, 2);
  s.fsdp = reader.integer("fsdp", 1, 1 << 20);
  s.micro_batch = reader.integer("micro_batch", 1, 1 << 20);
  s.recompute = reader.flag("recompute");
  s.seed = reader.integer("seed", 0, UINT64_MAX);
  if (reader.ok()) {
    check_engine_settings(reader, s.model, s.tp,
                          {s.mean_prompt, s.max_prompt, s.mean_output, s.max_output, s.max_prefill_tokens});
    reader.require(s.kv_tokens >= s.max_prompt + s.max_output, "kv_tokens",
                   fmt::format("must hold the longest request, max_prompt + max_output = {}", s.max_prompt + s.max_output));
    reader.require(s.max_graph_batch <= s.max_batch, "max_graph_batch",
                   fmt::format("must not exceed max_batch={}", s.max_batch));
  }
  refuse_past_event_limit(reader, serving_event_terms(s));
  if (auto status = reader.status(); !status) return std::move(status).error();
  return ServingEngine(s).run();
}

}  // namespace tessera::workload
