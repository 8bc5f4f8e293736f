// Tessera's vocabulary. Read this first: the code's names follow it.
//
// Glossary (PyTorch's words where they overlap):
//
// Physical memory
//   granule      the driver's allocation granularity (2 MiB on current NVIDIA GPUs and on Ascend); every
//                chunk, page, reservation and mapping address is a whole number of granules.
//   chunk        one physical allocation of the driver (Driver::create_chunk, ChunkId): cuMemCreate,
//                aclrtMallocPhysical, a range of the host driver's memfd. PyTorch's num_device_alloc counts
//                them (its cudaMalloc calls). Reports name the call create_page, as they always have.
//   page         what one mapping maps: a run of granules of one chunk, at an offset into it — the whole
//                chunk where the driver cannot map parts of one. The core's unit of mapping, reclaim and
//                reuse. A chunk goes back to the device only when all of its pages are idle.
//   page pool    the pages held from the device but mapped nowhere, ready for reuse (PagePool); such a page
//                is pooled.
//
// Virtual memory
//   reservation  a range of virtual addresses reserved once (cuMemAddressReserve, aclrtReserveMemAddress).
//   region       one reservation of an arena, sized for the whole device, tiled by blocks.
//   slot         one granule-sized place of a region; the page table says which page is mapped at each.
//   mapping      one page mapped at one virtual address. Unmapped whole, never in part.
//   arena        the regions of one (stream, size pool, tag, private pool), their blocks and their page tables.
//   frontier     a region's untouched end, where its arena grows: its last block where the arena grows up,
//                its first where it grows down.
//
// Blocks
//   block        a contiguous virtual range handed to the caller (live), freed and waiting for events
//                (pending), or free in the cache.
//   segment      PyTorch's word for a region, in snapshots and statistics.
//   size pool    small or large (SizePool): requests up to small_max and the others, served from arenas of
//                their own. PyTorch's small_pool and large_pool.
//   idle page    a mapped page wholly inside a free block: it can be taken back without touching live data.
//   sliver       the free bytes at the edge of a mapped slot that a live block half uses.
//   lent block   a block that holds a sliver's bytes at home while a shared block maps the same granule.
//   shared block a block built over slivers, in a virtual range of its own, on the out-of-memory ladder.
//   stitching    mapping pages taken from several idle places into one new contiguous block.
//   tag          the part of a job a block belongs to ("weights", "kv_cache"; "default" when none is open):
//                the unit of pause and resume (tessera/tags.hpp).
//   private pool memory that only allocations into it reuse (PoolId, PyTorch's MempoolId_t): a CUDA graph's
//                (a graph pool, which keeps every page until released) or tessera.use_pool's (a plain pool).
//                The blocks outside every private pool are the shared cache.
//   paused       a tag whose pages were given back while its blocks keep their addresses; a paused block's
//                bytes are in a host backup or gone until the tag is resumed.
//   backup       the host copy of a paused live block.
//   exported block a live block whose chunks another process may map (TesseraAllocator::export_block); at its
//                free its pages are retired: held, mapped nowhere and never handed out again, until their
//                chunk goes back to the device.
//   imported block another process's exported block, mapped at a range of this process's own (import_block).
//
// Figures
//   allocated    bytes of live blocks as requested by the caller (rounded: allocated_bytes).
//   reserved     physical bytes held from the device: mapped pages plus pooled pages.
//
// Parts
//   driver       the VMM primitives of one backend: cuda, ascend, host, sim (include/tessera/driver.hpp).
//   facade       the allocator's class (src/core/tessera_allocator.hpp): the lock, the fast path and the
//                out-of-memory ladder over components that own their state (docs/architecture.md).
//   mapper       the one part of the allocator's core that calls the driver (src/core/mapper.hpp).
//   placement    where in its arena a block goes: best or good fit, carving and merging (src/core/placement.hpp).
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>

namespace tessera {

using Bytes = std::size_t;

inline constexpr Bytes KiB = Bytes{1} << 10;
inline constexpr Bytes MiB = Bytes{1} << 20;
inline constexpr Bytes GiB = Bytes{1} << 30;

// A device virtual address. On the host driver it is also a host pointer.
using Address = std::uint64_t;

// Opaque handles issued by a driver. Strong types, so that a chunk can never be passed where an event is
// expected.
enum class ChunkId : std::uint64_t {};
enum class EventId : std::uint64_t {};

// A stream as the platform names it: the value of a cudaStream_t or aclrtStream, or any number on the host
// and sim drivers. StreamId{0} is the default stream.
enum class StreamId : std::uintptr_t {};

// A private pool's name: PyTorch's MempoolId_t (the pair a CUDA graph or a torch.cuda.MemPool is given).
// {0, 0} names no pool: PyTorch never gives it.
struct PoolId {
  std::uint64_t first = 0;
  std::uint64_t second = 0;
  friend auto operator<=>(const PoolId&, const PoolId&) = default;
};

// What a private pool keeps from the shared cache (DeviceAllocator::begin_allocate_to_pool).
enum class PoolKind : std::uint8_t {
  graph,  // a CUDA graph's: the graph replays into every address it allocated, freed blocks' too
  plain,  // tessera.use_pool's: only the live blocks' bytes matter, as in the shared cache
};

inline constexpr StreamId default_stream{0};

// The size pools: requests of at most AllocatorConfig::small_max bytes, and the others.
enum class SizePool : std::uint8_t { small, large };

constexpr bool is_power_of_two(Bytes value) noexcept { return value != 0 && (value & (value - 1)) == 0; }

// Round up to a multiple of a power-of-two alignment.
constexpr Bytes align_up(Bytes value, Bytes alignment) noexcept {
  return (value + alignment - 1) & ~(alignment - 1);
}

constexpr bool is_aligned(Bytes value, Bytes alignment) noexcept { return (value & (alignment - 1)) == 0; }

}  // namespace tessera
