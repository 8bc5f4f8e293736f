#include "workload/model.hpp"

#include <fmt/format.h>

namespace tessera::workload {
namespace {

std::string preset_value(const Preset* preset, std::string_view key, std::string_view fallback) {
  if (preset != nullptr) {
    for (const auto& [name, value] : preset->values) {
      if (name == key) return std::string(value);
    }
  }
  return std::string(fallback);
}

}  // namespace

std::vector<WorkloadParameter> model_parameters(std::string_view default_preset, ModelKeys keys) {
  const Preset* preset = find_preset(default_preset);
  auto from_preset = [&](std::string_view key, std::string_view fallback, std::string meaning) {
    return WorkloadParameter{std::string(key), preset_value(preset, key, fallback), std::move(meaning)};
  };
  std::vector<WorkloadParameter> parameters = {
      {"preset", std::string(default_preset),
       "model preset: sets the model keys below (and tp for the -tpN variants); explicit settings override it"},
      from_preset("layers", "2", "transformer layers (preset)"),
      from_preset("hidden", "256", "hidden size (preset)"),
      from_preset("heads", "4", "attention heads (preset)"),
      from_preset("kv_heads", "0", "key/value heads for grouped-query attention; 0 = heads (preset)"),
      from_preset("ffn", "0", "MLP hidden size; 0 = 4 x hidden (preset)"),
      from_preset("vocab", "1000", "vocabulary size, padded to a multiple of 128 x tp as Megatron does (preset)"),
  };
  if (keys.seq) parameters.push_back(from_preset("seq", "128", "sequence length in tokens (preset)"));
  parameters.push_back(from_preset(
      "mlp", "gelu", "MLP kind: gelu (fc1, GeLU, fc2) or swiglu (fused gate+up, SwiGLU, down) (preset)"));
  parameters.push_back(from_preset("norm", "layernorm", "normalization: layernorm or rmsnorm (preset)"));
  parameters.push_back(from_preset("bias", "true", "linear layers have biases (preset)"));
  if (keys.dropout) {
    parameters.push_back(from_preset("dropout", "true", "dropout layers, which keep 1-byte masks for backward (preset)"));
  }
  parameters.push_back(from_preset("positions", "learned", "learned (a position-embedding table) or rope (preset)"));
  parameters.push_back(from_preset("tied_embeddings", "true", "the output layer shares the word embedding (preset)"));
  parameters.push_back(
      from_preset("tp", "1", "tensor-parallel size: heads, MLP and vocabulary are split over tp devices (preset)"));
  return parameters;
}

ModelShape read_model(ParameterReader& reader, ModelKeys keys) {
  ModelShape model;
  model.layers = reader.integer("layers", 1, 1024);
  model.hidden = reader.integer("hidden", 1, 1 << 20);
  model.heads = reader.integer("heads", 1, 4096);
  model.kv_heads = reader.integer("kv_heads", 0, 4096);
  model.ffn = reader.integer("ffn", 0, 1 << 22);
  model.vocab = reader.integer("vocab", 1, 1 << 24);
  model.mlp = reader.choice("mlp", {"gelu", "swiglu"}) == 0 ? Mlp::gelu : Mlp::swiglu;
  model.norm = reader.choice("norm", {"layernorm", "rmsnorm"}) == 0 ? Norm::layernorm : Norm::rmsnorm;
  model.bias = reader.flag("bias");
  model.dropout = keys.dropout ? reader.flag("dropout") : false;
  model.learned_positions = reader.choice("positions", {"learned", "rope"}) == 0;
  model.tied_embeddings = reader.flag("tied_embeddings");
  if (!reader.ok()) return model;
  if (model.kv_heads == 0) model.kv_heads = model.heads;
  if (model.ffn == 0) model.ffn = 4 * model.hidden;
  reader.require(model.hidden % model.heads == 0, "hidden", fmt::format("not divisible by heads={}", model.heads));
  reader.require(model.kv_heads <= model.heads && model.heads % model.kv_heads == 0, "kv_heads",
                 fmt::format("must divide heads={}", model.heads));
  return model;
}

}  // namespace tessera::workload
