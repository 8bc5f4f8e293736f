// `fsdp`: fully sharded data-parallel training (PyTorch FSDP, ZeRO-3) with its side streams, one device's
// trace. Parameters are gathered per layer on an all-gather stream, prefetched ahead of the compute stream
// that uses them; gradients are reduce-scattered on a reduce-scatter stream; checkpointed layer inputs go
// to the host on a copy stream and come back through device staging buffers. Every buffer made on one
// stream and used on another is `record_stream`ed there, as the framework does. docs/workloads.md says
// where each size comes from.
#include <fmt/format.h>

#include <string_view>
#include <vector>

#include "workload/emitter.hpp"
#include "workload/event_estimate.hpp"
#include "workload/model.hpp"
#include "workload/random.hpp"
#include "workload/workloads.hpp"

namespace tessera::workload {
namespace {

constexpr Bytes bf16 = 2;
constexpr Bytes fp32 = 4;
constexpr Bytes workspace_unit = Bytes{256} << 10;

// The streams, as indices into the trace's stream table.
constexpr std::uint32_t compute = 0;
constexpr std::uint32_t all_gather = 1;
constexpr std::uint32_t reduce_scatter = 2;
constexpr std::uint32_t copy = 3;

struct Config {
  ModelShape model;
  std::uint64_t tp = 1;
  std::uint64_t batch = 1;
  std::uint64_t seq = 1;
  std::uint64_t micro_batches = 1;
  std::uint64_t steps = 1;
  std::uint64_t dp = 1;
  std::uint64_t prefetch = 1;
  Bytes reduce_bytes = fp32;
  bool checkpoint = true;
  bool offload = true;
  Bytes workspace_max = 0;
  std::uint64_t seed = 1;
};

// One FSDP unit (a transformer layer, or the root: embeddings, final norm, output layer): the element
// counts of its parameters on this tensor-parallel rank, each sharded over dp along its first dimension.
struct Unit {
  std::vector<std::uint64_t> elements;
  std::uint64_t shard(std::uint64_t dp, std::size_t i) const { return ceil_div(elements[i], dp); }
  std::uint64_t shard_total(std::uint64_t dp) const {
    std::uint64_t total = 0;
    for (std::size_t i = 0; i < elements.size(); ++i) total += shard(dp, i);
    return total;
  }
};

// Parameter order inside a layer unit: norm1, qkv, proj, norm2, fc1, fc2 (biases folded into their weight).
enum LayerParam : std::size_t { norm1, qkv, proj, norm2, fc1, fc2 };
// What a layer's forward keeps for backward, in the order it makes them.
enum SavedTensor : std::size_t { saved_norm1, saved_qkv, saved_attention, saved_lse, saved_norm2, saved_up, saved_act };

Unit layer_unit(const Config& c) {
  const ModelShape& m = c.model;
  const std::uint64_t norm = m.hidden * (m.norm == Norm::layernorm ? 2 : 1);
  const std::uint64_t qkv_out = m.qkv_features() / c.tp;
  const std::uint64_t fc1_out = m.fc1_features() / c.tp;
  const std::uint64_t bias = m.bias ? 1 : 0;
  return {{norm, m.hidden * qkv_out + bias * qkv_out, m.hidden * (m.hidden / c.tp) + bias * m.hidden, norm,
           m.hidden * fc1_out + bias * fc1_out, (m.ffn / c.tp) * m.hidden + bias * m.hidden}};
}

Unit root_unit(const Config& c) {
  const ModelShape& m = c.model;
  const std::uint64_t vocab = padded_vocab(m.vocab, c.tp);
  Unit unit{{vocab * m.hidden / c.tp, m.hidden * (m.norm == Norm::layernorm ? 2 : 1)}};
  if (m.learned_positions) unit.elements.push_back(c.seq * m.hidden);
  if (!m.tied_embeddings) unit.elements.push_back(vocab * m.hidden / c.tp);
  return unit;
}

class FsdpTrainer {
 public:
  explicit FsdpTrainer(const Config& c)
      : c_(c),
        emitter_("fsdp", {StreamId{0}, StreamId{1}, StreamId{2}, StreamId{3}}),
        layer_(layer_unit(c)),
        root_(root_unit(c)),
        tokens_(c.batch * c.seq),
        gathered_(c.model.layers, no_block),
        staged_(c.model.layers, no_block),
        sharded_grad_(c.model.layers + 1, no_block) {}

