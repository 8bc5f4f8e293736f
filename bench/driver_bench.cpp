// Per-call latency of the drivers. Each iteration runs one whole cycle — reserve, create, map, set access,
// (touch), unmap, release page, release reservation — so the driver ends as it began, and reports through
// manual time only the call the benchmark is named after.
// Run: build/bench/tessera_driver_bench  (results and the exact command in docs/benchmarks.md)
#include <benchmark/benchmark.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "tessera/drivers.hpp"

namespace {

using namespace tessera;
using Clock = std::chrono::steady_clock;

// The host driver behaves like CUDA (set_access is part of the cycle) over 4 GiB; the sim driver keeps its
// default size.
std::unique_ptr<Driver> make(std::string_view name) {
  const std::optional<Bytes> capacity = name == "host" ? std::optional<Bytes>(4 * GiB) : std::nullopt;
  auto driver = make_driver(name, {.capacity = capacity, .require_set_access = true});
  if (!driver) throw std::runtime_error(describe(driver.error()));
  return std::move(driver).value();
}

template <class T>
T must(Result<T> result) {
  if (!result) throw std::runtime_error(describe(result.error()));
  return std::move(result).value();
}

void must(Result<void> result) {
  if (!result) throw std::runtime_error(describe(result.error()));
}

// Which call of the cycle is timed. `unmap_touched` unmaps a page whose every 4 KiB was written through
// the mapping, as a live block's page would be; `touch` is that first write itself.
enum class Timed { reserve, create_chunk, map, set_access, touch, unmap, unmap_touched, release_chunk, release_reservation };

void Cycle(benchmark::State& state, std::string_view driver_name, Timed timed) {
  auto driver = make(driver_name);
  const auto size = static_cast<Bytes>(state.range(0)) * MiB;
  const bool touch = timed == Timed::touch || timed == Timed::unmap_touched;
  if (touch && !driver->capabilities().host_pointers) {
    state.SkipWithError("touching needs host pointers");
    return;
  }
  for (auto _ : state) {
    Clock::duration took{};
    auto time = [&](Timed which, auto&& call) {
      if (which != timed) return call();
      const auto start = Clock::now();
      auto result = call();
      took = Clock::now() - start;
      return result;
    };
    const Address base = must(time(Timed::reserve, [&] { return driver->reserve(size); }));
    const ChunkId page = must(time(Timed::create_chunk, [&] { return driver->create_chunk(size); }));
    must(time(Timed::map, [&] { return driver->map(base, page); }));
    must(time(Timed::set_access, [&] { return driver->set_access(base, size); }));
    if (touch) {
      const auto start = Clock::now();
      auto* bytes = reinterpret_cast<volatile unsigned char*>(static_cast<std::uintptr_t>(base));
      for (Bytes offset = 0; offset < size; offset += 4096) bytes[offset] = 1;
      if (timed == Timed::touch) took = Clock::now() - start;
    }
    must(time(touch ? Timed::unmap_touched : Timed::unmap, [&] { return driver->unmap(base); }));
    must(time(Timed::release_chunk, [&] { return driver->release_chunk(page); }));
    must(time(Timed::release_reservation, [&] { return driver->release_reservation(base); }));
    state.SetIterationTime(std::chrono::duration<double>(took).count());
  }
}

std::size_t process_mappings() {
  std::ifstream maps("/proc/self/maps");
  std::size_t lines = 0;
  for (std::string line; std::getline(maps, line);) ++lines;
  return lines;
}

// The host driver's map as the process nears its mapping limit: maps that cannot merge (every other slot,
// pages in reverse order, two kernel entries each) under a limit `room` entries above the process's count;
// the first `skip` maps run untimed, then each iteration times one map. Far from the limit and in its last
// 10% the time per map should be the same.
void MapTowardsTheLimit(benchmark::State& state, std::size_t skip) {
  constexpr Bytes granule = 64 * KiB;
  constexpr std::size_t room = 40000;
  constexpr std::size_t slots = room / 2;
  auto driver = must(make_host_driver(
      {.capacity = 2 * slots * granule, .granularity = granule, .max_map_count = process_mappings() + room}));
  const Address base = must(driver->reserve(2 * slots * granule));
  std::vector<ChunkId> pages;
  for (std::size_t i = 0; i < slots; ++i) pages.push_back(must(driver->create_chunk(granule)));
  std::size_t next = 0;
  auto map_next = [&] {
    must(driver->map(base + 2 * next * granule, pages[slots - 1 - next]));
    ++next;
  };
  while (next < skip) map_next();
  for (auto _ : state) {
    const auto start = Clock::now();
    map_next();
    state.SetIterationTime(std::chrono::duration<double>(Clock::now() - start).count());
  }
  state.counters["kernel_mappings"] = static_cast<double>(process_mappings());
  for (std::size_t i = 0; i < next; ++i) must(driver->unmap(base + 2 * i * granule));
  for (ChunkId page : pages) must(driver->release_chunk(page));
  must(driver->release_reservation(base));
}

// fork() with `MiB` of the host driver's memory written: the parent's fork() call, which copies the memory
// for the child before it returns (the child exits at once, untimed).
void ForkWithMemory(benchmark::State& state) {
  const auto size = static_cast<Bytes>(state.range(0)) * MiB;
  auto driver = must(make_host_driver({.capacity = 2 * GiB}));
  Address base = 0;
  ChunkId page{};
  if (size > 0) {
    base = must(driver->reserve(size));
    page = must(driver->create_chunk(size));
    must(driver->map(base, page));
    std::memset(reinterpret_cast<void*>(static_cast<std::uintptr_t>(base)), 0x5a, size);
  }
  for (auto _ : state) {
    const auto start = Clock::now();
    const pid_t child = fork();
    if (child == 0) _exit(0);
    const auto took = Clock::now() - start;
    if (child < 0) throw std::runtime_error("fork failed");
    waitpid(child, nullptr, 0);
    state.SetIterationTime(std::chrono::duration<double>(took).count());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(size));
  if (size > 0) {
    must(driver->unmap(base));
    must(driver->release_chunk(page));
    must(driver->release_reservation(base));
  }
}

void Register() {
  benchmark::RegisterBenchmark("host/map_far_from_the_limit", MapTowardsTheLimit, std::size_t{0})
      ->Iterations(2000)
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("host/map_in_the_last_10%_before_the_limit", MapTowardsTheLimit, std::size_t{18000})
      ->Iterations(1990)
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("host/fork", ForkWithMemory)
      ->Arg(0)
      ->Arg(64)
      ->Arg(512)
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond);

  const std::pair<const char*, Timed> calls[] = {
      {"reserve", Timed::reserve},           {"create_chunk", Timed::create_chunk},
      {"map", Timed::map},                   {"set_access", Timed::set_access},
      {"first_touch", Timed::touch},         {"unmap", Timed::unmap},
      {"unmap_touched", Timed::unmap_touched}, {"release_chunk", Timed::release_chunk},
      {"release_reservation", Timed::release_reservation},
  };
  for (const char* driver : {"host", "sim"}) {
    for (const auto& [name, timed] : calls) {
      if (std::string_view(driver) == "sim" && (timed == Timed::touch || timed == Timed::unmap_touched)) continue;
      benchmark::RegisterBenchmark((std::string(driver) + "/" + name).c_str(), Cycle, std::string_view(driver), timed)
          ->Arg(2)
          ->Arg(20)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
    }
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
