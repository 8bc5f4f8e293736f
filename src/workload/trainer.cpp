#include "workload/trainer.hpp"

#include <algorithm>
#include <deque>
#include <memory>

#include "workload/emitter.hpp"

namespace tessera::workload {
namespace {

constexpr Bytes bf16 = 2;
constexpr Bytes fp32 = 4;

std::size_t at(int index) { return static_cast<std::size_t>(index); }

// The data-parallel group a parameter's gradients are reduced over: the dense parameters over dp, the
// experts over dp / ep (Megatron's expert data-parallel group when expert tensor parallelism equals tp).
std::uint64_t group_size(const TrainerConfig& config, const ParamDef& def) {
  return def.expert ? config.setup.parallel.dp / config.setup.parallel.ep : config.setup.parallel.dp;
}

// Whether any gradient is reduced: a trainable parameter with a data-parallel group of more than one.
bool communicates(const TrainerConfig& config, const StageParams& params) {
  return std::any_of(params.defs.begin(), params.defs.end(),
                     [&](const ParamDef& def) { return def.trainable && group_size(config, def) > 1; });
}

class Trainer final : public ParamHooks {
 public:
  explicit Trainer(const TrainerConfig& config)
      : config_(config),
        params_(build_stage_params(config.setup)),
        comm_stream_(config.comm_stream && communicates(config, params_) ? 1U : 0U),
        emitter_(config.name, comm_stream_ == 1 ? std::vector<StreamId>{StreamId{0}, StreamId{1}}
                                                : std::vector<StreamId>{StreamId{0}}) {
    const std::size_t n = params_.defs.size();
    gathered_.assign(n, no_block);
    pending_grad_.assign(n, no_block);
    uses_left_.assign(n, 0);
    bucket_of_.assign(n, -1);
    make_buckets();
  }

  Result<Trace> run() {
    allocate_persistent();
    const TransformerSetup& setup = config_.setup;
    const std::uint64_t m = config_.micro_batches;
    // Megatron's 1F1B: stage k runs pp-k-1 warm-up forwards, then alternates one forward and one backward,
    // then drains the backwards; the first stage holds up to pp micro-batches' activations.
    const std::uint64_t warmup = std::min(setup.parallel.pp - setup.parallel.stage - 1, m);
    for (std::uint64_t step = 0; step < config_.steps && !emitter_.full(); ++step) {
      emitter_.iteration(step);
      std::uint64_t next_forward = 0;
      std::uint64_t next_backward = 0;
      for (std::uint64_t i = 0; i < warmup; ++i) forward(step, next_forward++);
      while (next_forward < m) {
        forward(step, next_forward++);
        backward(next_backward++ + 1 == m);
      }
      while (next_backward < m) backward(next_backward++ + 1 == m);
      optimizer_step();
      if (leaked_) break;
    }
    if (leaked_) return make_error(Errc::platform, "workload: internal error: a micro-batch leaked a tensor");
    return std::move(emitter_).finish(config_.what_to_lower);
  }

  void enter_group(int, const std::vector<int>& params) override {
    if (config_.zero < 3) return;
    for (const int param : params) {
      const ParamDef& def = params_.defs[at(param)];
      if (group_size(config_, def) > 1 && gathered_[at(param)] == no_block) {
        gathered_[at(param)] = emitter_.alloc(bf16 * def.elements);  // all-gathered full weight
      }
    }
  }

  void leave_group(int, const std::vector<int>& params) override {
    for (const int param : params) {
      emitter_.free(gathered_[at(param)]);
      gathered_[at(param)] = no_block;
    }
  }

