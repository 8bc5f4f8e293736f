// One micro-batch through a transformer pipeline stage, tensor by tensor, at Megatron-LM's tensor sizes
// (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", section 4.1):
// activations in bf16 (2 bytes), dropout masks 1 byte, norm statistics and the loss in fp32, token ids in
// int64. docs/workloads.md lists every tensor.
#include <fmt/format.h>

#include "workload/random.hpp"
#include "workload/transformer.hpp"

namespace tessera::workload {
namespace {

constexpr Bytes bf16 = 2;
constexpr Bytes fp32 = 4;
constexpr Bytes int64 = 8;

class Builder {
 public:
  Builder(const TransformerSetup& setup, const StageParams& params, const MicroBatchShape& shape)
      : s_(setup), p_(params), m_(setup.model), t_(setup.parallel.tp),
        tokens_(shape.batch * shape.seq), shard_tokens_(ceil_div(tokens_, setup.sequence_shard())),
        batch_(shape.batch), seq_(shape.seq), shape_(shape) {}

  StageGraph build() {
    StageGraph result;
    const int layers = static_cast<int>(s_.layers_here());
    // The batch, in the order Megatron's get_batch makes it: the first stage needs the tokens and
    // positions, the last the labels and loss mask, every stage the causal mask (unless flash attention
    // builds it in its kernel).
    int tokens = -1;
    int positions = -1;
    int labels = -1;
    int loss_mask = -1;
    if (s_.first_stage()) tokens = g_.input(int64 * tokens_);
    if (s_.last_stage()) {
      labels = g_.input(int64 * tokens_);
      loss_mask = g_.input(fp32 * tokens_);
    }
    if (!s_.flash_attention) g_.input(seq_ * seq_);  // bool [1, 1, s, s], broadcast over the batch
    if (s_.first_stage()) positions = g_.input(int64 * tokens_);

    int x = -1;
    if (s_.first_stage()) {
      x = embedding(tokens, positions);
    } else {
      result.received = g_.input(bf16 * shard_tokens_ * m_.hidden, true, true);
      x = result.received;
    }
    for (int l = 0; l < layers; ++l) x = layer(x, l);
    if (s_.last_stage()) {
      g_.set_output(head(x, labels, loss_mask, layers + 1));
    } else {
      g_.set_output(x);
    }
    g_.finalize(p_.trainable());
    result.graph = std::move(g_);
    return result;
  }

 private:
  // A GEMM's workspace, as cuBLASLt or cuDNN ask the allocator for it: its size depends on the algorithm
  // the library picks for the shape, modelled as a seeded choice per (site, shape) that stays fixed for the
  // run, as autotuned algorithms do. A quarter of the sites need none.
  Bytes workspace(std::string_view site, std::uint64_t rows) const {
    constexpr Bytes unit = 256 * KiB;
    if (s_.workspace_max < unit) return 0;
    const std::uint64_t h = mix(mix(s_.seed, hash_tag(site)), rows);
    if (h % 4 == 0) return 0;
    return (1 + (h >> 8) % (s_.workspace_max / unit)) * unit;
  }

  bool trainable(int param) const { return param >= 0 && p_.defs[static_cast<std::size_t>(param)].trainable; }

  static void add_param(OpDef& op, int param) {
    if (param >= 0) op.params.push_back(param);
  }

  int op(OpDef def) {
    def.group = group_;
    return g_.op(std::move(def));
  }

  // A linear layer; tensor-parallel as column (output features split) or row (input features split, output
  // all-reduced, or reduce-scattered to the sequence shard under sequence parallelism). A frozen weight
  // needs no saved input. A LoRA adapter adds x -> A -> B beside it and sums.
  int linear(std::string_view site, int x, std::uint64_t in_features, std::uint64_t out_features, bool column,
             int weight, int bias, LayerParams::Adapter lora) {
    const bool sp = s_.parallel.sequence_parallel && t_ > 1;
    const Bytes full_input = bf16 * tokens_ * in_features;
    const Bytes out_bytes = column ? bf16 * tokens_ * out_features : bf16 * shard_tokens_ * out_features;
    OpDef def;
    def.inputs = {x};
    def.outputs = {g_.tensor(out_bytes)};
    if (trainable(weight)) def.saves = {x};
    add_param(def, weight);
    add_param(def, bias);
    if (sp && column) {
      def.forward_temps.push_back(full_input);   // all-gathered input
      def.backward_temps.push_back(full_input);  // gathered again rather than saved
      def.backward_temps.push_back(full_input);  // input gradient before its reduce-scatter
    }
    if (sp && !column) {
      def.forward_temps.push_back(bf16 * tokens_ * out_features);   // partial sums before the reduce-scatter
      def.backward_temps.push_back(bf16 * tokens_ * out_features);  // all-gathered output gradient
    }
    def.forward_temps.push_back(workspace(fmt::format("{}.fwd", site), tokens_));
    def.backward_temps.push_back(workspace(fmt::format("{}.dgrad", site), tokens_));
    if (trainable(weight)) def.backward_temps.push_back(workspace(fmt::format("{}.wgrad", site), tokens_));
    const int base = def.outputs.front();
    op(std::move(def));
    if (lora.a < 0) return base;
    const std::uint64_t rank = s_.lora.rank;
    const int xa = g_.tensor(bf16 * tokens_ * rank);
    op({.inputs = {x}, .outputs = {xa}, .saves = {x}, .params = {lora.a}});
    const int xb = g_.tensor(out_bytes);
    op({.inputs = {xa}, .outputs = {xb}, .saves = {xa}, .params = {lora.b}});
    const int y = g_.tensor(out_bytes);
    op({.inputs = {base, xb}, .outputs = {y}, .aliased_inputs = {base, xb}});
    return y;
  }

