// The fsdp workload: its four streams and record_stream events, the shapes of Llama 2 7B sharded over dp,
// determinism per seed, refusals that name the option, and a replay through Tessera on the host driver in
// which the side streams' work is held, so that any block handed to another stream (or unmapped) before that
// work is proven done is caught. Also pins the training workload's trace, which the reference figures use.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "driver/driver_fixtures.hpp"
#include "support/stream_witness.hpp"
#include "tessera/allocator.hpp"
#include "tessera/drivers.hpp"
#include "tessera/replay.hpp"
#include "tessera/workload.hpp"

namespace tessera {
namespace {

using Settings = std::map<std::string, std::string>;

Trace generate(const std::string& name, const Settings& settings) {
  Result<Trace> trace = generate_workload(name, settings);
  if (!trace.ok()) throw std::runtime_error(trace.error().message);
  const Result<void> valid = validate(*trace);
  if (!valid.ok()) throw std::runtime_error(valid.error().message);
  return std::move(trace).value();
}

const Settings small = {{"layers", "2"}, {"steps", "2"}};

constexpr std::uint32_t compute = 0, all_gather = 1, reduce_scatter = 2, copy = 3;

// Llama 2 7B, one layer: two RMSNorms, QKV, projection, fused gate+up, down; no biases.
constexpr std::uint64_t h = 4096, f = 11008;
const std::vector<std::uint64_t> layer_elements = {h, 3 * h * h, h * h, h, 2 * f * h, f * h};

std::uint64_t shards(const std::vector<std::uint64_t>& elements, std::uint64_t dp) {
  std::uint64_t total = 0;
  for (const std::uint64_t n : elements) total += (n + dp - 1) / dp;
  return total;
}

TEST(FsdpWorkload, FourStreamsWithRecordStreamAcrossThem) {
  const Trace trace = generate("fsdp", small);
  ASSERT_EQ(trace.streams.size(), 4u);
  std::vector<std::uint32_t> stream_of(trace.block_count);
  std::map<std::uint32_t, int> allocs;
  std::map<std::pair<std::uint32_t, std::uint32_t>, int> recorded;  // (alloc stream, recorded stream)
  for (const TraceEvent& event : trace.events) {
    if (event.kind == TraceEventKind::alloc) {
      stream_of[event.block] = event.stream;
      ++allocs[event.stream];
    }
    if (event.kind == TraceEventKind::record_stream) {
      EXPECT_NE(stream_of[event.block], event.stream) << "a block recorded on its own stream";
      ++recorded[{stream_of[event.block], event.stream}];
    }
  }
  for (std::uint32_t stream : {compute, all_gather, reduce_scatter, copy}) EXPECT_GT(allocs[stream], 0) << stream;
  // Gathered parameters are read by compute; gradients by the reduce-scatter; offloaded inputs by the copy
  // stream; staged inputs and reduce-scatter outputs by compute.
  EXPECT_GT((recorded[{all_gather, compute}]), 0);
  EXPECT_GT((recorded[{compute, reduce_scatter}]), 0);
  EXPECT_GT((recorded[{compute, copy}]), 0);
  EXPECT_GT((recorded[{copy, compute}]), 0);
  EXPECT_GT((recorded[{reduce_scatter, compute}]), 0);
}

TEST(FsdpWorkload, ShapesAreLlama2LayersShardedOverDp) {
  const Trace trace = generate("fsdp", small);
  const std::uint64_t dp = 8, layer_shard = shards(layer_elements, dp);
  // Before the first iteration: the fp32 shards of every parameter (2 layers, embedding, final norm, output).
  const std::uint64_t vocab = 32000;
  const std::uint64_t root_shard = shards({vocab * h, h, vocab * h}, dp);
  Bytes setup = 0;
  for (const TraceEvent& event : trace.events) {
    if (event.kind == TraceEventKind::iteration) break;
    setup += event.kind == TraceEventKind::alloc ? event.size : 0;
  }
  EXPECT_EQ(setup, 4 * (2 * layer_shard + root_shard));
  // A layer's all-gather output: bf16, dp shards; its reduce-scatter input: fp32, as large again twice.
  std::map<Bytes, int> gathers, reduce_inputs;
  for (const TraceEvent& event : trace.events) {
    if (event.kind != TraceEventKind::alloc) continue;
    if (event.stream == all_gather) ++gathers[event.size];
    if (event.stream == reduce_scatter) ++reduce_inputs[event.size];
  }
  // Each step: 2 micro-batches, each gathering every layer twice (forward, backward).
  EXPECT_EQ(gathers[2 * dp * layer_shard], 2 * 2 * 2 * 2);
  EXPECT_EQ(reduce_inputs[4 * dp * layer_shard], 2 * 2 * 2);
  EXPECT_EQ(reduce_inputs[4 * layer_shard], 2 * 2 * 2);
}

TEST(FsdpWorkload, DeterministicPerSeed) {
  const Trace a = generate("fsdp", small);
  const Trace b = generate("fsdp", small);
  EXPECT_EQ(a.events, b.events);
  Settings other = small;
  other["seed"] = "2";
  EXPECT_NE(generate("fsdp", other).events, a.events) << "the GEMM workspaces are drawn from the seed";
  other["workspace_mb"] = "0";
  Settings none = small;
  none["workspace_mb"] = "0";
  EXPECT_EQ(generate("fsdp", other).events, generate("fsdp", none).events) << "nothing else is random";
}

TEST(FsdpWorkload, OptionsChangeTheStreams) {
  Settings kept = small;
  kept["offload"] = "false";
  const Trace trace = generate("fsdp", kept);
  for (const TraceEvent& event : trace.events) {
    EXPECT_FALSE(event.kind == TraceEventKind::alloc && event.stream == copy) << "no staging without offload";
  }
  Settings ahead = small;
  ahead["prefetch"] = "2";
  ahead["layers"] = "4";
  EXPECT_GT(summarize(generate("fsdp", ahead)).peak_live_bytes,
            summarize(generate("fsdp", {{"layers", "4"}, {"steps", "2"}})).peak_live_bytes)
      << "a deeper prefetch holds one more gathered layer";
}

TEST(FsdpWorkload, BadOptionsAreNamed) {
  const std::vector<std::pair<Settings, std::string>> bad = {
      {{{"offload", "true"}, {"checkpoint", "false"}}, "offload"},
      {{{"prefetch", "0"}}, "prefetch"},
      {{{"tp", "3"}}, "tp"},
      {{{"reduce_dtype", "fp8"}}, "reduce_dtype"},
      {{{"dp", "0"}}, "dp"},
      {{{"steps", "1000000"}}, "steps"},
  };
  for (const auto& [settings, key] : bad) {
    const Result<Trace> trace = generate_workload("fsdp", settings);
    ASSERT_FALSE(trace.ok()) << key;
    EXPECT_EQ(trace.error().code, Errc::invalid_argument);
    EXPECT_NE(trace.error().message.find(key + "="), std::string::npos) << trace.error().message;
  }
}

// FNV-1a over the events: a change to the training workload's trace (which the reference replay figures are
// measured on) shows here first.
std::uint64_t fingerprint(const Trace& trace) {
  std::uint64_t hash = 1469598103934665603ull;
  const auto add = [&hash](std::uint64_t value) {
    for (int i = 0; i < 8; ++i) hash = (hash ^ ((value >> (8 * i)) & 0xff)) * 1099511628211ull;
  };
  for (const TraceEvent& event : trace.events) {
    add(event.size);
    add(event.block);
    add(event.stream);
    add(static_cast<std::uint64_t>(event.kind));
  }
  return hash;
}

// The values were taken from the trace before the fsdp workload was added (its default trace compared equal,
// byte for byte, with `tessera gen training` built from the commit before).
TEST(FsdpWorkload, TrainingTraceIsUnchanged) {
  const Trace trace = generate("training", {{"layers", "2"}, {"steps", "2"}});
  EXPECT_EQ(trace.events.size(), 2573u);
  EXPECT_EQ(fingerprint(trace), 12062468273429326430ull);
}

// Replays a small instance through Tessera over the host driver with the side streams held: what they read
// (through record_stream, or as the stream a block was made on) stays in use until they are completed, at
// each iteration. No block may be handed to another stream, nor unmapped, while such work is outstanding.
TEST(FsdpWorkload, TesseraRespectsRecordStreamOnReplay) {
  const Trace trace = generate("fsdp", {{"preset", "tiny"}, {"dp", "2"}, {"steps", "3"}, {"workspace_mb", "1"}});
  auto witness_owned = std::make_unique<test_support::StreamWitness>(
      TESSERA_OK(make_host_driver({.capacity = 512 * MiB})));
  test_support::StreamWitness& witness = *witness_owned;
  std::unique_ptr<Driver> driver = std::move(witness_owned);
  auto allocator = TESSERA_OK(make_tessera_allocator(*driver));
  // Stream index k of the trace is StreamId k + 1: none is the default stream, which synchronizes others.
  const auto id = [](std::uint32_t stream) { return StreamId{stream + 1}; };
  const std::vector<std::uint32_t> side = {all_gather, reduce_scatter, copy};
  for (const std::uint32_t stream : side) witness.stream_control()->hold(id(stream));

  std::vector<Address> at(trace.block_count);
  std::vector<Bytes> size(trace.block_count);
  std::size_t cross_stream_records = 0;
  for (const TraceEvent& event : trace.events) {
    switch (event.kind) {
      case TraceEventKind::alloc: {
        at[event.block] = TESSERA_OK(allocator->allocate(event.size, id(event.stream)));
        size[event.block] = event.size;
        const std::optional<std::string> foreign = witness.foreign_use(at[event.block], event.size, id(event.stream));
        ASSERT_EQ(foreign, std::nullopt);
        witness.use(id(event.stream), at[event.block], event.size);
        break;
      }
      case TraceEventKind::record_stream:
        TESSERA_OK(allocator->record_stream(at[event.block], id(event.stream)));
        witness.use(id(event.stream), at[event.block], size[event.block]);
        ++cross_stream_records;
        break;
      case TraceEventKind::free:
        TESSERA_OK(allocator->deallocate(at[event.block]));
        break;
      case TraceEventKind::iteration:
        for (const std::uint32_t stream : side) {
          witness.stream_control()->complete(id(stream));
          witness.stream_control()->hold(id(stream));
        }
        break;
      default:
        break;
    }
    ASSERT_TRUE(witness.violations().empty()) << witness.violations().front();
  }
  EXPECT_GT(cross_stream_records, 0u);
  for (const std::uint32_t stream : side) witness.stream_control()->complete(id(stream));
  TESSERA_OK(allocator->empty_cache());
  EXPECT_TRUE(witness.violations().empty()) << witness.violations().front();
}

// In steady state a record_stream'd free costs Tessera what it costs the pytorch model: an event recorded
// and queried. Its completed events are recorded again, not destroyed and created anew, and no VMM call is
// made after the warm-up (unlimited capacity, the sim driver).
TEST(FsdpWorkload, InSteadyStateTesseraMakesOnlyTheEventCallsThePytorchModelMakes) {
  const Trace trace = generate("fsdp", {{"preset", "tiny"}, {"dp", "2"}, {"steps", "4"}, {"workspace_mb", "1"}});
  ReplayOptions options;
  const ReplayResult tessera = TESSERA_OK(replay(trace, options));
  options.allocator = "pytorch";
  const ReplayResult pytorch = TESSERA_OK(replay(trace, options));
  ASSERT_EQ(tessera.calls_per_iteration.size(), 4u);
  ASSERT_EQ(pytorch.calls_per_iteration.size(), 4u);
  EXPECT_GT(tessera.calls_per_iteration.back(), 0u) << "the side streams' frees record events";
  EXPECT_EQ(tessera.calls_per_iteration.back(), pytorch.calls_per_iteration.back());
  const std::uint64_t recorded = tessera.driver_calls.calls_of(DriverCall::record_event);
  EXPECT_EQ(recorded, pytorch.driver_calls.calls_of(DriverCall::record_event));
  EXPECT_LT(tessera.driver_calls.calls_of(DriverCall::create_event) * 4, recorded) << "events recorded again";
}

}  // namespace
}  // namespace tessera
