#include "workload/graph.hpp"

#include <algorithm>
#include <utility>

namespace tessera::workload {
namespace {

std::size_t at(int index) { return static_cast<std::size_t>(index); }

bool contains(const std::vector<int>& list, int value) {
  return std::find(list.begin(), list.end(), value) != list.end();
}

}  // namespace

int Graph::input(Bytes bytes, bool differentiable, bool requires_grad) {
  tensors_.push_back({bytes, differentiable, requires_grad && differentiable, -1});
  const int id = static_cast<int>(tensors_.size()) - 1;
  external_.push_back(id);
  return id;
}

int Graph::tensor(Bytes bytes, bool differentiable) {
  tensors_.push_back({bytes, differentiable, false, -1});
  return static_cast<int>(tensors_.size()) - 1;
}

int Graph::op(OpDef def) {
  const int id = static_cast<int>(ops_.size());
  for (const int output : def.outputs) tensors_[at(output)].producer = id;
  ops_.push_back(std::move(def));
  return id;
}

void Graph::checkpoint(int first_op, int last_op) { segments_.push_back({first_op, last_op, {}}); }

void Graph::finalize(const std::vector<bool>& trainable_params) {
  consumers_.assign(tensors_.size(), 0);
  records_.assign(ops_.size(), false);
  segment_of_.assign(ops_.size(), -1);
  int groups = 0;
  for (const OpDef& op : ops_) groups = std::max(groups, op.group + 1);
  group_first_.assign(at(groups), -1);
  group_last_.assign(at(groups), -1);
  group_params_.assign(at(groups), {});
  param_uses_.assign(trainable_params.size(), 0);

  for (std::size_t i = 0; i < ops_.size(); ++i) {
    OpDef& op = ops_[i];
    // An op that names an input twice consumes it once.
    std::vector<int> unique;
    for (const int input : op.inputs) {
      if (!contains(unique, input)) unique.push_back(input);
    }
    op.inputs = std::move(unique);
    bool flows = false;
    for (const int input : op.inputs) {
      ++consumers_[at(input)];
      flows = flows || tensors_[at(input)].requires_grad;
    }
    for (const int param : op.params) flows = flows || trainable_params[at(param)];
    for (const int output : op.outputs) {
      TensorDef& tensor = tensors_[at(output)];
      tensor.requires_grad = tensor.differentiable && flows;
      records_[i] = records_[i] || tensor.requires_grad;
    }
    if (records_[i]) {
      for (const int param : op.params) {
        if (trainable_params[at(param)]) ++param_uses_[at(param)];
      }
    }
    const auto group = at(op.group);
    if (group_first_[group] < 0) group_first_[group] = static_cast<int>(i);
    group_last_[group] = static_cast<int>(i);
    for (const int param : op.params) {
      if (!contains(group_params_[group], param)) group_params_[group].push_back(param);
    }
  }
  for (std::size_t s = 0; s < segments_.size(); ++s) {
    Segment& segment = segments_[s];
    for (int i = segment.first; i <= segment.last; ++i) {
      segment_of_[at(i)] = static_cast<int>(s);
      for (const int input : ops_[at(i)].inputs) {
        const int producer = tensors_[at(input)].producer;
        const bool outside = producer < segment.first || producer > segment.last;
        if (outside && !contains(segment.inputs, input)) segment.inputs.push_back(input);
      }
    }
  }
}

int Graph::param_uses(int param) const {
  return at(param) < param_uses_.size() ? param_uses_[at(param)] : 0;
}

MicroBatch::MicroBatch(Graph graph, Emitter& emitter, ParamHooks& hooks)
    : graph_(std::move(graph)), emitter_(emitter), hooks_(hooks) {
  value_.assign(graph_.tensors_.size(), -1);
  grad_.assign(graph_.tensors_.size(), -1);
  saved_.assign(graph_.ops_.size(), {});
  checkpoint_.assign(graph_.segments_.size(), {});
  entered_.assign(graph_.group_first_.size(), false);
}

int MicroBatch::make(Bytes bytes, int refs) {
  instances_.push_back({emitter_.alloc(bytes), refs});
  const int id = static_cast<int>(instances_.size()) - 1;
  if (refs == 0) unref(id);  // nobody wants it: allocated and freed at once, as an unused output is
  return id;
}

void MicroBatch::unref(int instance) {
  Instance& held = instances_[at(instance)];
  if (--held.refs <= 0 && held.block != no_block) {
    emitter_.free(held.block);
    held.block = no_block;
  }
}

void MicroBatch::enter(int group) {
  entered_[at(group)] = true;
  hooks_.enter_group(group, graph_.group_params(group));
}

int MicroBatch::consumers_in(int segment, int tensor) const {
  const Graph::Segment& range = graph_.segments_[at(segment)];
  int count = 0;
  for (int i = range.first; i <= range.last; ++i) {
    if (contains(graph_.ops_[at(i)].inputs, tensor)) ++count;
  }
  return count;
}

void MicroBatch::run_forward_op(int op_index, bool recording, int scope_segment) {
  const OpDef& op = graph_.ops_[at(op_index)];
  enter(op.group);
  std::vector<Handle> temps;
  for (const Bytes bytes : op.forward_temps) temps.push_back(emitter_.alloc(bytes));
  std::vector<int> outputs;
  for (const int output : op.outputs) {
    // Hold the new value for its consumers; a fresh instance starts with one extra reference, dropped below,
    // so that an output nobody consumes or saves is freed only after the op.
    const int consumers = scope_segment < 0 ? graph_.consumers_[at(output)] : consumers_in(scope_segment, output);
    const bool is_output = scope_segment < 0 && output == graph_.output_;
    value_[at(output)] = make(graph_.tensors_[at(output)].bytes, consumers + (is_output ? 1 : 0) + 1);
    outputs.push_back(value_[at(output)]);
    if (is_output) output_instance_ = value_[at(output)];
  }
  if (recording && graph_.records_[at(op_index)]) {
    for (const int saved : op.saves) {
      ref(value_[at(saved)]);
      saved_[at(op_index)].push_back(value_[at(saved)]);
    }
  }
  for (auto it = temps.rbegin(); it != temps.rend(); ++it) emitter_.free(*it);
  for (const int input : op.inputs) unref(value_[at(input)]);
  for (const int instance : outputs) unref(instance);
}

void MicroBatch::forward() {
  std::vector<int> held;
  for (const int input : graph_.external_) {
    // The batch stays referenced by the training loop until the forward returns.
    value_[at(input)] = make(graph_.tensors_[at(input)].bytes, graph_.consumers_[at(input)] + 1);
    held.push_back(value_[at(input)]);
  }
  for (std::size_t i = 0; i < graph_.ops_.size(); ++i) {
    const int segment = graph_.segment_of_[i];
    if (segment >= 0 && graph_.segments_[at(segment)].first == static_cast<int>(i)) {
      for (const int input : graph_.segments_[at(segment)].inputs) {
        ref(value_[at(input)]);
        checkpoint_[at(segment)].push_back(value_[at(input)]);
      }
    }
    run_forward_op(static_cast<int>(i), segment < 0, -1);
    const int group = graph_.ops_[i].group;
    if (graph_.group_last_[at(group)] == static_cast<int>(i)) {
      hooks_.leave_group(group, graph_.group_params(group));
      entered_[at(group)] = false;
    }
  }
  for (const int instance : held) unref(instance);
}

void MicroBatch::release_output() {
  if (output_instance_ >= 0) {
    unref(output_instance_);
    output_instance_ = -1;
  }
}

void MicroBatch::recompute(int segment) {
  const Graph::Segment& range = graph_.segments_[at(segment)];
  bool any = false;
  for (int i = range.first; i <= range.last; ++i) any = any || graph_.records_[at(i)];
  if (!any) return;
  // The segment's inputs are still held by the checkpoint; take references for their uses inside it.
  for (const int input : range.inputs) {
    for (int uses = consumers_in(segment, input); uses > 0; --uses) ref(value_[at(input)]);
  }
  for (int i = range.first; i <= range.last; ++i) run_forward_op(i, true, segment);
}

void MicroBatch::backward_op(int op_index) {
  const OpDef& op = graph_.ops_[at(op_index)];
  bool flowing = false;
  for (const int output : op.outputs) flowing = flowing || grad_[at(output)] >= 0;
  if (flowing) {
    if (!entered_[at(op.group)]) enter(op.group);
    std::vector<Handle> temps;
    for (const Bytes bytes : op.backward_temps) temps.push_back(emitter_.alloc(bytes));
    for (std::size_t k = 0; k < op.inputs.size(); ++k) {
      const int input = op.inputs[k];
      const TensorDef& tensor = graph_.tensors_[at(input)];
      if (!tensor.requires_grad) continue;
      int& grad = grad_[at(input)];
      const int passed = grad_[at(op.outputs.front())];
      if (contains(op.aliased_inputs, input) && passed >= 0) {
        if (grad < 0) {
          grad = passed;
          ref(grad);
        }  // else: added in place into the existing gradient
      } else if (k == 0 && op.grad_from_saved >= 0 && grad < 0) {
        std::vector<int>& saved = saved_[at(op_index)];
        grad = saved[at(op.grad_from_saved)];
        saved.erase(saved.begin() + op.grad_from_saved);  // the reference moves to the gradient
      } else if (grad < 0) {
        grad = make(tensor.bytes, 1);
      } else {
        emitter_.free(emitter_.alloc(op.grad_contribution != 0 ? op.grad_contribution : tensor.bytes));
      }
    }
    for (const int param : op.params) hooks_.weight_grad(param, true);
    for (auto it = temps.rbegin(); it != temps.rend(); ++it) emitter_.free(*it);
  } else if (graph_.records_[at(op_index)]) {
    for (const int param : op.params) hooks_.weight_grad(param, false);
  }
  for (const int instance : saved_[at(op_index)]) unref(instance);
  saved_[at(op_index)].clear();
  for (const int output : op.outputs) {
    if (grad_[at(output)] >= 0) {
      unref(grad_[at(output)]);
      grad_[at(output)] = -1;
    }
  }
}

void MicroBatch::backward(Handle output_grad) {
  if (graph_.output_ >= 0) {
    instances_.push_back({output_grad, 1});
    grad_[at(graph_.output_)] = static_cast<int>(instances_.size()) - 1;
  }
  for (int i = static_cast<int>(graph_.ops_.size()) - 1; i >= 0; --i) {
    const int segment = graph_.segment_of_[at(i)];
    if (segment >= 0 && graph_.segments_[at(segment)].last == i) {
      enter(graph_.ops_[at(i)].group);
      recompute(segment);
    }
    backward_op(i);
    if (segment >= 0 && graph_.segments_[at(segment)].first == i) {
      for (const int instance : checkpoint_[at(segment)]) unref(instance);
      checkpoint_[at(segment)].clear();
    }
    const int group = graph_.ops_[at(i)].group;
    if (graph_.group_first_[at(group)] == i && entered_[at(group)]) {
      hooks_.leave_group(group, graph_.group_params(group));
      entered_[at(group)] = false;
    }
  }
  release_output();
}

Handle MicroBatch::take_input_grad(int tensor) {
  int& grad = grad_[at(tensor)];
  if (grad < 0) return no_block;
  Instance& held = instances_[at(grad)];
  Handle block = no_block;
  if (--held.refs <= 0) {
    block = held.block;
    held.block = no_block;
  }
  grad = -1;
  return block;
}

bool MicroBatch::finish() {
  release_output();
  bool clean = true;
  for (Instance& instance : instances_) {
    if (instance.block != no_block) {
      clean = false;
      emitter_.free(instance.block);
      instance.block = no_block;
    }
  }
  return clean;
}

}  // namespace tessera::workload
