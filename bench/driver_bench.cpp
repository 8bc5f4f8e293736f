// Per-call latency of the drivers, in pairs that leave the driver as they found it:
//   reserve+release, create+release, map+set_access+unmap of a pooled page, first touch of a new page.
// Run: build/bench/tessera_driver_bench  (results and the command in docs/benchmarks.md)
#include <benchmark/benchmark.h>

#include <cstring>
#include <stdexcept>

#include "tessera/drivers.hpp"

namespace {

using namespace tessera;

std::unique_ptr<Driver> make(std::string_view name) {
  if (name == "host") {
    auto host = make_host_driver({.capacity = 4 * GiB});
    if (!host) throw std::runtime_error(describe(host.error()));
    return std::move(host).value();
  }
  auto sim = make_sim_driver();
  if (!sim) throw std::runtime_error(describe(sim.error()));
  return std::move(sim->driver);
}

template <class T>
T must(Result<T> result) {
  if (!result) throw std::runtime_error(describe(result.error()));
  return std::move(result).value();
}

void must(Result<void> result) {
  if (!result) throw std::runtime_error(describe(result.error()));
}

void ReserveRelease(benchmark::State& state, std::string_view driver_name) {
  auto driver = make(driver_name);
  const auto size = static_cast<Bytes>(state.range(0)) * MiB;
  for (auto _ : state) {
    const Address base = must(driver->reserve(size));
    must(driver->release_reservation(base));
  }
}

void CreateRelease(benchmark::State& state, std::string_view driver_name) {
  auto driver = make(driver_name);
  const auto size = static_cast<Bytes>(state.range(0)) * MiB;
  for (auto _ : state) {
    const PageId page = must(driver->create_page(size));
    must(driver->release_page(page));
  }
}

// A pooled page mapped, enabled and unmapped again: the cost of stitching one page into a block.
void MapSetAccessUnmap(benchmark::State& state, std::string_view driver_name) {
  auto driver = make(driver_name);
  const auto size = static_cast<Bytes>(state.range(0)) * MiB;
  const Address base = must(driver->reserve(size));
  const PageId page = must(driver->create_page(size));
  for (auto _ : state) {
    must(driver->map(base, page));
    must(driver->set_access(base, size));
    must(driver->unmap(base));
  }
  must(driver->release_page(page));
  must(driver->release_reservation(base));
}

// A page created on demand, mapped and touched once per 4 KiB: what the kernel charges for first use.
void CreateMapFirstTouch(benchmark::State& state) {
  auto driver = make("host");
  const auto size = static_cast<Bytes>(state.range(0)) * MiB;
  const Address base = must(driver->reserve(size));
  for (auto _ : state) {
    const PageId page = must(driver->create_page(size));
    must(driver->map(base, page));
    auto* bytes = reinterpret_cast<unsigned char*>(static_cast<std::uintptr_t>(base));
    for (Bytes offset = 0; offset < size; offset += 4096) bytes[offset] = 1;
    benchmark::ClobberMemory();
    must(driver->unmap(base));
    must(driver->release_page(page));
  }
  must(driver->release_reservation(base));
}

BENCHMARK_CAPTURE(ReserveRelease, host, "host")->Arg(2)->Arg(20)->Arg(8192);
BENCHMARK_CAPTURE(CreateRelease, host, "host")->Arg(2)->Arg(20);
BENCHMARK_CAPTURE(MapSetAccessUnmap, host, "host")->Arg(2)->Arg(20);
BENCHMARK(CreateMapFirstTouch)->Arg(2)->Arg(20);
BENCHMARK_CAPTURE(ReserveRelease, sim, "sim")->Arg(2);
BENCHMARK_CAPTURE(CreateRelease, sim, "sim")->Arg(2);
BENCHMARK_CAPTURE(MapSetAccessUnmap, sim, "sim")->Arg(2);

}  // namespace

BENCHMARK_MAIN();