  // LayerNorm keeps its input, mean and reciprocal deviation; RMSNorm its input and reciprocal RMS.
  int norm(int x, int weight, int bias) {
    const std::uint64_t rows = shard_tokens_;
    OpDef def;
    def.inputs = {x};
    const int y = g_.tensor(bf16 * rows * m_.hidden);
    def.outputs = {y};
    def.saves = {x};
    const int stats = m_.norm == Norm::layernorm ? 2 : 1;
    for (int i = 0; i < stats; ++i) {
      const int stat = g_.tensor(fp32 * rows, false);
      def.outputs.push_back(stat);
      def.saves.push_back(stat);
    }
    add_param(def, weight);
    add_param(def, bias);
    op(std::move(def));
    return y;
  }

  // Megatron's fused bias-dropout-add: out = residual + dropout(y + bias), keeping the 1-byte mask. The
  // residual's gradient is the output's, passed through.
  int residual(int y, int skip, int bias) {
    const std::uint64_t rows = shard_tokens_;
    OpDef def;
    def.inputs = {y, skip};
    const int out = g_.tensor(bf16 * rows * m_.hidden);
    def.outputs = {out};
    def.aliased_inputs = {skip};
    if (m_.dropout) {
      const int mask = g_.tensor(rows * m_.hidden, false);
      def.outputs.push_back(mask);
      def.saves = {mask};
    } else {
      def.aliased_inputs.push_back(y);
    }
    add_param(def, bias);
    op(std::move(def));
    return out;
  }

  int embedding(int tokens, int positions) {
    group_ = 0;
    const Bytes full = bf16 * tokens_ * m_.hidden;
    OpDef lookup{.inputs = {tokens}, .outputs = {g_.tensor(full)}, .saves = {tokens}, .params = {p_.word}};
    if (t_ > 1) lookup.forward_temps = {tokens_, int64 * tokens_};  // out-of-slice mask and shifted ids
    int x = lookup.outputs.front();
    op(std::move(lookup));
    if (p_.positions >= 0) {
      const int pos = g_.tensor(full);
      op({.inputs = {positions}, .outputs = {pos}, .saves = {positions}, .params = {p_.positions}});
      const int sum = g_.tensor(full);
      op({.inputs = {x, pos}, .outputs = {sum}, .aliased_inputs = {x, pos}});
      x = sum;
    }
    if (s_.sequence_shard() > 1) {  // scattered to the sequence shard; the gradient is gathered back
      const int shard = g_.tensor(bf16 * shard_tokens_ * m_.hidden);
      op({.inputs = {x}, .outputs = {shard}});
      x = shard;
    }
    if (m_.dropout) {
      const int out = g_.tensor(bf16 * shard_tokens_ * m_.hidden);
      const int mask = g_.tensor(shard_tokens_ * m_.hidden, false);
      op({.inputs = {x}, .outputs = {out, mask}, .saves = {mask}});
      x = out;
    }
    return x;
  }

