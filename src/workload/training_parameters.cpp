#include "workload/training_parameters.hpp"

#include <fmt/format.h>

#include "workload/event_estimate.hpp"

namespace tessera::workload {

std::vector<WorkloadParameter> training_parameters(std::string_view default_preset, ModelKeys keys,
                                                   const std::map<std::string, std::string>& defaults) {
  std::vector<WorkloadParameter> parameters = model_parameters(default_preset, keys);
  const std::vector<WorkloadParameter> shared = {
      {"micro_batch", "1", "sequences per micro-batch (b)"},
      {"micro_batches", "4", "micro-batches per step (gradient accumulation; the 1F1B pipeline needs >= pp to fill)"},
      {"steps", "10", "optimizer steps; each is marked by an iteration event"},
      {"pp", "1", "pipeline-parallel size: this device holds layers/pp layers"},
      {"stage", "0", "which pipeline stage this device is (0 holds the embedding and most micro-batches in flight)"},
      {"dp", "8", "data-parallel size: ZeRO shards over it, and gradients are reduced over it when > 1"},
      {"sequence_parallel", "false", "Megatron sequence parallelism: norms, dropouts and residuals hold s/tp tokens"},
      {"recompute", "none", "activation recomputation: none, selective (attention core) or full (every layer)"},
      {"zero", "0", "ZeRO stage: 0 none, 1 shards optimizer states, 2 and gradients, 3 and weights over dp"},
      {"flash_attention", "false", "fused attention: no b x heads x s x s tensors"},
      {"bucket_mb", "25", "gradient bucket size in MiB (DDP's bucket_cap_mb)"},
      {"comm_stream", "true", "gradient communication buffers on a second stream (stream 1)"},
      {"fused_wgrad", "false", "weight gradients accumulate straight into the gradient buffer (no temporary)"},
      {"workspace_mb", "8", "largest GEMM workspace in MiB, sized per call site from the seed; 0 = none"},
      {"seed", "1", "random seed"},
  };
  for (WorkloadParameter parameter : shared) {
    if (const auto it = defaults.find(parameter.key); it != defaults.end()) parameter.default_value = it->second;
    parameters.push_back(std::move(parameter));
  }
  return parameters;
}

TrainerConfig read_training(ParameterReader& reader, ModelKeys keys, std::uint64_t max_seq) {
  TrainerConfig config;
  TransformerSetup& setup = config.setup;
  setup.model = read_model(reader, keys);
  Parallel& parallel = setup.parallel;
  parallel.tp = reader.integer("tp", 1, 1024);
  parallel.pp = reader.integer("pp", 1, 1024);
  parallel.stage = reader.integer("stage", 0, 1023);
  parallel.dp = reader.integer("dp", 1, 1 << 20);
  parallel.sequence_parallel = reader.flag("sequence_parallel");
  setup.recompute = static_cast<Recompute>(reader.choice("recompute", {"none", "selective", "full"}));
  setup.flash_attention = reader.flag("flash_attention");
  setup.workspace_max = reader.integer("workspace_mb", 0, 4096) * MiB;
  setup.seed = reader.integer("seed", 0, UINT64_MAX);
  setup.max_seq = max_seq;
  config.micro_batches = reader.integer("micro_batches", 1, 1 << 16);
  config.steps = reader.integer("steps", 1, 1 << 20);
  config.zero = reader.integer("zero", 0, 3);
  config.bucket_bytes = reader.integer("bucket_mb", 1, 1 << 20) * MiB;
  config.comm_stream = reader.flag("comm_stream");
  config.fused_wgrad = reader.flag("fused_wgrad");
  if (!reader.ok()) return config;
  const ModelShape& m = setup.model;
  const std::uint64_t tp = parallel.tp;
  reader.require(m.heads % tp == 0, "tp", fmt::format("must divide heads={}", m.heads));
  reader.require(m.kv_heads % tp == 0, "tp", fmt::format("must divide kv_heads={}", m.kv_heads));
  reader.require(m.ffn % tp == 0, "tp", fmt::format("must divide ffn={}", m.ffn));
  reader.require(m.layers % parallel.pp == 0, "pp", fmt::format("must divide layers={}", m.layers));
  reader.require(parallel.stage < parallel.pp, "stage", fmt::format("must be below pp={}", parallel.pp));
  // Counted low: a layer's forward and backward make over 100 events a micro-batch (tiny: 103 to 281).
  refuse_past_event_limit(reader, {{"micro_batches",
                                    fmt::format("steps={} x micro_batches={} x layers={} / pp={} x 32", config.steps,
                                                config.micro_batches, m.layers, parallel.pp),
                                    saturating_product({config.steps, config.micro_batches, setup.layers_here(), 32})}});
  return config;
}

}  // namespace tessera::workload
