// The execution model under every training workload (src/workload/graph.hpp): what forward frees, what
// backward allocates, recomputation; and the emitter's limit.
#include <gtest/gtest.h>

#include "workload/emitter.hpp"
#include "workload/graph.hpp"

namespace tessera::workload {
namespace {

class CountingHooks final : public ParamHooks {
 public:
  void enter_group(int, const std::vector<int>&) override { ++entered; }
  void leave_group(int, const std::vector<int>&) override { ++left; }
  void weight_grad(int, bool computed) override { grads += computed ? 1 : 0; }
  int entered = 0, left = 0, grads = 0;
};

// x -> a (saved by op 1) -> b -> loss. Op 0 uses trainable parameter 0.
Graph chain(bool checkpoint) {
  Graph graph;
  const int x = graph.input(100);
  const int a = graph.tensor(1000);
  const int b = graph.tensor(2000);
  const int loss = graph.tensor(4);
  graph.op({.inputs = {x}, .outputs = {a}, .saves = {x}, .params = {0}});
  graph.op({.inputs = {a}, .outputs = {b}, .saves = {a}});
  graph.op({.inputs = {b}, .outputs = {loss}, .saves = {b}});
  if (checkpoint) graph.checkpoint(1, 2);
  graph.set_output(loss);
  graph.finalize({true});
  return graph;
}

std::vector<std::pair<char, std::uint64_t>> events(const Trace& trace) {
  std::vector<std::pair<char, std::uint64_t>> result;
  for (const TraceEvent& event : trace.events) {
    result.emplace_back(event.kind == TraceEventKind::alloc ? 'a' : 'f', event.size);
  }
  return result;
}

TEST(WorkloadGraph, ForwardKeepsSavedTensorsBackwardFreesThemInReverse) {
  Emitter emitter("chain", {StreamId{0}});
  CountingHooks hooks;
  MicroBatch run(chain(false), emitter, hooks);
  run.forward();
  run.backward(emitter.alloc(4));
  EXPECT_TRUE(run.finish());
  const Result<Trace> trace = std::move(emitter).finish("steps");
  ASSERT_TRUE(trace.ok());
  EXPECT_TRUE(validate(*trace).ok());
  const std::vector<std::pair<char, std::uint64_t>> expected = {
      {'a', 100}, {'a', 1000}, {'a', 2000}, {'a', 4},  // forward: everything saved, the loss held
      {'a', 4},                                         // the loss's gradient
      {'a', 2000}, {'f', 2000}, {'f', 4},               // op 2: grad b, free saved b, free grad loss
      {'a', 1000}, {'f', 1000}, {'f', 2000},            // op 1
      {'f', 100}, {'f', 1000},                          // op 0: x needs no gradient; weight gradient reported
      {'f', 4}};                                        // the loss
  EXPECT_EQ(events(*trace), expected);
  EXPECT_EQ(hooks.grads, 1);
}

TEST(WorkloadGraph, CheckpointedOpsSaveNothingAndRunAgainInBackward) {
  Emitter emitter("checkpointed", {StreamId{0}});
  CountingHooks hooks;
  MicroBatch run(chain(true), emitter, hooks);
  run.forward();
  run.backward(emitter.alloc(4));
  EXPECT_TRUE(run.finish());
  const Result<Trace> trace = std::move(emitter).finish("steps");
  ASSERT_TRUE(trace.ok());
  EXPECT_TRUE(validate(*trace).ok());
  const std::vector<std::pair<char, std::uint64_t>> expected = {
      {'a', 100}, {'a', 1000}, {'a', 2000}, {'a', 4}, {'f', 2000},  // b is not saved: freed after op 2
      {'a', 4},
      {'a', 2000}, {'a', 4}, {'f', 4},  // recompute b and the loss (which nobody keeps)
      {'a', 2000}, {'f', 2000}, {'f', 4},
      {'a', 1000}, {'f', 2000},         // op 1: its saved a stays with the checkpoint until here
      {'f', 1000},                      // the checkpoint lets go of its input a
      {'f', 100}, {'f', 1000},
      {'f', 4}};
  EXPECT_EQ(events(*trace), expected);
}

TEST(WorkloadGraph, AdditionsPassGradientsThrough) {
  Graph graph;
  const int x = graph.input(10, true, true);
  const int y = graph.tensor(10);
  const int sum = graph.tensor(10);
  graph.op({.inputs = {x}, .outputs = {y}, .saves = {x}});
  graph.op({.inputs = {y, x}, .outputs = {sum}, .aliased_inputs = {y, x}});
  graph.set_output(sum);
  graph.finalize({});
  Emitter emitter("add", {StreamId{0}});
  CountingHooks hooks;
  MicroBatch run(std::move(graph), emitter, hooks);
  run.forward();
  run.backward(emitter.alloc(10));
  const Handle grad = run.take_input_grad(x);
  EXPECT_NE(grad, no_block);
  emitter.free(grad);
  EXPECT_TRUE(run.finish());
  const Result<Trace> trace = std::move(emitter).finish("steps");
  ASSERT_TRUE(trace.ok());
  EXPECT_TRUE(validate(*trace).ok());
  EXPECT_EQ(summarize(*trace).live_bytes_at_end, 0u);
  // x's gradient is the output's, passed through; op 0 adds its contribution through a temporary.
  std::size_t allocs = 0;
  for (const TraceEvent& event : trace->events) allocs += event.kind == TraceEventKind::alloc ? 1 : 0;
  EXPECT_EQ(allocs, 5u);  // x, y, sum, the seed, the contribution
}

TEST(WorkloadEmitter, StopsAtItsLimitWithAnErrorNamingWhatToLower) {
  Emitter emitter("big", {StreamId{0}}, 10);
  for (int i = 0; i < 20; ++i) emitter.free(emitter.alloc(1));
  EXPECT_TRUE(emitter.full());
  const Result<Trace> trace = std::move(emitter).finish("steps");
  ASSERT_FALSE(trace.ok());
  EXPECT_EQ(trace.error().code, Errc::invalid_argument);
  EXPECT_NE(trace.error().message.find("exceed 10 events; lower steps"), std::string::npos) << trace.error().message;
}

TEST(WorkloadEmitter, ZeroBytesAreNotAllocations) {
  Emitter emitter("empty", {StreamId{0}});
  EXPECT_EQ(emitter.alloc(0), no_block);
  emitter.free(no_block);
  const Result<Trace> trace = std::move(emitter).finish("steps");
  ASSERT_TRUE(trace.ok());
  EXPECT_TRUE(trace->events.empty());
}

}  // namespace
}  // namespace tessera::workload
