// The transformer a workload runs: its shape, read from the model parameters that presets set, and the
// counts that follow from it.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tessera/workload.hpp"
#include "workload/parameters.hpp"

namespace tessera::workload {

enum class Mlp : std::uint8_t { gelu, swiglu };  // GPT: fc1, GeLU, fc2. Llama: fused gate+up, SwiGLU, down
enum class Norm : std::uint8_t { layernorm, rmsnorm };

struct ModelShape {
  std::uint64_t layers = 0;
  std::uint64_t hidden = 0;
  std::uint64_t heads = 0;
  std::uint64_t kv_heads = 0;  // grouped-query attention; = heads for multi-head attention
  std::uint64_t ffn = 0;       // MLP hidden size (per expert for MoE)
  std::uint64_t vocab = 0;     // as published; padded_vocab() is what is allocated
  Mlp mlp = Mlp::gelu;
  Norm norm = Norm::layernorm;
  bool bias = true;               // linear layers carry biases (GPT) or not (Llama)
  bool dropout = true;            // dropout layers with masks (GPT training) or none (Llama)
  bool learned_positions = true;  // a position-embedding table (GPT) or rotary embeddings (Llama)
  bool tied_embeddings = true;    // the output layer reuses the word embedding (GPT)

  std::uint64_t head_dim() const noexcept { return hidden / heads; }
  // Output features of the fused QKV projection: queries for every head, keys and values for the KV heads.
  std::uint64_t qkv_features() const noexcept { return (heads + 2 * kv_heads) * head_dim(); }
  // Output features of the first MLP matrix: SwiGLU fuses the gate and up projections.
  std::uint64_t fc1_features() const noexcept { return mlp == Mlp::swiglu ? 2 * ffn : ffn; }
};

struct ModelKeys {
  bool seq = true;      // training and moe take `seq`; finetune and inference have their own lengths
  bool dropout = true;  // inference runs without dropout
};

// The model parameters with the defaults of `default_preset`, for a workload's description. `tp` is among
// them because the -tpN presets set it.
std::vector<WorkloadParameter> model_parameters(std::string_view default_preset, ModelKeys keys);

// Reads and checks the shape: hidden divisible by heads, heads by kv_heads. ffn=0 means 4 x hidden,
// kv_heads=0 means heads.
ModelShape read_model(ParameterReader& reader, ModelKeys keys);

// Megatron pads the vocabulary to a multiple of 128 x tp (make-vocab-size-divisible-by 128) so that every
// tensor-parallel rank holds an equal slice.
constexpr std::uint64_t padded_vocab(std::uint64_t vocab, std::uint64_t tp) noexcept {
  const std::uint64_t multiple = 128 * tp;
  return (vocab + multiple - 1) / multiple * multiple;
}

constexpr std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) noexcept { return (a + b - 1) / b; }

}  // namespace tessera::workload
