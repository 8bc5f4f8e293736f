// `inference`: LLM serving with continuous batching (Orca, vLLM). Requests arrive at seeded times with
// seeded prompt and output lengths; every scheduler step admits waiting requests up to max_batch running
// and a prefill-token budget, runs one forward pass over the prompts it admitted plus one token of every
// running request, and frees the KV cache of the requests that finished. The KV cache of a request either
// grows in place of itself (contiguous: a bigger block is allocated, the cache copied, the old one freed,
// every kv_growth_tokens tokens) or block by block (paged: one block of kv_block_tokens tokens at a time,
// asked of the allocator as it is needed).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <deque>

#include "workload/emitter.hpp"
#include "workload/engine.hpp"
#include "workload/event_estimate.hpp"
#include "workload/model.hpp"
#include "workload/random.hpp"
#include "workload/workloads.hpp"

namespace tessera::workload {
namespace {

constexpr Bytes half = 2;  // fp16/bf16 weights and activations
constexpr Bytes fp32 = 4;
constexpr Bytes int64 = 8;

struct Serving {
  ModelShape model;
  std::uint64_t tp = 1;
  std::uint64_t requests = 0;  // 0: no limit
  std::uint64_t steps = 0;     // 0: no limit
  double arrival_rate = 0;
  std::uint64_t mean_prompt = 0, max_prompt = 0, mean_output = 0, max_output = 0;
  double length_sigma = 1;
  std::uint64_t max_batch = 0;
  std::uint64_t max_prefill_tokens = 0;
  bool paged = false;
  std::uint64_t growth_tokens = 0;
  std::uint64_t block_tokens = 0;
  std::uint64_t mark_every = 1;
  std::uint64_t seed = 0;
};

struct Request {
  std::uint64_t prompt = 0;
  std::uint64_t output = 0;
  std::uint64_t generated = 0;  // tokens produced so far
  Handle cache = no_block;      // contiguous: the whole cache
  std::uint64_t capacity = 0;   // tokens the cache holds
  std::vector<Handle> blocks;   // paged
};

class Server {
 public:
  explicit Server(const Serving& serving)
      : s_(serving), emitter_("inference", {StreamId{0}}),
        kv_token_bytes_(2 * s_.model.layers * (s_.model.kv_heads / s_.tp) * s_.model.head_dim() * half) {}

  Result<Trace> run() {
    load_weights();
    Rng arrivals(s_.seed, "inference-arrivals");
    Rng lengths(s_.seed, "inference-lengths");
    std::uint64_t arrived = 0;
    std::uint64_t busy = 0;
    std::deque<Request> waiting;
    std::vector<Request> running;
    const auto more_arrive = [&] { return s_.requests == 0 || arrived < s_.requests; };
    while ((more_arrive() || !waiting.empty() || !running.empty()) && !emitter_.full()) {
      if (s_.steps != 0 && busy == s_.steps) break;
      for (std::uint64_t n = arrivals.poisson(s_.arrival_rate); n > 0 && more_arrive(); --n, ++arrived) {
        Request request;
        request.prompt = lengths.length(s_.mean_prompt, s_.max_prompt, s_.length_sigma);
        request.output = lengths.length(s_.mean_output, s_.max_output, s_.length_sigma);
        waiting.push_back(request);
      }
      if (waiting.empty() && running.empty()) continue;  // an idle step: nothing to allocate

      // Admission: first come, first served, while the batch and the prefill budget have room.
      std::vector<Request> admitted;
      std::uint64_t prefill = 0;
      while (!waiting.empty() && running.size() + admitted.size() < s_.max_batch &&
             prefill + waiting.front().prompt <= s_.max_prefill_tokens) {
        prefill += waiting.front().prompt;
        admitted.push_back(waiting.front());
        waiting.pop_front();
      }
      if (busy % s_.mark_every == 0) emitter_.iteration(busy / s_.mark_every);
      ++busy;

      // The scheduler makes room in the caches before the step: the prompts of the new requests, one more
      // token for every running one.
      for (Request& request : admitted) reserve_cache(request, request.prompt);
      for (Request& request : running) reserve_cache(request, request.prompt + request.generated);
      forward(prefill + running.size(), admitted.size() + running.size());

      for (Request& request : running) ++request.generated;
      for (Request& request : admitted) request.generated = 1;  // the prefill samples the first token
      running.insert(running.end(), admitted.begin(), admitted.end());
      std::erase_if(running, [this](Request& request) {
        if (request.generated < request.output) return false;
        release_cache(request);
        return true;
      });
    }
    // The window ends: requests still running are cancelled and their caches freed.
    for (Request& request : running) release_cache(request);
    return std::move(emitter_).finish("steps or requests");
  }

