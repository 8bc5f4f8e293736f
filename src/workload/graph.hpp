// One micro-batch of a model as a dataflow graph of tensors and ops, and its execution the way PyTorch's
// autograd allocates it:
//   forward   an op allocates its outputs (and its workspaces, freed at its end); a tensor is freed when
//             its last consumer has run, unless an op saved it for backward
//   backward  ops in reverse order: allocate the gradients of the inputs (an addition passes its output's
//             gradient through without allocating; a second contribution to a gradient is computed into a
//             temporary and added in place), report the weight gradients, free what the op saved, free the
//             gradients of its outputs
//   recompute the ops of a checkpointed segment save nothing in forward; the checkpoint keeps the
//             segment's inputs, and backward re-runs the segment, saving, before going through it
// Sizes come from the builder (transformer_graph.cpp); this file knows no model.
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/types.hpp"
#include "workload/emitter.hpp"

namespace tessera::workload {

struct TensorDef {
  Bytes bytes = 0;
  bool differentiable = true;  // false: indices, masks, statistics; no gradient flows to them
  bool requires_grad = false;  // set for external inputs by the builder, computed for the others
  int producer = -1;           // -1: an external input, allocated when the forward starts
};

struct OpDef {
  std::vector<int> inputs = {};
  std::vector<int> outputs = {};
  std::vector<int> saves = {};   // tensors kept for backward, when the op records a graph
  std::vector<int> params = {};  // parameters it uses (their weight gradients come from its backward)
  std::vector<Bytes> forward_temps = {};   // workspaces live while the op's outputs are allocated
  std::vector<Bytes> backward_temps = {};  // the same in backward
  std::vector<int> aliased_inputs = {};    // inputs whose gradient is outputs[0]'s gradient (additions, views)
  Bytes grad_contribution = 0;        // bytes of a later gradient contribution to an input; 0: the input's size
  int grad_from_saved = -1;           // inputs[0]'s gradient is computed in place in saves[k]
  int group = 0;                      // the parameter group (layer), for gathering sharded parameters
};

class Graph {
 public:
  int input(Bytes bytes, bool differentiable = false, bool requires_grad = false);
  int tensor(Bytes bytes, bool differentiable = true);
  int op(OpDef def);
  // Ops first..last (inclusive) are recomputed in backward instead of saving.
  void checkpoint(int first_op, int last_op);
  void set_output(int tensor) { output_ = tensor; }

  // After the last op: consumers, which tensors require gradients, which ops record, segments and groups.
  void finalize(const std::vector<bool>& trainable_params);

  const std::vector<TensorDef>& tensors() const noexcept { return tensors_; }
  const std::vector<OpDef>& ops() const noexcept { return ops_; }
  int output() const noexcept { return output_; }
  // How many backward passes of recording ops use the parameter: its gradient is complete after that many.
  int param_uses(int param) const;
  const std::vector<int>& group_params(int group) const { return group_params_[static_cast<std::size_t>(group)]; }

 private:
  friend class MicroBatch;
  struct Segment {
    int first = 0;
    int last = 0;
    std::vector<int> inputs = {};  // tensors its ops consume that come from outside it
  };

  std::vector<TensorDef> tensors_;
  std::vector<OpDef> ops_;
  std::vector<int> external_;  // input tensors in creation order
  std::vector<Segment> segments_;
  int output_ = -1;
  // Computed by finalize().
  std::vector<int> consumers_;
  std::vector<bool> records_;
  std::vector<int> segment_of_;
  std::vector<int> group_first_, group_last_;
  std::vector<std::vector<int>> group_params_;
  std::vector<int> param_uses_;
};

// What the training loop does with parameters while the graph runs.
class ParamHooks {
 public:
  // Before an op of the group runs (forward, recompute or backward) and after the group is done (after its
  // last op in forward, after its first op in backward): ZeRO-3 gathers and frees the group's parameters.
  virtual void enter_group(int group, const std::vector<int>& params) = 0;
  virtual void leave_group(int group, const std::vector<int>& params) = 0;
  // A backward pass that uses a trainable parameter ran; `computed` is false when no gradient reached it.
  virtual void weight_grad(int param, bool computed) = 0;

 protected:
  ~ParamHooks() = default;
};

// The execution of one graph: forward, then (for training) backward.
class MicroBatch {
 public:
  MicroBatch(Graph graph, Emitter& emitter, ParamHooks& hooks);

  // Allocates the external inputs, runs the ops and keeps the graph's output.
  void forward();
  // Frees the output after a pipeline send (Megatron's deallocate_output_tensor).
  void release_output();
  // `output_grad`: the block holding the gradient of the output (received from the next stage, or the
  // loss's seed), owned by the micro-batch from here on.
  void backward(Handle output_grad);
  // After backward: the gradient of an external input (to send to the previous stage), handed to the caller.
  Handle take_input_grad(int tensor);
  // Frees whatever is still held (the output when backward never ran). True when nothing leaked.
  bool finish();

  const Graph& graph() const noexcept { return graph_; }

 private:
  struct Instance {
    Handle block = no_block;
    int refs = 0;
  };
  int make(Bytes bytes, int refs);
  void ref(int instance) { ++instances_[static_cast<std::size_t>(instance)].refs; }
  void unref(int instance);
  void run_forward_op(int op, bool recording, int scope_segment);
  int consumers_in(int segment, int tensor) const;
  void recompute(int segment);
  void backward_op(int op);
  void enter(int group);

  Graph graph_;
  Emitter& emitter_;
  ParamHooks& hooks_;
  std::vector<Instance> instances_;
  std::vector<int> value_;  // tensor -> instance of its value, -1 when none
  std::vector<int> grad_;   // tensor -> instance of its gradient, -1 when none
  std::vector<std::vector<int>> saved_;       // op -> instances it holds for backward
  std::vector<std::vector<int>> checkpoint_;  // segment -> instances the checkpoint holds
  std::vector<bool> entered_;
  int output_instance_ = -1;
};

}  // namespace tessera::workload
