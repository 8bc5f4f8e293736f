// A cached allocate+free pair by size class: the allocator's fast path, on the sim driver (no memory
// touched), each allocator in the same binary. Run: build/bench/tessera_allocator_bench
#include <benchmark/benchmark.h>

#include <stdexcept>
#include <string>

#include "tessera/drivers.hpp"
#include "tessera/replay.hpp"

namespace {

using namespace tessera;

void CachedPair(benchmark::State& state, std::string allocator_name) {
  auto sim = make_sim_driver();
  if (!sim) throw std::runtime_error(describe(sim.error()));
  auto allocator = make_replay_allocator(allocator_name, *sim->driver);
  if (!allocator) throw std::runtime_error(describe(allocator.error()));
  const auto size = static_cast<Bytes>(state.range(0));
  // Warm the cache with a few live neighbours so the pair is not alone in its pool.
  std::vector<Address> neighbours;
  for (int i = 0; i < 16; ++i) neighbours.push_back((*allocator)->allocate(size, default_stream).value());
  auto warm = (*allocator)->allocate(size, default_stream);
  (void)(*allocator)->deallocate(*warm);
  for (auto _ : state) {
    auto block = (*allocator)->allocate(size, default_stream);
    benchmark::DoNotOptimize(block);
    (void)(*allocator)->deallocate(*block);
  }
  for (Address block : neighbours) (void)(*allocator)->deallocate(block);
}

void Register() {
  for (std::string_view name : replay_allocator_names()) {
    if (name == "ideal") continue;
    benchmark::RegisterBenchmark(("CachedPair/" + std::string(name)).c_str(), CachedPair, std::string(name))
        ->Arg(512)
        ->Arg(64 << 10)
        ->Arg(1 << 20)
        ->Arg(8 << 20)
        ->Arg(256 << 20);
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
