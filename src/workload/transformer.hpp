// A transformer pipeline stage on one device, as training runs it: its parameters (per device, after
// tensor and expert parallelism) and the dataflow graph of one micro-batch through it, with the real byte
// size of every tensor (docs/workloads.md has the formulas). Used by training, moe and finetune.
#pragma once

#include <cstdint>
#include <vector>

#include "workload/graph.hpp"
#include "workload/model.hpp"

namespace tessera::workload {

enum class Recompute : std::uint8_t { none, selective, full };

struct Parallel {
  std::uint64_t tp = 1;
  std::uint64_t pp = 1;
  std::uint64_t stage = 0;  // which pipeline stage this device is
  std::uint64_t dp = 1;
  std::uint64_t ep = 1;     // expert parallel: experts are spread over ep devices of the data-parallel group
  bool sequence_parallel = false;
};

struct MoeShape {
  std::uint64_t experts = 0;  // 0: a dense model
  std::uint64_t top_k = 0;
  std::uint64_t expert_ffn = 0;
  bool grouped_gemm = false;  // one GEMM over all local experts instead of one per expert
};

struct LoraShape {
  std::uint64_t rank = 0;  // 0: full fine-tuning (every parameter trains)
  bool mlp = false;        // adapters on the MLP matrices too, not only on the attention projections
};

struct TransformerSetup {
  ModelShape model;
  Parallel parallel;
  MoeShape moe;
  LoraShape lora;
  bool flash_attention = false;
  Recompute recompute = Recompute::none;
  std::uint64_t max_seq = 0;     // rows of the learned position table
  Bytes workspace_max = 0;       // largest GEMM workspace; 0: none
  std::uint64_t seed = 0;

  std::uint64_t layers_here() const noexcept { return model.layers / parallel.pp; }
  bool first_stage() const noexcept { return parallel.stage == 0; }
  bool last_stage() const noexcept { return parallel.stage + 1 == parallel.pp; }
  std::uint64_t local_experts() const noexcept { return moe.experts / parallel.ep; }
  // Tokens of a micro-batch that layer norms, dropouts and residuals hold on this device.
  std::uint64_t sequence_shard() const noexcept { return parallel.sequence_parallel ? parallel.tp : 1; }
};

struct ParamDef {
  const char* name = "";
  std::uint64_t elements = 0;  // on this device, after tensor and expert parallelism
  bool trainable = true;
  bool expert = false;          // reduced over the expert data-parallel group
  bool dense_grad = false;      // the embedding: its backward makes a full-size gradient temporary
};

struct LayerParams {
  int ln1_w = -1, ln1_b = -1, qkv_w = -1, qkv_b = -1, proj_w = -1, proj_b = -1;
  int ln2_w = -1, ln2_b = -1, fc1_w = -1, fc1_b = -1, fc2_w = -1, fc2_b = -1;
  int router = -1;
  struct Expert {
    int fc1_w = -1, fc1_b = -1, fc2_w = -1, fc2_b = -1;
  };
  std::vector<Expert> experts;
  struct Adapter {
    int a = -1, b = -1;
  };
  Adapter qkv_lora, proj_lora, fc1_lora, fc2_lora;
};

struct StageParams {
  std::vector<ParamDef> defs;
  int word = -1, positions = -1, final_w = -1, final_b = -1, output = -1;
  std::vector<LayerParams> layers;

  std::vector<bool> trainable() const;
};

StageParams build_stage_params(const TransformerSetup& setup);

// The shape of one micro-batch.
struct MicroBatchShape {
  std::uint64_t batch = 1;
  std::uint64_t seq = 0;
  // MoE: tokens each local expert receives, per layer of the stage: [layer][local expert].
  std::vector<std::vector<std::uint64_t>> expert_tokens;
};

struct StageGraph {
  Graph graph;
  int received = -1;  // stages after the first: the activations received from the previous stage
};

// The graph of one micro-batch through the stage, finalized.
StageGraph build_stage_graph(const TransformerSetup& setup, const StageParams& params, const MicroBatchShape& shape);

}  // namespace tessera::workload