  Result<Trace> run() {
    setup();
    for (std::uint64_t step = 0; step < c_.steps && !emitter_.full(); ++step) {
      emitter_.iteration(step);
      for (std::uint64_t mb = 0; mb < c_.micro_batches; ++mb) micro_batch();
      optimizer_step();
    }
    return std::move(emitter_).finish("steps, micro_batches or layers");
  }

 private:
  struct Saved {
    std::vector<Handle> blocks;  // what backward reads, freed in reverse
  };

  std::size_t root_index() const { return c_.model.layers; }
  const Unit& unit(std::size_t u) const { return u == root_index() ? root_ : layer_; }

  // Sharded parameters: fp32, one block per parameter (a DTensor each), allocated at model construction.
  void setup() {
    for (std::size_t u = 0; u <= root_index(); ++u) {
      for (std::size_t i = 0; i < unit(u).elements.size(); ++i) emitter_.alloc(fp32 * unit(u).shard(c_.dp, i));
    }
  }

  // cuBLAS's workspace for one GEMM call site: none for a quarter of the sites, else a seeded multiple of
  // 256 KiB up to workspace_mb, fixed per site as an autotuned algorithm is.
  void gemm(std::string_view site) {
    if (c_.workspace_max < workspace_unit) return;
    const std::uint64_t h = mix(c_.seed, hash_tag(site));
    if (h % 4 == 0) return;
    emitter_.free(emitter_.alloc((1 + (h >> 8) % (c_.workspace_max / workspace_unit)) * workspace_unit));
  }

  // The all-gather of a unit's parameters into one flat bf16 buffer, made on the all-gather stream and read
  // by compute (record_stream), so that its free waits for the layer's kernels.
  Handle gather(std::size_t u) {
    const Handle block = emitter_.alloc(bf16 * c_.dp * unit(u).shard_total(c_.dp), all_gather);
    emitter_.record_stream(block, compute);
    return block;
  }

  // Issues the gathers of layers [first, first + prefetch] (forward) or [first - prefetch, first] (backward)
  // not yet issued: FSDP's prefetch of the next layers while the current one computes.
  void prefetch(std::size_t first, bool forward) {
    for (std::uint64_t k = 0; k <= c_.prefetch; ++k) {
      if (forward && first + k >= c_.model.layers) break;
      if (!forward && k > first) break;
      const std::size_t layer = forward ? first + k : first - k;
      if (gathered_[layer] == no_block) gathered_[layer] = gather(layer);
    }
  }

  void release_gathered(std::size_t layer) {
    emitter_.free(gathered_[layer]);
    gathered_[layer] = no_block;
  }

  // Brings checkpointed inputs back from the host into staging buffers made on the copy stream and read by
  // compute, one layer ahead of backward.
  void stage(std::size_t first) {
    for (std::uint64_t k = 0; k <= 1 && k <= first; ++k) {
      const std::size_t layer = first - k;
      if (staged_[layer] != no_block) continue;
      staged_[layer] = emitter_.alloc(bf16 * tokens_ * c_.model.hidden, copy);
      emitter_.record_stream(staged_[layer], compute);
    }
  }

  // One layer's forward (from its input, live); the tensors backward reads are kept when `keep`, freed as soon as the
  // forward is done with them otherwise (checkpointing). Returns the layer's output.
  Handle layer_forward(bool keep, Saved& saved) {
    const ModelShape& m = c_.model;
    const std::uint64_t t = c_.tp, T = tokens_, h = m.hidden;
    const auto site = [](std::string_view op) { return fmt::format("layer.{}", op); };
    const Handle n1 = emitter_.alloc(bf16 * T * h);
    gemm(site("qkv.fwd"));
    const Handle q = emitter_.alloc(bf16 * T * m.qkv_features() / t);
    // Fused (flash) attention: output and log-sum-exp, no s x s tensors.
    const Handle attn = emitter_.alloc(bf16 * T * h / t);
    const Handle lse = emitter_.alloc(fp32 * c_.batch * (m.heads / t) * c_.seq);
    gemm(site("proj.fwd"));
    const Handle pr = emitter_.alloc(bf16 * T * h);
    const Handle h1 = emitter_.alloc(bf16 * T * h);  // the residual x + attention
    emitter_.free(pr);
    const Handle n2 = emitter_.alloc(bf16 * T * h);
    gemm(site("fc1.fwd"));
    const Handle up = emitter_.alloc(bf16 * T * m.fc1_features() / t);
    const Handle act = emitter_.alloc(bf16 * T * m.ffn / t);
    gemm(site("fc2.fwd"));
    const Handle down = emitter_.alloc(bf16 * T * h);
    const Handle out = emitter_.alloc(bf16 * T * h);  // the residual h1 + MLP
    emitter_.free(down);
    emitter_.free(h1);
    saved.blocks = {n1, q, attn, lse, n2, up, act};
    if (!keep) {
      for (const Handle block : saved.blocks) emitter_.free(block);
      saved.blocks.clear();
    }
    return out;
  }

