// Replay throughput: events per second through each allocator on the sim driver, for a whole replay()
// as `tessera replay` runs it. The trace: the generated
// training workload (117k events), so the benchmark needs no shared files.
// Run: build/bench/tessera_replay_bench
#include <benchmark/benchmark.h>

#include <stdexcept>
#include <string>

#include "tessera/replay.hpp"
#include "tessera/workload.hpp"

namespace {

using namespace tessera;

const Trace& training_trace() {
  static const Trace trace = [] {
    auto generated = generate_workload("training");
    if (!generated) throw std::runtime_error(describe(generated.error()));
    return std::move(generated).value();
  }();
  return trace;
}

void Replay(benchmark::State& state, std::string allocator) {
  const Trace& trace = training_trace();
  ReplayOptions options;
  options.allocator = allocator;
  for (auto _ : state) {
    auto result = replay(trace, options);
    if (!result) throw std::runtime_error(describe(result.error()));
    benchmark::DoNotOptimize(result->peak_reserved);
  }
  // Events of the trace per second of a whole replay(), sampling after every event included.
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(trace.events.size()));
}

void Register() {
  for (std::string_view name : replay_allocator_names()) {
    if (is_reference_line(name)) continue;
    benchmark::RegisterBenchmark(("Replay/" + std::string(name)).c_str(), Replay, std::string(name))
        ->Unit(benchmark::kMillisecond)
        ->MinTime(1.0);
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  Register();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
