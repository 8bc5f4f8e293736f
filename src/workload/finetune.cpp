// `finetune`: supervised fine-tuning with a different sequence length every micro-batch (batches padded to
// their longest sample), fully or with LoRA adapters on a frozen base model.
#include <fmt/format.h>

#include <algorithm>

#include "workload/random.hpp"
#include "workload/training_parameters.hpp"
#include "workload/workloads.hpp"

namespace tessera::workload {

WorkloadDescription finetune_description() {
  std::vector<WorkloadParameter> parameters = training_parameters(
      "llama2-7b", {.seq = false, .dropout = true},
      {{"dp", "1"}, {"flash_attention", "true"}, {"micro_batches", "4"}, {"steps", "10"}});
  const std::vector<WorkloadParameter> own = {
      {"min_seq", "128", "shortest padded sequence of a micro-batch"},
      {"max_seq", "4096", "longest padded sequence of a micro-batch"},
      {"seq_multiple", "64", "micro-batches are padded to a multiple of this many tokens"},
      {"lora_rank", "16",
       "LoRA rank r: frozen base weights, trainable adapters A (r x in) and B (out x r); 0 = full fine-tuning"},
      {"lora_mlp", "false", "LoRA adapters on the MLP matrices too, not only on QKV and the output projection"},
  };
  parameters.insert(parameters.end() - 1, own.begin(), own.end());  // before `seed`
  return {"finetune",
          "fine-tuning with a sequence length drawn per micro-batch, fully or with LoRA (frozen base weights, "
          "optimizer states for the adapters only)",
          std::move(parameters), preset_names(false)};
}

Result<Trace> generate_finetune(const Parameters& parameters) {
  ParameterReader reader(parameters);
  const std::uint64_t batch = reader.integer("micro_batch", 1, 1 << 16);
  const std::uint64_t min_seq = reader.integer("min_seq", 1, 1 << 20);
  const std::uint64_t max_seq = reader.integer("max_seq", 1, 1 << 20);
  const std::uint64_t multiple = reader.integer("seq_multiple", 1, 1 << 20);
  TrainerConfig config = read_training(reader, {.seq = false, .dropout = true}, max_seq);
  config.setup.lora.rank = reader.integer("lora_rank", 0, 1 << 16);
  config.setup.lora.mlp = reader.flag("lora_mlp");
  reader.require(min_seq <= max_seq, "min_seq", fmt::format("must not exceed max_seq={}", max_seq));
  if (auto status = reader.status(); !status) return std::move(status).error();
  config.name = "finetune";
  const std::uint64_t seed = config.setup.seed;
  // Uniform between min_seq and max_seq, rounded up to the padding multiple (and capped at max_seq).
  config.shape = [=](std::uint64_t step, std::uint64_t micro) {
    Rng rng(mix(mix(seed, step), micro), "finetune-lengths");
    const std::uint64_t drawn = min_seq + rng.below(max_seq - min_seq + 1);
    return MicroBatchShape{batch, std::min(max_seq, ceil_div(drawn, multiple) * multiple), {}};
  };
  return run_training(config);
}

}  // namespace tessera::workload
