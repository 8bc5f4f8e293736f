// Tessera's vocabulary. Read this first.
//
// Glossary (the same words as docs/design in the project and PyTorch's allocator where they overlap):
//
//   granule      the driver's allocation granularity (2 MiB on current NVIDIA GPUs and on Ascend); every
//                page size, reservation size and mapping address is a multiple of it.
//   page         one physical allocation of the driver (cuMemCreate, aclrtMallocPhysical, a range of the
//                host driver's memfd). Tessera's unit of physical memory: a whole number of granules.
//   reservation  a range of virtual addresses reserved once (cuMemAddressReserve, aclrtReserveMemAddress).
//   mapping      one page mapped at one virtual address. Unmapped whole, never in part.
//   block        a contiguous virtual range handed to the caller, or free in the cache.
//   segment      a contiguous virtual range inside a reservation from which blocks are split.
//   pool         the free blocks one request may be served from (small or large, per stream).
//   allocated    bytes of live blocks as requested by the caller.
//   reserved     physical bytes held from the device: mapped pages plus pages pooled unmapped for reuse.
//   stitching    mapping pages freed in several places into one new contiguous virtual block.
//   driver       the VMM primitives of one backend: cuda, ascend, host, sim (include/tessera/driver.hpp).
#pragma once

#include <cstddef>
#include <cstdint>

namespace tessera {

using Bytes = std::size_t;

inline constexpr Bytes KiB = Bytes{1} << 10;
inline constexpr Bytes MiB = Bytes{1} << 20;
inline constexpr Bytes GiB = Bytes{1} << 30;

// A device virtual address. On the host driver it is also a host pointer.
using Address = std::uint64_t;

// Opaque handles issued by a driver. Strong types so that a page can never be passed where an event is
// expected.
enum class PageId : std::uint64_t {};
enum class EventId : std::uint64_t {};

// A stream as the platform names it: the value of a cudaStream_t or aclrtStream, or any number on the host
// and sim drivers. StreamId{0} is the default stream.
enum class StreamId : std::uintptr_t {};

inline constexpr StreamId default_stream{0};

// The pools of an allocator (per stream): requests of at most AllocatorConfig::small_max bytes, and the others.
enum class MemoryPool : std::uint8_t { small, large };

constexpr bool is_power_of_two(Bytes value) noexcept { return value != 0 && (value & (value - 1)) == 0; }

// Round up to a multiple of a power-of-two alignment.
constexpr Bytes align_up(Bytes value, Bytes alignment) noexcept {
  return (value + alignment - 1) & ~(alignment - 1);
}

constexpr bool is_aligned(Bytes value, Bytes alignment) noexcept { return (value & (alignment - 1)) == 0; }

}  // namespace tessera
