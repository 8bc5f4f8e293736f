// The training loop of one device, shared by training, moe and finetune: persistent weights, gradients
// and optimizer states (mixed precision, sharded per ZeRO stage), micro-batches in Megatron's 1F1B pipeline
// order, gradient buckets, and the optimizer step.
#pragma once

#include <functional>
#include <string>

#include "tessera/trace.hpp"
#include "workload/transformer.hpp"

namespace tessera::workload {

struct TrainerConfig {
  std::string name;
  TransformerSetup setup;
  std::uint64_t micro_batches = 1;  // per step (gradient accumulation)
  std::uint64_t steps = 1;
  std::uint64_t zero = 0;           // 0..3
  Bytes bucket_bytes = 25 * MiB;
  bool comm_stream = true;          // gradient communication buffers on stream 1
  bool fused_wgrad = false;         // weight gradients accumulate straight into the gradient buffer
  // The shape of micro-batch `micro` of step `step`.
  std::function<MicroBatchShape(std::uint64_t step, std::uint64_t micro)> shape;
  std::string what_to_lower = "steps or micro_batches";
};

Result<Trace> run_training(const TrainerConfig& config);

// Bytes a training device holds from start to end: bf16 weights, bf16 gradients and fp32 master weights
// with Adam's two moments (4 + 4 + 4 bytes), each sharded over the data-parallel group by ZeRO stage
// (1: optimizer states, 2: and gradients, 3: and weights). Frozen parameters keep only their weights.
Bytes persistent_bytes(const TrainerConfig& config, const StageParams& params);

}  // namespace tessera::workload
