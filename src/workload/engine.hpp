// What an inference engine allocates (the `inference`, `rl` and `serving` workloads): its weights, an eager
// pass through the layers, and the sampling buffers of a step. fp16/bf16 weights and activations.
#pragma once

#include <cstdint>

#include "workload/emitter.hpp"
#include "workload/model.hpp"
#include "workload/parameters.hpp"

namespace tessera::workload {

// Where an engine's allocations go: a stream (an index of the trace's stream table) and a tag.
struct Placing {
  std::uint32_t stream = 0;
  TraceTag tag = trace_default_tag;
};

// One tensor per parameter, as a model loader creates them (QKV and gate+up fused), 2 P / tp bytes; norms and
// row-parallel biases replicated over tp. `positions`: the rows of learned position embeddings.
void load_engine_weights(Emitter& emitter, const ModelShape& m, std::uint64_t tp, std::uint64_t positions,
                         Placing placing = {});

// Every layer over `tokens` tokens, eager PyTorch style: each op's output a new tensor, freed when the next op
// is done with it; attention writes K and V into the cache and keeps nothing else. `hidden` is the input, freed
// on the way; the last layer's output is returned.
Handle run_layers(Emitter& emitter, const ModelShape& m, std::uint64_t tp, std::uint64_t tokens, Handle hidden,
                  Placing placing = {});

// The sampling buffers of one step: the last tokens' logits gathered over tp, in fp32, probabilities, ids.
void sample(Emitter& emitter, const ModelShape& m, std::uint64_t tp, std::uint64_t sequences, Placing placing = {});

// The request lengths and the prefill budget of an engine's settings.
struct RequestLengths {
  std::uint64_t mean_prompt = 0, max_prompt = 0, mean_output = 0, max_output = 0;
  std::uint64_t max_prefill_tokens = 0;
};

// What every engine workload refuses, naming the key: a tp that does not divide the heads, the KV heads or
// the MLP; a mean length above its longest; a prefill budget that cannot hold the longest prompt.
void check_engine_settings(ParameterReader& reader, const ModelShape& m, std::uint64_t tp,
                           const RequestLengths& lengths);

}  // namespace tessera::workload