  // Q K^T, softmax, dropout, times V: the b x heads x s x s tensors, or one flash-attention kernel that
  // keeps only its output and the log-sum-exp.
  int attention_core(int qkv) {
    const std::uint64_t heads = m_.heads / t_;
    const Bytes context = bf16 * tokens_ * m_.hidden / t_;
    if (s_.flash_attention) {
      const int out = g_.tensor(context);
      const int lse = g_.tensor(fp32 * batch_ * heads * seq_, false);
      // FlashAttention-2's backward: an fp32 accumulator for dQ and the row sums of dO * O.
      op({.inputs = {qkv}, .outputs = {out, lse}, .saves = {qkv, out, lse},
          .backward_temps = {fp32 * tokens_ * m_.hidden / t_, fp32 * batch_ * heads * seq_}});
      return out;
    }
    const Bytes square = bf16 * batch_ * heads * seq_ * seq_;
    const int first = static_cast<int>(g_.ops().size());
    int keys = qkv;
    if (m_.kv_heads < m_.heads) {  // grouped-query attention repeats K and V for the unfused kernels
      keys = g_.tensor(2 * context);
      op({.inputs = {qkv}, .outputs = {keys}});
    }
    const int scores = g_.tensor(square);
    op({.inputs = {qkv, keys}, .outputs = {scores}, .saves = {qkv, keys}});
    const int probs = g_.tensor(square);
    op({.inputs = {scores}, .outputs = {probs}, .saves = {probs}});
    int weights = probs;
    if (m_.dropout) {
      weights = g_.tensor(square);
      const int mask = g_.tensor(square / bf16, false);
      op({.inputs = {probs}, .outputs = {weights, mask}, .saves = {mask}});
    }
    const int out = g_.tensor(context);
    op({.inputs = {weights, keys}, .outputs = {out}, .saves = {weights, keys}});
    if (s_.recompute == Recompute::selective) g_.checkpoint(first, static_cast<int>(g_.ops().size()) - 1);
    return out;
  }

  int dense_mlp(int x, const LayerParams& lp) {
    const int up = linear("fc1", x, m_.hidden, m_.fc1_features() / t_, true, lp.fc1_w, -1, lp.fc1_lora);
    // GeLU (with fc1's bias fused in, as Megatron's bias_gelu) or SwiGLU keeps its input.
    const int act = g_.tensor(bf16 * tokens_ * m_.ffn / t_);
    OpDef activation{.inputs = {up}, .outputs = {act}, .saves = {up}};
    add_param(activation, lp.fc1_b);
    op(std::move(activation));
    return linear("fc2", act, m_.ffn / t_, m_.hidden, false, lp.fc2_w, -1, lp.fc2_lora);
  }

  // Router, top-k, permutation to expert order, all-to-all to the experts' devices, the experts, and back.
  int moe_mlp(int x, const LayerParams& lp, std::size_t layer) {
    const std::uint64_t rows = shard_tokens_;  // tokens this device routes
    const std::uint64_t experts = s_.moe.experts;
    const std::uint64_t k = s_.moe.top_k;
    const std::uint64_t routed = rows * k;
    const std::uint64_t h = m_.hidden;
    const std::uint64_t fe = s_.moe.expert_ffn;
    const std::uint64_t fc1e = m_.mlp == Mlp::swiglu ? 2 * fe : fe;
    const int logits = g_.tensor(fp32 * rows * experts);
    op({.inputs = {x}, .outputs = {logits}, .saves = {x}, .params = {lp.router}});
    const int probs = g_.tensor(fp32 * rows * experts);
    const int top_probs = g_.tensor(fp32 * routed);
    const int top_index = g_.tensor(int64 * routed, false);
    op({.inputs = {logits}, .outputs = {probs, top_probs, top_index}, .saves = {probs}});
    const int permuted = g_.tensor(bf16 * routed * h);
    const int order = g_.tensor(int64 * routed, false);
    op({.inputs = {x, top_index}, .outputs = {permuted, order}, .saves = {order}});

    const std::vector<std::uint64_t>& loads = shape_.expert_tokens.at(layer);
    std::uint64_t received = 0;
    for (const std::uint64_t load : loads) received += load;
    int local = permuted;
    if (s_.parallel.ep > 1) {
      local = g_.tensor(bf16 * received * h);
      op({.inputs = {permuted}, .outputs = {local}});
    }
    int combined = -1;
    if (s_.moe.grouped_gemm) {
      combined = expert_block(local, received, fc1e, fe, lp.experts, true);
    } else {
      std::vector<int> outputs;
      for (std::size_t e = 0; e < loads.size(); ++e) {
        if (loads[e] == 0) continue;  // an expert without tokens runs nothing
        outputs.push_back(expert_block(local, loads[e], fc1e, fe, {lp.experts[e]}, false));
      }
      combined = g_.tensor(bf16 * received * h);
      op({.inputs = outputs, .outputs = {combined}, .aliased_inputs = outputs});
    }
    int back = combined;
    if (s_.parallel.ep > 1) {
      back = g_.tensor(bf16 * routed * h);
      op({.inputs = {combined}, .outputs = {back}});
    }
    const int out = g_.tensor(bf16 * rows * h);
    op({.inputs = {back, top_probs, order}, .outputs = {out}, .saves = {back, top_probs, order}});
    return out;
  }