 private:
  void load_weights() { load_engine_weights(emitter_, s_.model, s_.tp, s_.max_prompt + s_.max_output); }

  void reserve_cache(Request& request, std::uint64_t tokens) {
    if (s_.paged) {
      while (request.blocks.size() * s_.block_tokens < tokens && !emitter_.full()) {
        request.blocks.push_back(emitter_.alloc(kv_token_bytes_ * s_.block_tokens));
      }
      return;
    }
    if (tokens <= request.capacity) return;
    // A bigger cache, the old one copied into it, then freed: the realloc a growing tensor makes.
    const std::uint64_t capacity = ceil_div(tokens, s_.growth_tokens) * s_.growth_tokens;
    const Handle bigger = emitter_.alloc(kv_token_bytes_ * capacity);
    emitter_.free(request.cache);
    request.cache = bigger;
    request.capacity = capacity;
  }

  void release_cache(Request& request) {
    emitter_.free(request.cache);
    request.cache = no_block;
    for (const Handle block : request.blocks) emitter_.free(block);
    request.blocks.clear();
  }

  // One forward pass over `tokens` tokens of `sequences` sequences, eager PyTorch style: every layer's
  // outputs are new tensors, freed when the next op is done with them; attention writes K and V into the
  // caches and keeps nothing else (FlashAttention / PagedAttention kernels).
  void forward(std::uint64_t tokens, std::uint64_t sequences) {
    const ModelShape& m = s_.model;
    const std::uint64_t t = s_.tp;
    const std::uint64_t h = m.hidden;
    const Handle ids = emitter_.alloc(int64 * tokens);
    const Handle positions = emitter_.alloc(int64 * tokens);
    const Handle slots = emitter_.alloc(int64 * tokens);  // where each token's K and V go in the caches
    Handle hidden = emitter_.alloc(half * tokens * h);
    if (m.learned_positions) emitter_.free(emitter_.alloc(half * tokens * h));  // position embeddings, added
    const Handle residual = emitter_.alloc(half * tokens * h);  // the fused add+norm keeps the residual apart
    hidden = run_layers(emitter_, m, t, tokens, hidden);
    // Logits of each sequence's last token only, gathered over tp, sampled in fp32.
    const std::uint64_t vocab = padded_vocab(m.vocab, t);
    const Handle last = emitter_.alloc(half * sequences * h);
    const Handle logits = emitter_.alloc(half * sequences * vocab);
    const Handle wide = emitter_.alloc(fp32 * sequences * vocab);
    emitter_.free(logits);
    const Handle probabilities = emitter_.alloc(fp32 * sequences * vocab);
    const Handle sampled = emitter_.alloc(int64 * sequences);
    emitter_.free(probabilities);
    emitter_.free(wide);
    emitter_.free(last);
    emitter_.free(sampled);
    emitter_.free(residual);
    emitter_.free(hidden);
    emitter_.free(slots);
    emitter_.free(positions);
    emitter_.free(ids);
  }