  void weight_grad(int param, bool computed) override {
    const ParamDef& def = params_.defs[at(param)];
    if (!def.trainable) return;
    const Bytes bytes = bf16 * def.elements;
    if (computed) {
      if (sharded_grads(def)) {
        // ZeRO-2/3 keep no full gradient buffer: the first contribution becomes the parameter's .grad until
        // its bucket is reduce-scattered; later ones are computed apart and added.
        if (pending_grad_[at(param)] == no_block) {
          pending_grad_[at(param)] = emitter_.alloc(bytes);
        } else {
          emitter_.free(emitter_.alloc(bytes));
        }
      } else if (!config_.fused_wgrad || def.dense_grad) {
        emitter_.free(emitter_.alloc(bytes));  // computed apart, then added into the gradient buffer
      }
    }
    if (--uses_left_[at(param)] == 0) ready(param);
  }

 private:
  struct Bucket {
    std::vector<int> params;
    Bytes bytes = 0;
    std::uint64_t group = 1;  // data-parallel size it is reduced over
    int waiting = 0;
  };

  bool sharded_grads(const ParamDef& def) const { return config_.zero >= 2 && group_size(config_, def) > 1; }

  // Buckets of about bucket_bytes of gradients, filled in backward order (the reverse of the parameters'
  // order), dense and expert parameters apart, as DDP and Megatron's gradient buffers do.
  void make_buckets() {
    Bucket dense;
    Bucket expert;
    auto close = [this](Bucket& bucket) {
      if (!bucket.params.empty()) buckets_.push_back(std::move(bucket));
      bucket = Bucket{};
    };
    for (int p = static_cast<int>(params_.defs.size()) - 1; p >= 0; --p) {
      const ParamDef& def = params_.defs[at(p)];
      if (!def.trainable) continue;
      Bucket& bucket = def.expert ? expert : dense;
      bucket.params.push_back(p);
      bucket.bytes += bf16 * def.elements;
      bucket.group = group_size(config_, def);
      if (bucket.bytes >= config_.bucket_bytes) close(bucket);
    }
    close(dense);
    close(expert);
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
      for (const int p : buckets_[b].params) bucket_of_[at(p)] = static_cast<int>(b);
    }
  }

  // Model construction, then the data-parallel wrapper's gradient buffers, then the optimizer's states.
  void allocate_persistent() {
    for (const ParamDef& def : params_.defs) {
      const bool sharded = config_.zero >= 3 && group_size(config_, def) > 1;
      emitter_.alloc(bf16 * (sharded ? ceil_div(def.elements, group_size(config_, def)) : def.elements));
    }
    for (const Bucket& bucket : buckets_) {
      if (sharded_grads(params_.defs[at(bucket.params.front())])) {
        for (const int p : bucket.params) emitter_.alloc(bf16 * ceil_div(params_.defs[at(p)].elements, bucket.group));
      } else {
        emitter_.alloc(bucket.bytes);  // one contiguous buffer per bucket
      }
    }
    for (const ParamDef& def : params_.defs) {
      if (!def.trainable) continue;
      const std::uint64_t elements = optimizer_elements(def);
      for (int state = 0; state < 3; ++state) emitter_.alloc(fp32 * elements);  // master, exp_avg, exp_avg_sq
    }
  }

  std::uint64_t optimizer_elements(const ParamDef& def) const {
    return config_.zero >= 1 ? ceil_div(def.elements, group_size(config_, def)) : def.elements;
  }

  void forward(std::uint64_t step, std::uint64_t micro) {
    MicroBatchShape shape = config_.shape(step, micro);
    StageGraph stage = build_stage_graph(config_.setup, params_, shape);
    auto run = std::make_unique<MicroBatch>(std::move(stage.graph), emitter_, *this);
    run->forward();
    if (!config_.setup.last_stage()) run->release_output();  // sent to the next stage
    in_flight_.push_back({std::move(run), stage.received, std::move(shape)});
  }

