// `tessera demo --stitching`: what the VMM drivers make possible, on the host driver (real memory) or the sim driver.
// Four blocks are mapped and filled; the second and the fourth are freed; their pages, scattered in the
// address space, are stitched into one new contiguous block without creating a byte of physical memory or
// copying one; the live blocks keep their data. Then every call is listed with its count and time.
#include "demo.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <stdexcept>
#include <vector>

#include "tessera/driver_decorators.hpp"
#include "tessera/drivers.hpp"

namespace tessera::cli {

namespace {

template <class T>
T must(Result<T> result) {
  if (!result) throw std::runtime_error(describe(result.error()));
  return std::move(result).value();
}

void must(Result<void> result) {
  if (!result) throw std::runtime_error(describe(result.error()));
}

std::vector<unsigned char> pattern(Bytes size, unsigned char seed) {
  std::vector<unsigned char> bytes(size);
  for (Bytes i = 0; i < size; ++i) bytes[i] = static_cast<unsigned char>(seed + i * 7);
  return bytes;
}

}  // namespace

int run_stitching_demo(const std::string& driver_name) {
  auto made = make_driver(driver_name, {.capacity = 64 * MiB});  // a real device keeps its own size
  if (!made) {
    std::fprintf(stderr, "tessera demo: %s\n", describe(made.error()).c_str());
    return 1;
  }
  CountingDriver driver(std::move(made).value());
  const Bytes granule = driver.granularity();
  const bool data = driver.capabilities().data_access;
  const Bytes block = 2 * granule;

  fmt::print("Tessera demo on the {} driver: granule {} KiB, capacity {} MiB\n\n", driver.name(), granule / KiB,
             driver.capacity() / MiB);

  // Four blocks side by side, each backed by one page of two granules.
  const Address segment = must(driver.reserve(4 * block));
  std::vector<ChunkId> pages;
  for (int i = 0; i < 4; ++i) {
    pages.push_back(must(driver.create_chunk(block)));
    const Address at = segment + static_cast<Address>(i) * block;
    must(driver.map(at, pages.back()));
    must(driver.set_access(at, block));
    if (data) must(driver.write(at, pattern(block, static_cast<unsigned char>(i)).data(), block));
  }
  fmt::print("1. mapped 4 blocks of {} KiB at {:#x}; physical in use: {} KiB\n", block / KiB, segment,
             driver.census().page_bytes / KiB);

  // Blocks 1 and 3 are freed: a classic cache holds two separate holes that no larger request can use.
  must(driver.unmap(segment + block));
  must(driver.unmap(segment + 3 * block));
  fmt::print("2. freed blocks 1 and 3: two holes of {} KiB, not neighbours\n", block / KiB);

  // A request for two blocks' worth: stitch the two freed pages into one new contiguous range.
  const Address stitched = must(driver.reserve(2 * block));
  must(driver.map(stitched, pages[1]));
  must(driver.map(stitched + block, pages[3]));
  must(driver.set_access(stitched, 2 * block));
  fmt::print("3. stitched both pages into one {} KiB block at {:#x}; physical in use still {} KiB\n", 2 * block / KiB,
             stitched, driver.census().page_bytes / KiB);

  bool intact = true;
  if (data) {
    for (int i : {0, 2}) {
      std::vector<unsigned char> back(block);
      must(driver.read(segment + static_cast<Address>(i) * block, back.data(), block));
      intact = intact && back == pattern(block, static_cast<unsigned char>(i));
    }
    std::vector<unsigned char> moved(block);
    must(driver.read(stitched + block, moved.data(), block));
    intact = intact && moved == pattern(block, 3);  // the page moved, its bytes with it, nothing copied
    fmt::print("4. live blocks 0 and 2 {} their bytes; the stitched block shows page 3's bytes without a copy\n",
               intact ? "kept" : "LOST");
  } else {
    fmt::print("4. (the {} driver has no memory to check)\n", driver.name());
  }

  must(driver.unmap(stitched));
  must(driver.unmap(stitched + block));
  must(driver.unmap(segment));
  must(driver.unmap(segment + 2 * block));
  for (ChunkId page : pages) must(driver.release_chunk(page));
  must(driver.release_reservation(segment));
  must(driver.release_reservation(stitched));

  fmt::print("\n{:<22}{:>8}{:>14}\n", "driver call", "calls", "wall us/call");
  const CallTally& tally = driver.tally();
  for (std::size_t kind = 0; kind < driver_call_count; ++kind) {
    if (tally.calls[kind] == 0) continue;
    fmt::print("{:<22}{:>8}{:>14.2f}\n", to_string(static_cast<DriverCall>(kind)), tally.calls[kind],
               static_cast<double>(tally.nanoseconds[kind]) / 1000.0 / static_cast<double>(tally.calls[kind]));
  }
  const bool empty = driver.census() == DriverCensus{};
  fmt::print("\nafter cleanup the driver holds {}\n", empty ? "nothing" : "SOMETHING (a leak)");
  return intact && empty ? 0 : 1;
}

}  // namespace tessera::cli