  // fc1, activation, fc2 over `rows` tokens of the received buffer, for one expert or (grouped) all.
  int expert_block(int input, std::uint64_t rows, std::uint64_t fc1e, std::uint64_t fe,
                   const std::vector<LayerParams::Expert>& experts, bool grouped) {
    const std::uint64_t h = m_.hidden;
    OpDef up{.inputs = {input}, .outputs = {g_.tensor(bf16 * rows * fc1e / t_)}, .saves = {input}};
    up.grad_contribution = bf16 * rows * h;  // this expert's slice of the input gradient
    OpDef act{.outputs = {g_.tensor(bf16 * rows * fe / t_)}};
    OpDef down{.outputs = {g_.tensor(bf16 * rows * h)}};
    for (const LayerParams::Expert& expert : experts) {
      add_param(up, expert.fc1_w);
      add_param(act, expert.fc1_b);
      add_param(down, expert.fc2_w);
      add_param(down, expert.fc2_b);
    }
    const std::string_view site = grouped ? "grouped" : "expert";
    up.forward_temps = {workspace(fmt::format("{}.fc1.fwd", site), rows)};
    up.backward_temps = {workspace(fmt::format("{}.fc1.dgrad", site), rows)};
    down.forward_temps = {workspace(fmt::format("{}.fc2.fwd", site), rows)};
    down.backward_temps = {workspace(fmt::format("{}.fc2.dgrad", site), rows)};
    const int hidden = up.outputs.front();
    op(std::move(up));
    act.inputs = {hidden};
    act.saves = {hidden};
    const int activated = act.outputs.front();
    op(std::move(act));
    down.inputs = {activated};
    down.saves = {activated};
    const int out = down.outputs.front();
    op(std::move(down));
    return out;
  }

  int layer(int x, int index) {
    group_ = index + 1;
    const LayerParams& lp = p_.layers[static_cast<std::size_t>(index)];
    const int first = static_cast<int>(g_.ops().size());
    const int ln1 = norm(x, lp.ln1_w, lp.ln1_b);
    const int qkv = linear("qkv", ln1, m_.hidden, m_.qkv_features() / t_, true, lp.qkv_w, lp.qkv_b, lp.qkv_lora);
    const int context = attention_core(qkv);
    const int proj = linear("proj", context, m_.hidden / t_, m_.hidden, false, lp.proj_w, -1, lp.proj_lora);
    const int mid = residual(proj, x, lp.proj_b);
    const int ln2 = norm(mid, lp.ln2_w, lp.ln2_b);
    const int mlp = s_.moe.experts == 0 ? dense_mlp(ln2, lp) : moe_mlp(ln2, lp, static_cast<std::size_t>(index));
    const int out = residual(mlp, mid, s_.moe.experts == 0 ? lp.fc2_b : -1);
    // Full recomputation checkpoints each layer: only its input is kept (Megatron's uniform method with
    // one layer per checkpoint).
    if (s_.recompute == Recompute::full) g_.checkpoint(first, static_cast<int>(g_.ops().size()) - 1);
    return out;
  }

  // Final norm, logits, Megatron's vocab-parallel cross-entropy (an fp32 copy of the logits that becomes
  // the softmax, saved, and later the gradient in place), and the masked mean loss.
  int head(int x, int labels, int loss_mask, int group) {
    group_ = group;
    const int normed = norm(x, p_.final_w, p_.final_b);
    const std::uint64_t vocab = padded_vocab(m_.vocab, t_) / t_;
    const int logits = linear("logits", normed, m_.hidden, vocab, true, p_.output, -1, {});
    const int wide = g_.tensor(fp32 * tokens_ * vocab);
    op({.inputs = {logits}, .outputs = {wide}});
    const int losses = g_.tensor(fp32 * tokens_);
    op({.inputs = {wide, labels}, .outputs = {losses}, .saves = {wide},
        .forward_temps = {fp32 * tokens_, fp32 * tokens_, tokens_}, .grad_from_saved = 0});
    const int loss = g_.tensor(fp32);
    op({.inputs = {losses, loss_mask}, .outputs = {loss}, .saves = {loss_mask}});
    return loss;
  }

  const TransformerSetup& s_;
  const StageParams& p_;
  const ModelShape& m_;
  const std::uint64_t t_;
  const std::uint64_t tokens_;        // b x s
  const std::uint64_t shard_tokens_;  // b x s / tp under sequence parallelism
  const std::uint64_t batch_;
  const std::uint64_t seq_;
  const MicroBatchShape& shape_;
  Graph g_;
  int group_ = 0;
};

}  // namespace

StageGraph build_stage_graph(const TransformerSetup& setup, const StageParams& params, const MicroBatchShape& shape) {
  return Builder(setup, params, shape).build();
}

}  // namespace tessera::workload
