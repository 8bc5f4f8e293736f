// The PyTorch path against the C++ one: a cached allocate+free pair through the C ABI that
// CUDAPluggableAllocator calls (tessera_alloc + tessera_free, and tessera_torch_alloc, the function
// tessera.torch.enable installs) beside the same pair on the C++ allocator, both on the sim driver (no
// memory touched), in one run. Run: build/bench/tessera_capi_bench (docs/benchmarks.md).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <stdexcept>
#include <vector>

#include "tessera/allocator.hpp"
#include "tessera/drivers.hpp"
#include "tessera/tessera_c.h"

namespace {

using namespace tessera;

constexpr int neighbour_count = 16;  // live neighbours, so that the pair is not alone in its pool

void CppPair(benchmark::State& state) {
  auto sim = make_sim_driver();
  if (!sim) throw std::runtime_error(describe(sim.error()));
  auto allocator = make_tessera_allocator(*sim->driver);
  if (!allocator) throw std::runtime_error(describe(allocator.error()));
  const auto size = static_cast<Bytes>(state.range(0));
  std::vector<Address> neighbours;
  for (int i = 0; i < neighbour_count; ++i) neighbours.push_back((*allocator)->allocate(size, default_stream).value());
  (void)(*allocator)->deallocate((*allocator)->allocate(size, default_stream).value());
  for (auto _ : state) {
    auto block = (*allocator)->allocate(size, default_stream);
    benchmark::DoNotOptimize(block);
    (void)(*allocator)->deallocate(*block);
  }
  for (Address block : neighbours) (void)(*allocator)->deallocate(block);
}

// The C ABI's allocators live for the process, one per device: each run takes a device of its own (the sim
// driver has 64), so that it starts from a fresh allocator as the C++ run does.
int next_device() {
  static int device = 0;
  return device++ % 64;
}

template <void* (*Allocate)(size_t, int, void*)>
void CPair(benchmark::State& state) {
  const auto size = static_cast<size_t>(state.range(0));
  const int device = next_device();
  std::vector<void*> neighbours;
  for (int i = 0; i < neighbour_count; ++i) neighbours.push_back(Allocate(size, device, nullptr));
  tessera_free(Allocate(size, device, nullptr), size, device, nullptr);
  if (neighbours.back() == nullptr) {
    state.SkipWithError(tessera_last_error());
    return;
  }
  for (auto _ : state) {
    void* block = Allocate(size, device, nullptr);
    benchmark::DoNotOptimize(block);
    tessera_free(block, size, device, nullptr);
  }
  for (void* block : neighbours) tessera_free(block, size, device, nullptr);
}

void sizes(benchmark::internal::Benchmark* benchmark) {
  benchmark->Arg(512)->Arg(1 << 20)->Arg(256 << 20);
}

}  // namespace

BENCHMARK(CppPair)->Apply(sizes);
BENCHMARK(CPair<tessera_alloc>)->Name("CPair/tessera_alloc")->Apply(sizes);
BENCHMARK(CPair<tessera_torch_alloc>)->Name("CPair/tessera_torch_alloc")->Apply(sizes);

int main(int argc, char** argv) {
  // The sim driver for the C ABI too, with the configuration the C++ allocator has (the defaults).
  if (tessera_configure("sim", "") != 0) {
    std::fprintf(stderr, "tessera_capi_bench: %s\n", tessera_last_error());
    return 1;
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
