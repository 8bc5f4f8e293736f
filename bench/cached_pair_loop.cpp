// A fixed number of cached allocate+free pairs, for counting instructions: a timed benchmark on a shared
// machine moves by several nanoseconds from one run to the next, an instruction count does not.
//
//   valgrind --tool=callgrind --toggle-collect='run_pairs*' build/bench/tessera_cached_pair_loop tessera 512 200000
//
// counts the instructions of the loop only (callgrind's total over 200000 is the cost of one pair). The
// set-up is the allocator benchmark's (allocator_bench.cpp): 16 live neighbours of the same size, then one
// pair to warm the cache, on the sim driver.
#include <charconv>
#include <cstdio>
#include <string_view>
#include <vector>

#include "tessera/drivers.hpp"
#include "tessera/replay.hpp"

namespace {

using namespace tessera;

__attribute__((noinline)) void run_pairs(DeviceAllocator& allocator, Bytes size, std::uint64_t pairs) {
  for (std::uint64_t i = 0; i < pairs; ++i) {
    auto block = allocator.allocate(size, default_stream);
    asm volatile("" : : "r"(&block) : "memory");  // the block is used
    (void)allocator.deallocate(*block);
  }
}

bool parse(std::string_view text, std::uint64_t& value) {
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  return error == std::errc{} && end == text.data() + text.size() && value > 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t size = 0;
  std::uint64_t pairs = 0;
  if (argc != 4 || !parse(argv[2], size) || !parse(argv[3], pairs)) {
    std::fprintf(stderr, "usage: %s ALLOCATOR SIZE_BYTES PAIRS  (both numbers positive)\n", argv[0]);
    return 2;
  }
  auto sim = make_sim_driver();
  if (!sim) {
    std::fprintf(stderr, "%s\n", describe(sim.error()).c_str());
    return 1;
  }
  auto allocator = make_replay_allocator(argv[1], *sim->driver);
  if (!allocator) {
    std::fprintf(stderr, "%s\n", describe(allocator.error()).c_str());
    return 1;
  }
  std::vector<Address> neighbours;
  for (int i = 0; i < 17; ++i) {
    auto block = (*allocator)->allocate(size, default_stream);
    if (!block) {
      std::fprintf(stderr, "%s\n", describe(block.error()).c_str());
      return 1;
    }
    neighbours.push_back(*block);
  }
  (void)(*allocator)->deallocate(neighbours.back());  // the warm pair's free
  neighbours.pop_back();
  run_pairs(**allocator, size, pairs);
  for (Address block : neighbours) (void)(*allocator)->deallocate(block);
  std::printf("%llu pairs of %llu bytes on %s\n", static_cast<unsigned long long>(pairs),
              static_cast<unsigned long long>(size), argv[1]);
  return 0;
}