  const Serving& s_;
  Emitter emitter_;
  const Bytes kv_token_bytes_;  // K and V of one token in every layer, this device's KV heads
};

// The events of the settings, counted low (lengths at their means, the fewest events of a step), so that a
// refusal is sure and comes before the requests are drawn.
std::vector<EventTerm> inference_event_terms(const Serving& s) {
  // Busy steps: `steps`, or fewer when the requests are served first (a step makes at most max_batch tokens).
  const std::uint64_t serving_steps = saturating_mul(s.requests, s.mean_output) / s.max_batch;
  std::uint64_t busy = s.steps;
  if (s.requests != 0) busy = s.steps == 0 ? serving_steps : std::min(s.steps, serving_steps);
  // Requests that arrive: each is held until it is served, and then allocates its KV cache.
  const auto arriving_while_busy = static_cast<double>(busy) * s.arrival_rate;
  std::uint64_t arriving = arriving_while_busy >= 1.8e19 ? saturated : static_cast<std::uint64_t>(arriving_while_busy);
  if (s.requests != 0) arriving = s.steps == 0 ? s.requests : std::min(s.requests, arriving);
  return {
      // A step's forward pass: 12 events a layer.
      {s.steps != 0 ? "steps" : "requests",
       fmt::format("{} busy steps (steps={}, or requests={} x mean_output={} / max_batch={}) x 12 x layers={}", busy,
                   s.steps, s.requests, s.mean_output, s.max_batch, s.model.layers),
       saturating_product({busy, 12, s.model.layers})},
      {"arrival_rate",
       fmt::format("requests arriving ({} busy steps x arrival_rate={}, at most requests={} if set), each a KV "
                   "cache allocation",
                   busy, s.arrival_rate, s.requests),
       arriving},
  };
}

}  // namespace

WorkloadDescription inference_description() {
  std::vector<WorkloadParameter> parameters = model_parameters("llama2-7b", {.seq = false, .dropout = false});
  const std::vector<WorkloadParameter> own = {
      {"steps", "480",
       "scheduler steps that run a batch; requests still running then are cancelled; 0 = until every request is served"},
      {"requests", "0", "requests that arrive in all; 0 = no limit (steps must then be set)"},
      {"arrival_rate", "0.25", "mean requests arriving per scheduler step (Poisson)"},
      {"mean_prompt", "512", "mean prompt length in tokens (log-normal, clipped to max_prompt)"},
      {"max_prompt", "2048", "longest prompt"},
      {"mean_output", "128", "mean output length in tokens (log-normal, clipped to max_output)"},
      {"max_output", "512", "longest output"},
      {"length_sigma", "1", "sigma of the log-normal lengths (0 = every request at the mean)"},
      {"max_batch", "32", "most requests running at once"},
      {"max_prefill_tokens", "4096", "prompt tokens admitted per step at most (>= max_prompt)"},
      {"kv", "contiguous", "KV cache: contiguous (one block per request, reallocated bigger as it grows) or paged"},
      {"kv_growth_tokens", "16", "contiguous: the cache grows by this many tokens at a time"},
      {"kv_block_tokens", "16", "paged: tokens per KV block (vLLM's block_size)"},
      {"mark_every", "16", "an iteration event every this many scheduler steps"},
      {"seed", "1", "random seed (arrivals and lengths)"},
  };
  parameters.insert(parameters.end(), own.begin(), own.end());
  return {"inference",
          "LLM serving with continuous batching: seeded arrivals and lengths, KV caches that grow per token and "
          "are freed when requests finish, per-layer temporaries every step",
          std::move(parameters), preset_names(false)};
}

Result<Trace> generate_inference(const Parameters& parameters) {
  ParameterReader reader(parameters);
  Serving s;
  s.model = read_model(reader, {.seq = false, .dropout = false});
  s.tp = reader.integer("tp", 1, 1024);
  s.steps = reader.integer("steps", 0, 100'000'000);
  s.requests = reader.integer("requests", 0, 100'000'000);
  s.arrival_rate = reader.number("arrival_rate", 0.001, 1e6);
  s.mean_prompt = reader.integer("mean_prompt", 1, 1 << 24);
  s.max_prompt = reader.integer("max_prompt", 1, 1 << 24);
  s.mean_output = reader.integer("mean_output", 1, 1 << 24);
  s.max_output = reader.integer("max_output", 1, 1 << 24);
  s.length_sigma = reader.number("length_sigma", 0, 4);
  s.max_batch = reader.integer("max_batch", 1, 1 << 20);
  s.max_prefill_tokens = reader.integer("max_prefill_tokens", 1, 1 << 30);
  s.paged = reader.choice("kv", {"contiguous", "paged"}) == 1;
  s.growth_tokens = reader.integer("kv_growth_tokens", 1, 1 << 20);
  s.block_tokens = reader.integer("kv_block_tokens", 1, 1 << 20);
  s.mark_every = reader.integer("mark_every", 1, 1 << 30);
  s.seed = reader.integer("seed", 0, UINT64_MAX);
  if (reader.ok()) {
    reader.require(s.steps != 0 || s.requests != 0, "steps", "and requests=0 would never end");
    check_engine_settings(reader, s.model, s.tp,
                          {s.mean_prompt, s.max_prompt, s.mean_output, s.max_output, s.max_prefill_tokens});
  }
  refuse_past_event_limit(reader, inference_event_terms(s));
  if (auto status = reader.status(); !status) return std::move(status).error();
  return Server(s).run();
}

}  // namespace tessera::workload
