// The seed experiment's scenarios: MindSpeed-style training on four Ascend 910B cards of 64 GiB HBM each,
// as one card's trace of the `training` workload. MindSpeed runs Megatron-LM's training loop, so the
// workload's accounting applies as docs/workloads.md writes it; these settings only choose the model and the
// layout. What each setting stands for:
//
// - Four cards, tp x pp x dp = 4. The trace is the card of pipeline stage 0 (stage=0): it holds the word
//   embedding and, under 1F1B, min(pp, m) micro-batches' activations at once — the stage that peaks.
// - Weights bf16 (2 bytes/parameter), gradients bf16 (2), fp32 master weights and Adam's two moments
//   (4 + 4 + 4 = 12) — the mixed-precision accounting of the ZeRO paper (Rajbhandari et al. 2020).
//   Megatron's distributed optimizer shards those 12 bytes over the data-parallel ranks and keeps the
//   gradient buffer whole: ZeRO stage 1 (zero=1), 2 + 2 + 12/dp bytes per parameter of this card's share.
//   Φ (this card's parameters) is the model's per layer 2h (norms) + h(a+2g)d/t (QKV) + h·h/t
//   (projection) + h·f1/t + f·h/t (MLP; f1 = 2f for SwiGLU), and GPT's biases, times L/pp layers, plus
//   the embedding V'h/t on stage 0.
// - Activations, per layer and micro-batch, kept for backward (Korthikanti et al. 2022, "Reducing
//   Activation Recomputation in Large Transformer Models", equation 1, divided by t under tensor and
//   sequence parallelism): s·b·h·(34 + 5·a·s/h)/t bytes with dropout. Its terms: the attention block's 11·s·b·h
//   (QKV's input 2, Q and K 4, V 2, the projection's input 2, its dropout mask 1) and 5·a·s²·b (softmax
//   output 2, attention-dropout output 2 and mask 1); the MLP's 19·s·b·h (fc1's input 2, GeLU's input 8,
//   fc2's input 8, dropout mask 1); the two norms' inputs 4·s·b·h. Selective recomputation drops the
//   5·a·s²·b and rebuilds it in backward: 34·s·b·h/t per layer (fewer without dropout, as Llama has
//   none). Full recomputation keeps only each layer's input, 2·s·b·h/t, and rebuilds one layer at a time
//   in backward. Tensor by tensor in docs/workloads.md.
// - MindSpeed's usual flags: --sequence-parallel (sequence_parallel=true), no gradient-accumulation fusion
//   (fused_wgrad=false), Megatron's DDP buckets of 40 M parameters = 80 MB of bf16 (bucket_mb=76, in MiB).
//   Attention is unfused (flash_attention=false) so that selective recomputation has its s² tensors to
//   drop: an assumption; MindSpeed's fused attention would make selective behave as no recomputation.
// - Sizes are kept small enough to replay in seconds: 5 optimizer steps of 8 micro-batches.
#include "tessera/workload.hpp"

namespace tessera {
namespace {

using Settings = std::map<std::string, std::string>;

Settings seed_layout(std::string_view preset, std::string_view tp, std::string_view pp, std::string_view dp,
                     std::string_view micro_batch, std::string_view recompute) {
  return {{"preset", std::string(preset)},
          {"tp", std::string(tp)},
          {"pp", std::string(pp)},
          {"dp", std::string(dp)},
          {"stage", "0"},
          {"zero", "1"},  // Megatron's distributed optimizer
          {"sequence_parallel", "true"},
          {"flash_attention", "false"},
          {"fused_wgrad", "false"},
          {"bucket_mb", "76"},
          {"micro_batch", std::string(micro_batch)},
          {"micro_batches", "8"},
          {"steps", "5"},
          {"recompute", std::string(recompute)},
          {"seed", "1"}};
}

std::vector<WorkloadScenario> make_scenarios() {
  // Llama-2-7B (preset llama2-7b): 32 layers, hidden 4096, 32 heads, ffn 11008 (SwiGLU), vocabulary 32000,
  // sequence 4096; micro-batch 2.
  // PanGu-like (preset pangu-13b): PanGu-α 13B's published shape, 40 layers, hidden 5120, 40 heads, ffn
  // 20480, vocabulary 40000, sequence 1024, on GPT-3's architecture (LayerNorm, GeLU, biases, dropout,
  // learned positions, tied embeddings; PanGu-α's extra query layer left out); micro-batch 2. 13 B
  // parameters need tp x pp = 4 to fit 64 GiB: 16 bytes x 3.25 B on each card.
  const std::string_view llama = "Llama-2-7B on four 910B cards, MindSpeed style";
  const std::string_view pangu = "PanGu-like 13B on four 910B cards, MindSpeed style";
  return {
      {"seed-llama2-7b-tp2pp2-selective", "training", std::string(llama) + ": tp 2, pp 2, selective recomputation",
       seed_layout("llama2-7b", "2", "2", "1", "2", "selective")},
      {"seed-llama2-7b-tp2pp2-full", "training", std::string(llama) + ": tp 2, pp 2, full recomputation",
       seed_layout("llama2-7b", "2", "2", "1", "2", "full")},
      {"seed-llama2-7b-tp2dp2-selective", "training",
       std::string(llama) + ": tp 2, dp 2 (distributed optimizer over 2), selective recomputation",
       seed_layout("llama2-7b", "2", "1", "2", "2", "selective")},
      {"seed-llama2-7b-tp2dp2-full", "training",
       std::string(llama) + ": tp 2, dp 2 (distributed optimizer over 2), full recomputation",
       seed_layout("llama2-7b", "2", "1", "2", "2", "full")},
      {"seed-pangu-13b-tp2pp2-selective", "training", std::string(pangu) + ": tp 2, pp 2, selective recomputation",
       seed_layout("pangu-13b", "2", "2", "1", "2", "selective")},
      {"seed-pangu-13b-tp2pp2-full", "training", std::string(pangu) + ": tp 2, pp 2, full recomputation",
       seed_layout("pangu-13b", "2", "2", "1", "2", "full")},
  };
}

}  // namespace

const std::vector<WorkloadScenario>& workload_scenarios() {
  static const std::vector<WorkloadScenario> scenarios = make_scenarios();
  return scenarios;
}

const WorkloadScenario* find_workload_scenario(std::string_view name) {
  for (const WorkloadScenario& scenario : workload_scenarios()) {
    if (scenario.name == name) return &scenario;
  }
  return nullptr;
}

}  // namespace tessera