  // One layer's backward: input gradients chained from dy, weight gradients (unsharded, bf16) as each
  // linear's backward runs. Frees what forward saved, dy, and returns dx; `grads` gets the weight gradients.
  Handle layer_backward(Handle dy, Saved& saved, std::vector<Handle>& grads) {
    const ModelShape& m = c_.model;
    const std::uint64_t t = c_.tp, T = tokens_, h = m.hidden;
    const auto grad = [&](LayerParam p) { grads.push_back(emitter_.alloc(bf16 * layer_.elements[p])); };
    const auto saved_at = [&](SavedTensor i) { return saved.blocks.at(i); };
    gemm("layer.fc2.dgrad");
    const Handle d_act = emitter_.alloc(bf16 * T * m.ffn / t);
    grad(fc2);
    emitter_.free(saved_at(saved_act));
    const Handle d_up = emitter_.alloc(bf16 * T * m.fc1_features() / t);
    emitter_.free(d_act);
    emitter_.free(saved_at(saved_up));
    gemm("layer.fc1.dgrad");
    const Handle d_n2 = emitter_.alloc(bf16 * T * h);
    grad(fc1);
    emitter_.free(d_up);
    const Handle d_h1 = emitter_.alloc(bf16 * T * h);  // dy through the residual plus the norm's gradient
    grad(norm2);
    emitter_.free(d_n2);
    emitter_.free(saved_at(saved_norm2));
    emitter_.free(dy);
    gemm("layer.proj.dgrad");
    const Handle d_attn = emitter_.alloc(bf16 * T * h / t);
    grad(proj);
    const Handle d_q = emitter_.alloc(bf16 * T * m.qkv_features() / t);
    emitter_.free(d_attn);
    emitter_.free(saved_at(saved_lse));
    emitter_.free(saved_at(saved_attention));
    gemm("layer.qkv.dgrad");
    const Handle d_n1 = emitter_.alloc(bf16 * T * h);
    grad(qkv);
    emitter_.free(d_q);
    emitter_.free(saved_at(saved_qkv));
    const Handle dx = emitter_.alloc(bf16 * T * h);
    grad(norm1);
    emitter_.free(d_n1);
    emitter_.free(saved_at(saved_norm1));
    emitter_.free(d_h1);
    saved.blocks.clear();
    return dx;
  }

  // The reduce-scatter of a unit's gradients: its input (the gradients cast to the reduce type, flat) and
  // output are made on the reduce-scatter stream, which reads the gradients (record_stream) before compute
  // frees them. The previous unit's input is freed first: FSDP2 waits for that reduce-scatter when the next
  // one begins. The first micro-batch's output becomes the sharded gradient (held until zero_grad), later
  // ones are added into it (by compute) and freed.
  void reduce(std::size_t u, std::vector<Handle>& grads, bool first_micro_batch) {
    const std::uint64_t shard = unit(u).shard_total(c_.dp);
    emitter_.free(in_flight_reduce_);
    in_flight_reduce_ = emitter_.alloc(c_.reduce_bytes * c_.dp * shard, reduce_scatter);
    for (const Handle g : grads) {
      emitter_.record_stream(g, reduce_scatter);
      emitter_.free(g);
    }
    grads.clear();
    const Handle output = emitter_.alloc(c_.reduce_bytes * shard, reduce_scatter);
    emitter_.record_stream(output, compute);
    if (first_micro_batch) {
      sharded_grad_[u] = output;
    } else {
      emitter_.free(output);
    }
  }

