// Pause + resume with backup against the copy it cannot avoid: on the host driver (a memfd is the device),
// a tag holding BYTES in blocks of 64 MiB is paused with backup and resumed, against a plain memcpy of the
// same bytes to a host buffer and back, measured in the same run: into host buffers allocated each time (as a
// backup's are with the backup cache off), and into buffers made ready once (as a backup's are when the cache
// kept them from the last pause). The bar: at most 1.5 x the memcpy. And the floor under any host driver:
// the system calls a pause and resume of those bytes cannot do without, on a bare memfd, with no allocator.
//
//   build/bench/tessera_pause_bench --benchmark_min_time=1 --benchmark_repetitions=3
#include <benchmark/benchmark.h>

#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include "tessera/allocator.hpp"
#include "tessera/drivers.hpp"
#include "tessera/tags.hpp"

namespace {

using namespace tessera;

constexpr Bytes block_size = 64 * MiB;

void check(bool ok, benchmark::State& state, const char* what) {
  if (!ok) state.SkipWithError(what);
}

// A tag paused and resumed step after step: the first cycle (untimed) allocates the host buffers, the next ones
// reuse them (backup_cache, on by default). With the cache off every pause allocates them again.
void pause_and_resume(benchmark::State& state, bool backup_cache) {
  const auto bytes = static_cast<Bytes>(state.range(0));
  auto driver = make_host_driver({.capacity = bytes + 256 * MiB, .granularity = 2 * MiB});
  if (!driver) return state.SkipWithError("no host driver");
  AllocatorConfig config;
  config.backup_cache = backup_cache;
  auto allocator = make_tessera_allocator(**driver, config);
  if (!allocator) return state.SkipWithError("no allocator");
  std::vector<Address> blocks;
  {
    TagScope weights("weights");
    for (Bytes held = 0; held < bytes; held += block_size) {
      auto block = (*allocator)->allocate(block_size, default_stream);
      if (!block) return state.SkipWithError("allocate failed");
      std::memset(reinterpret_cast<void*>(*block), static_cast<int>(blocks.size() + 1), block_size);  // host pointers
      blocks.push_back(*block);
    }
  }
  check((*allocator)->pause("weights", true).ok() && (*allocator)->resume("weights").ok(), state, "first cycle failed");
  double tp = 0, tr = 0;
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    check((*allocator)->pause("weights", true).ok(), state, "pause failed");
    auto t1 = std::chrono::steady_clock::now();
    check((*allocator)->resume("weights").ok(), state, "resume failed");
    auto t2 = std::chrono::steady_clock::now();
    tp += std::chrono::duration<double, std::milli>(t1 - t0).count();
    tr += std::chrono::duration<double, std::milli>(t2 - t1).count();
  }
  state.counters["pause_ms"] = tp / static_cast<double>(state.iterations());
  state.counters["resume_ms"] = tr / static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes * 2));
  for (Address block : blocks) (void)(*allocator)->deallocate(block);
}

void PauseResumeWithBackup(benchmark::State& state) { pause_and_resume(state, true); }
void PauseResumeWithBackupCacheOff(benchmark::State& state) { pause_and_resume(state, false); }

// The same bytes, the same blocks: memcpy to a host buffer and back, buffers allocated each time as the
// backup's are (so that the page faults of fresh host memory are paid on both sides).
void MemcpyThereAndBack(benchmark::State& state) {
  const auto bytes = static_cast<Bytes>(state.range(0));
  std::vector<std::unique_ptr<char[]>> device;
  for (Bytes held = 0; held < bytes; held += block_size) {
    device.emplace_back(new char[block_size]);
    std::memset(device.back().get(), static_cast<int>(device.size()), block_size);
  }
  for (auto _ : state) {
    std::vector<std::unique_ptr<char[]>> host;
    for (auto& block : device) {
      host.emplace_back(new char[block_size]);
      std::memcpy(host.back().get(), block.get(), block_size);
    }
    for (std::size_t i = 0; i < device.size(); ++i) std::memcpy(device[i].get(), host[i].get(), block_size);
    benchmark::DoNotOptimize(device.front().get());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes * 2));
}

// The strictest line: the host buffers allocated and touched once, before the loop — only the two copies.
void MemcpyThereAndBackIntoReadyBuffers(benchmark::State& state) {
  const auto bytes = static_cast<Bytes>(state.range(0));
  std::vector<std::unique_ptr<char[]>> device;
  std::vector<std::unique_ptr<char[]>> host;
  for (Bytes held = 0; held < bytes; held += block_size) {
    device.emplace_back(new char[block_size]);
    host.emplace_back(new char[block_size]);
    std::memset(device.back().get(), static_cast<int>(device.size()), block_size);
    std::memset(host.back().get(), 0, block_size);
  }
  for (auto _ : state) {
    for (std::size_t i = 0; i < device.size(); ++i) std::memcpy(host[i].get(), device[i].get(), block_size);
    for (std::size_t i = 0; i < device.size(); ++i) std::memcpy(device[i].get(), host[i].get(), block_size);
    benchmark::DoNotOptimize(device.front().get());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes * 2));
}

// The floor of what pause and resume must do on this kernel, with no allocator and no bookkeeping: copy the
// bytes out of the memfd into ready host buffers (anonymous memory asking for transparent huge pages, as the
// host driver's are), unmap them and free the memfd's blocks (so that the "device" memory falls, as a pause
// must), then map the range again and copy the bytes back, which makes new blocks. The copies use
// pread/pwrite, the fastest way here: a memcpy through a mapping made since the last pause pays a fault for
// every 4 KiB page (this kernel gives a memfd no huge pages), and on this VM a fault costs about 10 us —
// 2.5 s a GiB.
void KernelFloorOfPauseAndResume(benchmark::State& state) {
  const auto bytes = static_cast<Bytes>(state.range(0));
  const int fd = memfd_create("tessera-bench-floor", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) return state.SkipWithError("no memfd");
  void* device = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  auto* host = static_cast<char*>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (device == MAP_FAILED || host == MAP_FAILED) return state.SkipWithError("mmap failed");
  (void)madvise(host, bytes, MADV_HUGEPAGE);
  std::memset(host, 1, bytes);
  const auto copy = [&](auto call, const char* what) {
    for (Bytes at = 0; at < bytes; at += block_size) {
      check(call(fd, host + at, block_size, static_cast<off_t>(at)) == static_cast<ssize_t>(block_size), state, what);
    }
  };
  copy(pwrite, "pwrite failed");
  for (auto _ : state) {
    copy(pread, "pread failed");
    check(munmap(device, bytes) == 0, state, "munmap failed");
    check(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, static_cast<off_t>(bytes)) == 0, state,
          "punch failed");
    device = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (device == MAP_FAILED) return state.SkipWithError("mmap failed");
    copy(pwrite, "pwrite failed");
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes * 2));
  munmap(device, bytes);
  munmap(host, bytes);
  close(fd);
}

BENCHMARK(PauseResumeWithBackup)->Arg(1 << 30)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(PauseResumeWithBackupCacheOff)->Arg(1 << 30)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(MemcpyThereAndBack)->Arg(1 << 30)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(MemcpyThereAndBackIntoReadyBuffers)->Arg(1 << 30)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(KernelFloorOfPauseAndResume)->Arg(1 << 30)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
