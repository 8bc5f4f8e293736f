// "pytorch": PyTorch's native CUDA caching allocator, without expandable segments.
//
// Whose rules: PyTorch's DeviceCachingAllocator in c10/cuda/CUDACachingAllocator.cpp as of PyTorch 2.5
// (the rules below have been stable from 2.1 to 2.6). Facts only, restated from that file:
//   - a request is rounded to a multiple of 512 B (at least 512 B), or with roundup_power2_divisions to the
//     next power-of-two division; ≤ 1 MiB goes to the small pool, the rest to the large pool;
//   - a miss allocates one segment with cudaMalloc: 2 MiB for the small pool, 20 MiB for requests under
//     10 MiB, else the request rounded up to 2 MiB;
//   - search: best fit by (stream, size, address); a block ≥ max_split_size never serves a request under
//     it, nor one it exceeds by 20 MiB or more;
//   - split: small pool when the remainder is ≥ 512 B; large pool when the request is under max_split_size
//     and the remainder is over 1 MiB; the front is handed out, the remainder stays free;
//   - free: merge with free neighbours of the same segment only; a block with record_stream uses waits for
//     events recorded on those streams, processed at the start of every malloc;
//   - miss ladder: garbage collection (only with a memory fraction and a threshold), cudaMalloc, release
//     enough whole cached segments ≥ max_split_size and retry, synchronize all events and release every
//     whole cached segment and retry once (a "retry"), then out of memory;
//   - a segment is freed (cudaFree) only by that ladder, the GC and empty_cache;
//   - private pools (CUDA graphs, MemPool): while a capture is under way, an allocation on a stream its filter
//     accepts is served from the pool's own small and large block pools and segments, and its freed blocks go
//     back there only; while any capture is under way, events are not processed and the last step of the
//     ladder (synchronize, release every cached segment) is skipped; a pool released by its last user is
//     freed by the next release_cached_blocks (empty_cache or that last step): its cached whole segments
//     first, the pool itself once it holds no segment (CachingCore, docs/baselines.md "Private pools").
// On a driver, cudaMalloc is reserve + create_chunk + map + set_access of the segment, and cudaFree waits for
// the device (as cudaFree does implicitly), unmaps, releases the page and the reservation.
#include <fmt/format.h>

#include "baselines/caching_core.hpp"
#include "baselines/models.hpp"

namespace tessera::baselines {
namespace {

class PyTorchCaching final : public CachingCore {
 public:
  PyTorchCaching(Driver& driver, const BaselineOptions& options) : CachingCore("pytorch", driver, options) {}
  ~PyTorchCaching() override { release_everything(); }

  Result<Address> do_allocate(Bytes size, StreamId stream) override;
  Result<void> empty_cache() override;

 private:
  // cudaMalloc of a segment: a whole free block, in no pool; no_block when the device is out of memory.
  Result<BlockId> alloc_block(BlockPool& pool, StreamId stream, Bytes segment_size, bool is_retry);
  // cudaFree of the segment of a whole free block in the pool.
  void release_block(BlockId id);
  // PyTorch's release_cached_blocks: the shared cache's whole cached segments (not while a capture is under
  // way) and those of the private pools that no capture uses any more.
  void release_cached_blocks();
  bool should_split(const Block& block, Bytes size) const noexcept;
  void release_model_memory() override {}
};

Result<Address> PyTorchCaching::do_allocate(Bytes size, StreamId stream) {
  if (!captures_underway()) process_events();  // event queries would invalidate a capture
  const std::optional<Bytes> rounded_size = round_size(size, options_.roundup_power2_divisions);
  const std::optional<Bytes> segment = rounded_size ? allocation_size(*rounded_size) : std::nullopt;
  if (!segment) return out_of_memory_unroundable(size, stream);
  const Bytes rounded = *rounded_size;
  BlockPool& pool = pool_for(rounded, stream);
  const Bytes segment_size = *segment;

  auto release = [this](BlockId id) { release_block(id); };

  BlockId block = no_block;
  if (get_free_block(pool, stream, rounded, false, block) != Search::found) {
    block = no_block;
    if (gc_enabled()) garbage_collect_cached_blocks(release);
    auto made = alloc_block(pool, stream, segment_size, false);
    if (!made) return std::move(made).error();
    block = *made;
    if (block == no_block && release_available_cached_blocks(pool, stream, rounded, release)) {
      made = alloc_block(pool, stream, segment_size, false);
      if (!made) return std::move(made).error();
      block = *made;
    }
    if (block == no_block && !captures_underway()) {
      release_cached_blocks();
      made = alloc_block(pool, stream, segment_size, true);
      if (!made) return std::move(made).error();
      block = *made;
    }
  }
  if (block == no_block) return out_of_memory(size, rounded, segment_size, stream);
  return alloc_found_block(block, rounded, size, should_split(blocks_[block], rounded));
}

bool PyTorchCaching::should_split(const Block& block, Bytes size) const noexcept {
  const Bytes remaining = block.size - size;
  if (block.pool == PoolKind::small) return remaining >= kMinBlockSize;
  return size < options_.max_split_size && remaining > kSmallSize;
}

Result<BlockId> PyTorchCaching::alloc_block(BlockPool& pool, StreamId stream, Bytes segment_size, bool is_retry) {
  if (is_retry) stats_.num_alloc_retries += 1;
  if (over_fraction(segment_size)) return no_block;
  // cudaMalloc: one page for the whole segment.
  const std::optional<Bytes> page = round_up_checked(segment_size, memory_.granularity());
  if (!page) return no_block;
  auto made = create_segment(segment_size, *page, AccessCalls::whole_range, stream, kind_of(pool), pool.owner);
  if (!made) {
    if (made.error().code == Errc::out_of_memory) return no_block;
    return std::move(made).error();  // PyTorch throws on any other CUDA error
  }
  return make_segment_block(*made);
}

void PyTorchCaching::release_block(BlockId id) {
  if (!release_segment(blocks_[id].segment, true)) return;  // the device could not be waited for: kept
  erase_from_pool(id);
  blocks_.destroy(id);
}

void PyTorchCaching::release_cached_blocks() {
  auto release = [this](BlockId id) { release_block(id); };
  if (!captures_underway()) {
    synchronize_and_free_events();
    release_whole_blocks(large_, release);
    release_whole_blocks(small_, release);
  }
  release_freeable_pools([&](BlockPool& pool) { release_whole_blocks(pool, release); });
}

Result<void> PyTorchCaching::empty_cache() {
  release_cached_blocks();
  return memory_.retry_leftovers();
}

}  // namespace

Result<std::unique_ptr<DeviceAllocator>> make_pytorch_caching_model(Driver& driver, const BaselineOptions& options) {
  return std::unique_ptr<DeviceAllocator>(std::make_unique<PyTorchCaching>(driver, options));
}

}  // namespace tessera::baselines