  void backward(bool last_micro_batch) {
    InFlight current = std::move(in_flight_.front());
    in_flight_.pop_front();
    MicroBatch& run = *current.run;
    // Gradients are communicated at the last micro-batch of the step, except under ZeRO-2/3, which reduce
    // every micro-batch because they keep no full gradient buffer.
    communicate_ = last_micro_batch || config_.zero >= 2;
    for (Bucket& bucket : buckets_) bucket.waiting = static_cast<int>(bucket.params.size());
    for (std::size_t p = 0; p < params_.defs.size(); ++p) {
      uses_left_[p] = run.graph().param_uses(static_cast<int>(p));
    }
    for (std::size_t p = 0; p < params_.defs.size(); ++p) {
      if (params_.defs[p].trainable && uses_left_[p] == 0) ready(static_cast<int>(p));
    }
    Handle seed = no_block;
    if (config_.setup.last_stage()) {
      seed = emitter_.alloc(fp32);  // the loss's gradient, a one
    } else {
      const MicroBatchShape& shape = current.shape;
      seed = emitter_.alloc(bf16 * ceil_div(shape.batch * shape.seq, config_.setup.sequence_shard()) *
                            config_.setup.model.hidden);  // received from the next stage
    }
    run.backward(seed);
    emitter_.free(in_flight_comm_);  // the last bucket's communication completes
    in_flight_comm_ = no_block;
    if (current.received >= 0) emitter_.free(run.take_input_grad(current.received));  // sent back
    if (!run.finish()) leaked_ = true;
  }

  void ready(int param) {
    const int b = bucket_of_[at(param)];
    if (b < 0) return;
    Bucket& bucket = buckets_[at(b)];
    if (--bucket.waiting == 0) issue(bucket);
  }

  // A ready bucket's gradients are copied into a flat communication buffer on the communication stream and
  // reduced; the buffer lives until the next bucket is issued (two in flight, as with overlapped reduction).
  void issue(Bucket& bucket) {
    if (!communicate_ || bucket.group <= 1) return;
    const Handle buffer = emitter_.alloc(bucket.bytes, comm_stream_);
    for (const int p : bucket.params) {
      emitter_.free(pending_grad_[at(p)]);  // reduce-scattered into the persistent shard
      pending_grad_[at(p)] = no_block;
    }
    emitter_.free(in_flight_comm_);
    in_flight_comm_ = buffer;
  }

  // Gradient norm for clipping, then Adam tensor by tensor on this device's shard: the bf16 gradient is
  // copied to fp32 and the states are updated in place.
  void optimizer_step() {
    const Handle norm = emitter_.alloc(fp32);
    const Handle overflow = emitter_.alloc(fp32);
    for (const ParamDef& def : params_.defs) {
      if (!def.trainable) continue;
      emitter_.free(emitter_.alloc(fp32 * optimizer_elements(def)));
    }
    emitter_.free(overflow);
    emitter_.free(norm);
  }

  struct InFlight {
    std::unique_ptr<MicroBatch> run;
    int received = -1;
    MicroBatchShape shape;
  };

  const TrainerConfig& config_;
  StageParams params_;
  std::uint32_t comm_stream_;
  Emitter emitter_;
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_;
  std::vector<Handle> gathered_;
  std::vector<Handle> pending_grad_;
  std::vector<int> uses_left_;
  std::deque<InFlight> in_flight_;
  Handle in_flight_comm_ = no_block;
  bool communicate_ = false;
  bool leaked_ = false;
};

}  // namespace

Result<Trace> run_training(const TrainerConfig& config) { return Trainer(config).run(); }

Bytes persistent_bytes(const TrainerConfig& config, const StageParams& params) {
  Bytes total = 0;
  for (const ParamDef& def : params.defs) {
    const std::uint64_t d = group_size(config, def);
    const std::uint64_t shard = ceil_div(def.elements, d);
    total += bf16 * (config.zero >= 3 && d > 1 ? shard : def.elements);
    if (!def.trainable) continue;
    total += bf16 * (config.zero >= 2 && d > 1 ? shard : def.elements);
    total += 3 * fp32 * (config.zero >= 1 ? shard : def.elements);
  }
  return total;
}

}  // namespace tessera::workload
