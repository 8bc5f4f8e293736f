// The trained actor of a colocated job (the `rl` and `serving` workloads): a model sharded over `fsdp`
// devices (FSDP / ZeRO-3) that is loaded from host memory, trains one step over a batch of sequences, and
// hands its new weights to the inference engine before it is offloaded again.
#pragma once

#include <cstdint>
#include <vector>

#include "workload/emitter.hpp"
#include "workload/model.hpp"

namespace tessera::workload {

struct ActorSettings {
  ModelShape model;
  std::uint64_t fsdp = 1;         // devices the actor is sharded over
  std::uint64_t micro_batch = 1;  // sequences of a micro-batch, padded to the longest
  bool recompute = true;          // activation checkpointing
  std::uint64_t max_seq = 0;      // the longest sequence (learned position embeddings)
};

class ActorTraining {
 public:
  ActorTraining(const ActorSettings& settings, Emitter& emitter);

  // One training step over sequences of these lengths (tokens each), `micro_batch` at a time: fp32 weight
  // shards (4 P / fsdp) and Adam's moments (8 P / fsdp) loaded, gradients (4 P / fsdp) made by the first
  // backward, the optimizer step, then gradients and moments dropped. The weights stay until hand_over().
  void train(const std::vector<std::uint64_t>& lengths);
  // The new weights copied into the engine, a unit gathered in bf16 at a time, then the actor offloaded.
  void hand_over();

 private:
  std::uint64_t shard(std::uint64_t elements) const;
  void micro_batch(std::uint64_t tokens, std::vector<Handle>& gradients);

  const ActorSettings s_;
  Emitter& emitter_;
  // Parameter counts (elements, whole model) of the units FSDP shards and gathers, in order: the embedding,
  // each layer, and the final norm with the output layer.
  const std::vector<std::uint64_t> units_;
  std::vector<Handle> actor_;  // the weight shards between train() and hand_over()
};

}  // namespace tessera::workload