  void micro_batch() {
    const ModelShape& m = c_.model;
    const std::uint64_t T = tokens_, h = m.hidden, vocab = padded_vocab(m.vocab, c_.tp);
    const bool first = sharded_grad_[root_index()] == no_block;
    const Handle tokens = emitter_.alloc(8 * T);
    const Handle labels = emitter_.alloc(8 * T);
    // The root unit is gathered for the whole micro-batch (FSDP keeps the root unsharded after forward).
    const Handle root = gather(root_index());
    const Handle embedded = emitter_.alloc(bf16 * T * h);

    // Forward. Checkpointed inputs stay on the device or go to the host (after the layer is done with them).
    std::vector<Handle> inputs(m.layers, no_block);
    std::vector<Saved> saved(m.layers);
    Handle x = embedded;
    for (std::size_t layer = 0; layer < m.layers; ++layer) {
      prefetch(layer, true);
      inputs[layer] = x;
      x = layer_forward(!c_.checkpoint, saved[layer]);
      release_gathered(layer);
      if (c_.offload) {
        emitter_.record_stream(inputs[layer], copy);
        emitter_.free(inputs[layer]);
        inputs[layer] = no_block;
      }
    }

    // The head: final norm, bf16 logits, their fp32 copy that the loss turns into its gradient in place.
    gemm("head.fwd");
    const Handle normed = emitter_.alloc(bf16 * T * h);
    const Handle logits = emitter_.alloc(bf16 * T * vocab / c_.tp);
    const Handle logits32 = emitter_.alloc(fp32 * T * vocab / c_.tp);
    emitter_.free(logits);
    const Handle losses = emitter_.alloc(fp32 * T);
    const Handle loss = emitter_.alloc(fp32);
    emitter_.free(losses);

    // Backward of the head; the root's weight gradients wait for the embedding's backward to be reduced.
    // Tied embeddings: the output layer's gradient is the table's, made here and added to below.
    std::vector<Handle> root_grads;
    emitter_.free(loss);
    gemm("head.dgrad");
    const Handle d_normed = emitter_.alloc(bf16 * T * h);
    root_grads.push_back(emitter_.alloc(bf16 * root_.elements[m.tied_embeddings ? 0 : root_.elements.size() - 1]));
    emitter_.free(logits32);
    Handle dy = emitter_.alloc(bf16 * T * h);
    root_grads.push_back(emitter_.alloc(bf16 * root_.elements[1]));
    emitter_.free(d_normed);
    emitter_.free(normed);
    emitter_.free(x);

    for (std::size_t layer = m.layers; layer-- > 0;) {
      prefetch(layer, false);
      if (c_.offload) stage(layer);
      // Recomputation from the kept (or staged) input; its output is not needed again.
      if (c_.checkpoint) emitter_.free(layer_forward(true, saved[layer]));
      std::vector<Handle> grads;
      dy = layer_backward(dy, saved[layer], grads);
      if (c_.offload) {
        emitter_.free(staged_[layer]);
        staged_[layer] = no_block;
      } else if (layer > 0) {
        emitter_.free(inputs[layer]);  // the embedding's output is freed below
      }
      release_gathered(layer);
      reduce(layer, grads, first);
    }

    // The embedding's backward: a dense gradient of the table (tied: a temporary added into the one above),
    // the learned positions' gradient, then the root's reduce-scatter.
    if (m.tied_embeddings) {
      emitter_.free(emitter_.alloc(bf16 * root_.elements[0]));
    } else {
      root_grads.push_back(emitter_.alloc(bf16 * root_.elements[0]));
    }
    if (m.learned_positions) root_grads.push_back(emitter_.alloc(bf16 * root_.elements[2]));
    emitter_.free(dy);
    if (!c_.offload) emitter_.free(embedded);
    emitter_.free(root);
    reduce(root_index(), root_grads, first);
    emitter_.free(in_flight_reduce_);  // backward ends: FSDP waits for the last reduce-scatter
    in_flight_reduce_ = no_block;
    emitter_.free(labels);
    emitter_.free(tokens);
  }

  // Adam on the shards: its two moments are made at the first step (PyTorch creates optimizer state
  // lazily), one fp32 temporary per unit for the foreach update; zero_grad frees the sharded gradients.
  void optimizer_step() {
    if (!optimizer_ready_) {
      for (std::size_t u = 0; u <= root_index(); ++u) {
        for (std::size_t i = 0; i < unit(u).elements.size(); ++i) {
          emitter_.alloc(fp32 * unit(u).shard(c_.dp, i));
          emitter_.alloc(fp32 * unit(u).shard(c_.dp, i));
        }
      }
      optimizer_ready_ = true;
    }
    const Handle norm = emitter_.alloc(fp32);
    for (std::size_t u = 0; u <= root_index(); ++u) {
      emitter_.free(emitter_.alloc(fp32 * unit(u).shard_total(c_.dp)));
    }
    emitter_.free(norm);
    for (Handle& grad : sharded_grad_) {
      emitter_.free(grad);
      grad = no_block;
    }
  }

