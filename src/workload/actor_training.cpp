#include "workload/actor_training.hpp"

#include <algorithm>

namespace tessera::workload {
namespace {

constexpr Bytes half = 2;  // bf16 weights and activations
constexpr Bytes fp32 = 4;
constexpr Bytes int64 = 8;

// Parameter counts (elements, whole model) of the units FSDP shards and gathers: the embedding, each
// layer, and the final norm with the output layer.
struct Units {
  std::uint64_t embedding = 0;
  std::uint64_t layer = 0;
  std::uint64_t head = 0;
};

Units count_units(const ModelShape& m, std::uint64_t max_seq) {
  const std::uint64_t h = m.hidden;
  const std::uint64_t norm = m.norm == Norm::layernorm ? 2 * h : h;  // weight (and bias)
  const std::uint64_t vocab = padded_vocab(m.vocab, 1);
  Units units;
  units.embedding = vocab * h + (m.learned_positions ? max_seq * h : 0);
  // Two norms, QKV, output projection, the MLP's two matrices, and their biases.
  units.layer = 2 * norm + h * m.qkv_features() + h * h + h * m.fc1_features() + m.ffn * h;
  if (m.bias) units.layer += m.qkv_features() + h + m.fc1_features() + h;
  units.head = norm + (m.tied_embeddings ? 0 : vocab * h);
  return units;
}

}  // namespace

ActorTraining::ActorTraining(const ActorSettings& settings, Emitter& emitter)
    : s_(settings), emitter_(emitter), units_([&] {
        const Units counted = count_units(settings.model, settings.max_seq);
        std::vector<std::uint64_t> units{counted.embedding};
        units.insert(units.end(), settings.model.layers, counted.layer);
        units.push_back(counted.head);
        return units;
      }()) {}

std::uint64_t ActorTraining::shard(std::uint64_t elements) const { return ceil_div(elements, s_.fsdp); }

void ActorTraining::train(const std::vector<std::uint64_t>& lengths) {
  const std::vector<std::uint64_t>& units = units_;
  // The actor loaded from host memory: fp32 weight shards (4 P / fsdp), Adam's moments (8 P / fsdp).
  std::vector<Handle> actor;
  std::vector<Handle> optimizer;
  for (const std::uint64_t n : units) actor.push_back(emitter_.alloc(fp32 * shard(n)));
  for (const std::uint64_t n : units) {
    optimizer.push_back(emitter_.alloc(fp32 * shard(n)));  // exp_avg
    optimizer.push_back(emitter_.alloc(fp32 * shard(n)));  // exp_avg_sq
  }
  std::vector<Handle> gradients(units.size(), no_block);  // fp32 shards (4 P / fsdp), made by the first backward
  for (std::size_t first = 0; first < lengths.size(); first += s_.micro_batch) {
    const std::size_t end = std::min(lengths.size(), first + s_.micro_batch);
    std::uint64_t longest = 0;
    for (std::size_t i = first; i < end; ++i) longest = std::max(longest, lengths[i]);
    micro_batch((end - first) * longest, gradients);
  }
  // The optimizer step, one unit at a time (an fp32 update buffer each), then gradients dropped and the
  // optimizer states offloaded; the weights stay until they are copied into the engine.
  for (std::size_t u = 0; u < units.size(); ++u) emitter_.free(emitter_.alloc(fp32 * shard(units[u])));
  for (const Handle gradient : gradients) emitter_.free(gradient);
  for (const Handle state : optimizer) emitter_.free(state);
  actor_ = std::move(actor);
}

// Forward and backward of `tokens` tokens. A layer's input is saved; with recompute its other
// activations are made again in backward, else they are kept from forward.
void ActorTraining::micro_batch(std::uint64_t tokens, std::vector<Handle>& gradients) {
  const std::vector<std::uint64_t>& units = units_;
  const ModelShape& m = s_.model;
  const std::uint64_t h = m.hidden;
  const std::uint64_t vocab = padded_vocab(m.vocab, 1);
  auto layer_activations = [&] {
    // QKV, attention output, MLP input and activation, down projection (bf16, whole layer: no tp).
    return std::vector<Handle>{emitter_.alloc(half * tokens * m.qkv_features()), emitter_.alloc(half * tokens * h),
                               emitter_.alloc(half * tokens * m.fc1_features()), emitter_.alloc(half * tokens * m.ffn),
                               emitter_.alloc(half * tokens * h)};
  };
  auto free_all = [this](std::vector<Handle>& handles) {
    for (const Handle handle : handles) emitter_.free(handle);
    handles.clear();
  };
  const Handle ids = emitter_.alloc(int64 * tokens);
  std::vector<Handle> saved;                    // per layer: its input
  std::vector<std::vector<Handle>> kept;        // per layer, without recompute
  Handle gathered = emitter_.alloc(half * units.front());  // the embedding, gathered whole in bf16
  Handle hidden = emitter_.alloc(half * tokens * h);
  emitter_.free(gathered);
  for (std::uint64_t l = 0; l < m.layers; ++l) {
    gathered = emitter_.alloc(half * units[1 + l]);
    saved.push_back(hidden);
    std::vector<Handle> activations = layer_activations();
    hidden = emitter_.alloc(half * tokens * h);
    if (s_.recompute) {
      free_all(activations);
    } else {
      kept.push_back(std::move(activations));
    }
    emitter_.free(gathered);
  }
  // The head: logits in fp32 for the log-probabilities of the policy loss.
  gathered = emitter_.alloc(half * units.back());
  const Handle logits = emitter_.alloc(fp32 * tokens * vocab);
  emitter_.free(gathered);
  // Backward: the head, then the layers in reverse, each gathered again, its gradient reduce-scattered
  // into the shard.
  auto reduce = [&](std::size_t unit) {
    const Handle whole = emitter_.alloc(half * units[unit]);  // the unit's bf16 gradient before reduce-scatter
    if (gradients[unit] == no_block) gradients[unit] = emitter_.alloc(fp32 * shard(units[unit]));
    emitter_.free(whole);
  };
  gathered = emitter_.alloc(half * units.back());
  const Handle grad_logits = emitter_.alloc(fp32 * tokens * vocab);
  emitter_.free(logits);
  Handle grad_hidden = emitter_.alloc(half * tokens * h);
  emitter_.free(grad_logits);
  reduce(units.size() - 1);
  emitter_.free(gathered);
  emitter_.free(hidden);
  for (std::uint64_t l = m.layers; l-- > 0;) {
    gathered = emitter_.alloc(half * units[1 + l]);
    std::vector<Handle> activations;
    if (s_.recompute) {
      activations = layer_activations();
    } else {
      activations = std::move(kept.back());
      kept.pop_back();
    }
    const Handle grad_input = emitter_.alloc(half * tokens * h);
    const Handle grad_mlp = emitter_.alloc(half * tokens * m.fc1_features());  // the largest temporary gradient
    emitter_.free(grad_mlp);
    free_all(activations);
    emitter_.free(grad_hidden);
    grad_hidden = grad_input;
    emitter_.free(saved.back());
    saved.pop_back();
    reduce(1 + l);
    emitter_.free(gathered);
  }
  gathered = emitter_.alloc(half * units.front());
  reduce(0);
  emitter_.free(gathered);
  emitter_.free(grad_hidden);
  emitter_.free(ids);
}

void ActorTraining::hand_over() {
  for (const std::uint64_t n : units_) emitter_.free(emitter_.alloc(half * n));
  for (const Handle weight : actor_) emitter_.free(weight);
  actor_.clear();
}

}  // namespace tessera::workload
