// The parameters one device holds for its pipeline stage. Column-parallel matrices (QKV, fc1) split their
// output features over tp, row-parallel ones (proj, fc2) their input features; norms and the biases of
// row-parallel layers are replicated; the vocabulary is split over tp (Megatron's VocabParallelEmbedding).
#include "workload/transformer.hpp"

namespace tessera::workload {
namespace {

class ParamList {
 public:
  ParamList(StageParams& stage, bool base_trainable) : stage_(stage), base_trainable_(base_trainable) {}

  int add(const char* name, std::uint64_t elements, bool expert = false, bool dense_grad = false) {
    stage_.defs.push_back({name, elements, base_trainable_, expert, dense_grad});
    return static_cast<int>(stage_.defs.size()) - 1;
  }
  int adapter(const char* name, std::uint64_t elements) {
    stage_.defs.push_back({name, elements, true, false, false});
    return static_cast<int>(stage_.defs.size()) - 1;
  }

 private:
  StageParams& stage_;
  bool base_trainable_;
};

}  // namespace

std::vector<bool> StageParams::trainable() const {
  std::vector<bool> result;
  result.reserve(defs.size());
  for (const ParamDef& def : defs) result.push_back(def.trainable);
  return result;
}

StageParams build_stage_params(const TransformerSetup& setup) {
  const ModelShape& m = setup.model;
  const std::uint64_t t = setup.parallel.tp;
  const std::uint64_t h = m.hidden;
  const std::uint64_t vocab = padded_vocab(m.vocab, t);
  const bool layernorm = m.norm == Norm::layernorm;
  const std::uint64_t r = setup.lora.rank;
  StageParams stage;
  ParamList list(stage, r == 0);

  if (setup.first_stage()) {
    stage.word = list.add("word_embedding", vocab * h / t, false, true);
    if (m.learned_positions) stage.positions = list.add("position_embedding", setup.max_seq * h);
  }
  for (std::uint64_t l = 0; l < setup.layers_here(); ++l) {
    LayerParams layer;
    layer.ln1_w = list.add("input_norm.weight", h);
    if (layernorm) layer.ln1_b = list.add("input_norm.bias", h);
    layer.qkv_w = list.add("qkv.weight", h * m.qkv_features() / t);
    if (m.bias) layer.qkv_b = list.add("qkv.bias", m.qkv_features() / t);
    if (r > 0) layer.qkv_lora = {list.adapter("qkv.lora_a", r * h), list.adapter("qkv.lora_b", m.qkv_features() / t * r)};
    layer.proj_w = list.add("proj.weight", h / t * h);
    if (m.bias) layer.proj_b = list.add("proj.bias", h);
    if (r > 0) layer.proj_lora = {list.adapter("proj.lora_a", r * h / t), list.adapter("proj.lora_b", h * r)};
    layer.ln2_w = list.add("post_attention_norm.weight", h);
    if (layernorm) layer.ln2_b = list.add("post_attention_norm.bias", h);
    if (setup.moe.experts == 0) {
      layer.fc1_w = list.add("fc1.weight", h * m.fc1_features() / t);
      if (m.bias) layer.fc1_b = list.add("fc1.bias", m.fc1_features() / t);
      if (r > 0 && setup.lora.mlp) {
        layer.fc1_lora = {list.adapter("fc1.lora_a", r * h), list.adapter("fc1.lora_b", m.fc1_features() / t * r)};
      }
      layer.fc2_w = list.add("fc2.weight", m.ffn / t * h);
      if (m.bias) layer.fc2_b = list.add("fc2.bias", h);
      if (r > 0 && setup.lora.mlp) {
        layer.fc2_lora = {list.adapter("fc2.lora_a", r * m.ffn / t), list.adapter("fc2.lora_b", h * r)};
      }
    } else {
      const std::uint64_t fe = setup.moe.expert_ffn;
      const std::uint64_t fc1e = m.mlp == Mlp::swiglu ? 2 * fe : fe;
      layer.router = list.add("router.weight", h * setup.moe.experts);
      for (std::uint64_t e = 0; e < setup.local_experts(); ++e) {
        LayerParams::Expert expert;
        expert.fc1_w = list.add("expert.fc1.weight", h * fc1e / t, true);
        if (m.bias) expert.fc1_b = list.add("expert.fc1.bias", fc1e / t, true);
        expert.fc2_w = list.add("expert.fc2.weight", fe / t * h, true);
        if (m.bias) expert.fc2_b = list.add("expert.fc2.bias", h, true);
        layer.experts.push_back(expert);
      }
    }
    stage.layers.push_back(layer);
  }
  if (setup.last_stage()) {
    stage.final_w = list.add("final_norm.weight", h);
    if (layernorm) stage.final_b = list.add("final_norm.bias", h);
    // A tied output layer reuses the word embedding on a single stage; the last of several stages keeps its
    // own copy (Megatron synchronizes the two gradients).
    if (!m.tied_embeddings || !setup.first_stage()) {
      stage.output = list.add("output_layer.weight", vocab * h / t);
    } else {
      stage.output = stage.word;
    }
  }
  return stage;
}

}  // namespace tessera::workload