  const Config& c_;
  Emitter emitter_;
  Unit layer_;
  Unit root_;
  std::uint64_t tokens_;
  std::vector<Handle> gathered_;
  std::vector<Handle> staged_;
  std::vector<Handle> sharded_grad_;
  Handle in_flight_reduce_ = no_block;
  bool optimizer_ready_ = false;
};

Config read_config(ParameterReader& reader) {
  Config c;
  c.model = read_model(reader, {.seq = true, .dropout = false});
  c.tp = reader.integer("tp", 1, 64);
  c.seq = reader.integer("seq", 1, 1 << 20);
  c.batch = reader.integer("micro_batch", 1, 1 << 16);
  c.micro_batches = reader.integer("micro_batches", 1, 1 << 16);
  c.steps = reader.integer("steps", 1, 1 << 24);
  c.dp = reader.integer("dp", 1, 1 << 16);
  c.prefetch = reader.integer("prefetch", 1, 8);
  c.reduce_bytes = reader.choice("reduce_dtype", {"fp32", "bf16"}) == 0 ? fp32 : bf16;
  c.checkpoint = reader.flag("checkpoint");
  c.offload = reader.flag("offload");
  c.workspace_max = reader.integer("workspace_mb", 0, 1 << 12) << 20;
  c.seed = reader.integer("seed", 0, ~std::uint64_t{0});
  if (!reader.ok()) return c;
  const ModelShape& m = c.model;
  reader.require(m.heads % c.tp == 0, "tp", fmt::format("must divide heads={}", m.heads));
  reader.require(m.kv_heads % c.tp == 0, "tp", fmt::format("must divide kv_heads={}", m.kv_heads));
  reader.require(m.ffn % c.tp == 0 && m.hidden % c.tp == 0, "tp",
                 fmt::format("must divide hidden={} and ffn={}", m.hidden, m.ffn));
  reader.require(!c.offload || c.checkpoint, "offload",
                 "offloads the checkpointed layer inputs, so it needs checkpoint=true");
  // At least 40 events per layer and micro-batch (forward, recomputation, backward, the two collectives).
  refuse_past_event_limit(reader, {{"steps",
                                    fmt::format("steps x micro_batches x layers x 40 = {} x {} x {} x 40", c.steps,
                                                c.micro_batches, m.layers),
                                    saturating_product({c.steps, c.micro_batches, m.layers, 40})}});
  return c;
}

}  // namespace

WorkloadDescription fsdp_description() {
  std::vector<WorkloadParameter> parameters = model_parameters("llama2-7b", {.seq = true, .dropout = false});
  const std::vector<WorkloadParameter> own = {
      {"micro_batch", "1", "sequences per micro-batch"},
      {"micro_batches", "2", "micro-batches per step (gradient accumulation; gradients are reduce-scattered every one)"},
      {"steps", "6", "optimizer steps; each is marked by an iteration event"},
      {"dp", "8", "sharding group size: parameters, gradients and optimizer states are sharded over it"},
      {"prefetch", "1", "layers whose all-gather is issued ahead of the one computing"},
      {"reduce_dtype", "fp32", "gradient reduce-scatter type: fp32 or bf16"},
      {"checkpoint", "true", "activation checkpointing of every layer: keep its input, recompute it in backward"},
      {"offload", "true", "checkpointed inputs go to the host on the copy stream and come back through staging "
                          "buffers (needs checkpoint)"},
      {"workspace_mb", "8", "largest GEMM workspace in MiB, sized per call site from the seed; 0 = none"},
      {"seed", "1", "random seed"},
  };
  parameters.insert(parameters.end(), own.begin(), own.end());
  return {"fsdp",
          "fully sharded training (FSDP, ZeRO-3) on four streams: per-layer all-gather prefetch, reduce-scatter, "
          "activation offload, with record_stream",
          std::move(parameters), preset_names(false)};
}

Result<Trace> generate_fsdp(const Parameters& parameters) {
  ParameterReader reader(parameters);
  const Config config = read_config(reader);
  if (auto status = reader.status(); !status) return std::move(status).error();
  return FsdpTrainer(config).run();
}

}  // namespace tessera::workload
