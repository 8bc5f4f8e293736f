// A cached allocate+free pair by size class: the allocator's fast path, on the sim driver (no memory
// touched), each allocator in the same binary. Run: build/bench/tessera_allocator_bench
#include <benchmark/benchmark.h>

#include <mutex>
#include <stdexcept>
#include <string>

#include "tessera/drivers.hpp"
#include "tessera/replay.hpp"

namespace {

using namespace tessera;

// A model behind the lock the real allocator takes: PyTorch's DeviceCachingAllocator holds a
// std::recursive_mutex in malloc and in free. The models themselves are single-threaded and take none; this
// row shows what the lock alone costs them, next to Tessera, which takes its own.
class Locked final : public DeviceAllocator {
 public:
  explicit Locked(std::unique_ptr<DeviceAllocator> inner) : inner_(std::move(inner)) {}
  std::string_view name() const noexcept override { return inner_->name(); }
  Result<void> empty_cache() override { return inner_->empty_cache(); }
  AllocatorStats stats() const override { return inner_->stats(); }

 protected:
  Result<Address> do_allocate(Bytes size, StreamId stream) override {
    std::lock_guard lock(mutex_);
    return inner_->allocate(size, stream);
  }
  Result<void> do_deallocate(Address block) override {
    std::lock_guard lock(mutex_);
    return inner_->deallocate(block);
  }
  Result<void> do_record_stream(Address block, StreamId stream) override { return inner_->record_stream(block, stream); }

 private:
  std::recursive_mutex mutex_;
  std::unique_ptr<DeviceAllocator> inner_;
};

void CachedPair(benchmark::State& state, std::string allocator_name) {
  auto sim = make_sim_driver();
  if (!sim) throw std::runtime_error(describe(sim.error()));
  const bool locked = allocator_name.ends_with("+lock");
  if (locked) allocator_name.resize(allocator_name.size() - 5);
  auto allocator = make_replay_allocator(allocator_name, *sim->driver);
  if (!allocator) throw std::runtime_error(describe(allocator.error()));
  if (locked) *allocator = std::make_unique<Locked>(std::move(*allocator));
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
  std::vector<std::string> names;
  for (std::string_view name : replay_allocator_names()) {
    if (!is_reference_line(name)) names.emplace_back(name);
  }
  names.emplace_back("pytorch+lock");
  for (const std::string& name : names) {
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
