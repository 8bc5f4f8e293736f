#include "workload/engine.hpp"

#include <fmt/format.h>

namespace tessera::workload {
namespace {

constexpr Bytes half = 2;
constexpr Bytes fp32 = 4;
constexpr Bytes int64 = 8;

}  // namespace

void load_engine_weights(Emitter& emitter, const ModelShape& m, std::uint64_t tp, std::uint64_t positions,
                         Placing placing) {
  const std::uint64_t t = tp;
  const std::uint64_t h = m.hidden;
  const bool layernorm = m.norm == Norm::layernorm;
  const std::uint64_t vocab = padded_vocab(m.vocab, t);
  auto weight = [&](Bytes bytes) { emitter.alloc(bytes, placing.stream, placing.tag); };
  weight(half * vocab / t * h);
  if (m.learned_positions) weight(half * positions * h);
  for (std::uint64_t l = 0; l < m.layers; ++l) {
    weight(half * h);
    if (layernorm) weight(half * h);
    weight(half * h * m.qkv_features() / t);
    if (m.bias) weight(half * m.qkv_features() / t);
    weight(half * h / t * h);
    if (m.bias) weight(half * h);
    weight(half * h);
    if (layernorm) weight(half * h);
    weight(half * h * m.fc1_features() / t);
    if (m.bias) weight(half * m.fc1_features() / t);
    weight(half * m.ffn / t * h);
    if (m.bias) weight(half * h);
  }
  weight(half * h);
  if (layernorm) weight(half * h);
  if (!m.tied_embeddings) weight(half * vocab / t * h);
}

Handle run_layers(Emitter& emitter, const ModelShape& m, std::uint64_t tp, std::uint64_t tokens, Handle hidden,
                  Placing placing) {
  const std::uint64_t t = tp;
  const std::uint64_t h = m.hidden;
  auto alloc = [&](Bytes bytes) { return emitter.alloc(bytes, placing.stream, placing.tag); };
  for (std::uint64_t l = 0; l < m.layers; ++l) {
    const Handle qkv = alloc(half * tokens * m.qkv_features() / t);
    const Handle attention = alloc(half * tokens * h / t);
    emitter.free(qkv);
    const Handle projected = alloc(half * tokens * h);
    emitter.free(attention);
    emitter.free(hidden);  // add+norm in place into the residual and the projection's output
    hidden = projected;
    const Handle up = alloc(half * tokens * m.fc1_features() / t);
    const Handle activated = alloc(half * tokens * m.ffn / t);
    emitter.free(up);
    const Handle down = alloc(half * tokens * h);
    emitter.free(activated);
    emitter.free(hidden);
    hidden = down;
  }
  return hidden;
}

void sample(Emitter& emitter, const ModelShape& m, std::uint64_t tp, std::uint64_t sequences, Placing placing) {
  const std::uint64_t vocab = padded_vocab(m.vocab, tp);
  auto alloc = [&](Bytes bytes) { return emitter.alloc(bytes, placing.stream, placing.tag); };
  const Handle logits = alloc(half * sequences * vocab);
  const Handle wide = alloc(fp32 * sequences * vocab);
  emitter.free(logits);
  const Handle probabilities = alloc(fp32 * sequences * vocab);
  const Handle sampled = alloc(int64 * sequences);
  emitter.free(probabilities);
  emitter.free(wide);
  emitter.free(sampled);
}

void check_engine_settings(ParameterReader& reader, const ModelShape& m, std::uint64_t tp,
                           const RequestLengths& lengths) {
  reader.require(m.heads % tp == 0 && m.kv_heads % tp == 0, "tp",
                 fmt::format("must divide heads={} and kv_heads={}", m.heads, m.kv_heads));
  reader.require(m.ffn % tp == 0, "tp", fmt::format("must divide ffn={}", m.ffn));
  reader.require(lengths.mean_prompt <= lengths.max_prompt, "mean_prompt",
                 fmt::format("must not exceed max_prompt={}", lengths.max_prompt));
  reader.require(lengths.mean_output <= lengths.max_output, "mean_output",
                 fmt::format("must not exceed max_output={}", lengths.max_output));
  reader.require(lengths.max_prefill_tokens >= lengths.max_prompt, "max_prefill_tokens",
                 fmt::format("must hold the longest prompt, max_prompt={}", lengths.max_prompt));
}

}  // namespace tessera::workload
