// `training`: dense transformer pre-training in the Megatron-LM / MindSpeed style, one device's trace.
#include "workload/training_parameters.hpp"
#include "workload/workloads.hpp"

namespace tessera::workload {

WorkloadDescription training_description() {
  return {"training",
          "transformer training, Megatron style: persistent weights and optimizer states, per-layer activations "
          "freed in reverse in backward, 1F1B pipeline, ZeRO, recomputation, gradient buckets",
          training_parameters("gpt3-1.3b", {}, {}), preset_names(false)};
}

Result<Trace> generate_training(const Parameters& parameters) {
  ParameterReader reader(parameters);
  const std::uint64_t seq = reader.integer("seq", 1, 1 << 20);
  const std::uint64_t batch = reader.integer("micro_batch", 1, 1 << 16);
  TrainerConfig config = read_training(reader, {}, seq);
  if (auto status = reader.status(); !status) return std::move(status).error();
  config.name = "training";
  config.shape = [batch, seq](std::uint64_t, std::uint64_t) { return MicroBatchShape{batch, seq, {}}; };
  return run_training(config);
}

}  // namespace tessera::workload
