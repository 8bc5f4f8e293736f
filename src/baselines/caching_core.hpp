// The machinery the three baseline models share, as PyTorch's DeviceCachingAllocator has it
// (c10/cuda/CUDACachingAllocator.cpp, PyTorch 2.5): request rounding and segment sizing, best-fit search
// in per-pool sets ordered by (stream, size, address), splitting a found block, merging a freed block with
// its free neighbours in the same segment, cross-stream frees that wait for events, the statistics, and
// segments of pages made through the driver. Each model composes these steps into its own allocate() and
// out-of-memory ladder.
//
// Single-threaded by design: the replay drives a model from one thread, and nothing here locks.
#pragma once

#include <deque>
#include <map>
#include <memory_resource>
#include <optional>
#include <string>
#include <vector>

#include "baselines/blocks.hpp"
#include "baselines/device_memory.hpp"
#include "baselines/node_recycler.hpp"
#include "support/address_table.hpp"
#include "tessera/baselines.hpp"

namespace tessera::baselines {

// PyTorch's constants.
inline constexpr Bytes kMinBlockSize = 512;      // every size is rounded to a multiple of 512 B
inline constexpr Bytes kSmallSize = 1 * MiB;     // the largest request of the small pool
inline constexpr Bytes kSmallBuffer = 2 * MiB;   // small requests are packed in 2 MiB segments
inline constexpr Bytes kLargeBuffer = 20 * MiB;  // requests under 10 MiB get 20 MiB segments
inline constexpr Bytes kMinLargeAlloc = 10 * MiB;
inline constexpr Bytes kRoundLarge = 2 * MiB;  // larger segments are rounded up to 2 MiB

// Sizes rounded up with checked arithmetic: none where the result would pass 2^64. A request can be any
// number of bytes below 2^64; one that cannot even be rounded is more than any device holds, and the models
// answer it out of memory.
//   `value` rounded up to a multiple of `multiple` (any positive number);
std::optional<Bytes> round_up_checked(Bytes value, Bytes multiple) noexcept;
//   PyTorch's round_size with roundup_power2_divisions (0 or 1: off);
std::optional<Bytes> round_size(Bytes size, std::size_t divisions) noexcept;
//   PyTorch's get_allocation_size: the size of the segment a miss allocates.
std::optional<Bytes> allocation_size(Bytes rounded) noexcept;

// A range of pages made through the driver for one model segment (cudaMalloc's result, or GMLake's chunks).
struct Segment {
  Address base = 0;
  Bytes size = 0;       // as the allocator sees it (the segment size PyTorch reports)
  Bytes page_size = 0;  // pages cover align_up(size, granule)
  std::vector<ChunkId> pages;
  StreamId stream{};
  PoolKind pool = PoolKind::large;
  std::uint32_t owner = 0;  // the private pool it was made for (Block::owner)
  bool live = false;
};

class CachingCore : public DeviceAllocator {
 public:
  ~CachingCore() override;
  CachingCore(const CachingCore&) = delete;
  CachingCore& operator=(const CachingCore&) = delete;

  std::string_view name() const noexcept final { return name_; }
  AllocatorStats stats() const final;

 protected:
  Result<void> do_deallocate(Address block) final;
  Result<void> do_record_stream(Address block, StreamId stream) final;
  // Private pools, as PyTorch's DeviceCachingAllocator keeps them (beginAllocateToPool, endAllocateToPool,
  // releasePool; docs/baselines.md, "Private pools"): beginning adds a use (a new pool starts with one),
  // ending stops the allocations into it, releasing takes a use away. A pool left without uses is
  // "freeable": nothing is given back then, but the next release_cached_blocks (empty_cache, the last step
  // of the out-of-memory ladder) frees its cached whole segments, and erases it once it holds none.
  Result<void> do_begin_allocate_to_pool(PoolId pool, StreamFilter accepts, tessera::PoolKind kind) final;
  Result<void> do_end_allocate_to_pool(PoolId pool) final;
  Result<void> do_release_pool(PoolId pool) final;
  CachingCore(std::string name, Driver& driver, const BaselineOptions& options);

  // What a best-fit search found.
  enum class Search : std::uint8_t {
    found,
    none,     // no free block of this stream is large enough
    refused,  // one is, but the max_split_size rules refuse it
  };

  BlockPool& pool_for(Bytes rounded) noexcept { return rounded <= kSmallSize ? small_ : large_; }
  // PyTorch's get_pool: while captures are under way, the first of them (in the order begun) whose filter
  // accepts the stream takes the allocation into its private pool.
  BlockPool& pool_for(Bytes rounded, StreamId stream) {
    if (captures_.empty()) [[likely]] return pool_for(rounded);
    return capture_pool_for(rounded, stream);
  }
  PoolKind kind_of(const BlockPool& pool) const noexcept { return pool.is_small ? PoolKind::small : PoolKind::large; }
  // The pool a block goes back to: the one it was allocated from, private or shared.
  BlockPool& pool_of(const Block& block) noexcept {
    if (block.owner == 0) [[likely]] return block.pool == PoolKind::small ? small_ : large_;
    PrivatePool& owner = private_pools_[block.owner - 1];
    return block.pool == PoolKind::small ? owner.small : owner.large;
  }
  // PyTorch skips event queries, synchronizations and release_cached_blocks on its out-of-memory path while
  // any capture is under way (they would invalidate the capture).
  bool captures_underway() const noexcept { return !captures_.empty(); }

  // PyTorch's get_free_block: best fit by (stream, size, address), the oversize rules, and with
  // expandable segments the preference for blocks that can grow less. Takes the block out of its pool.
  Search get_free_block(BlockPool& pool, StreamId stream, Bytes size, bool expandable, BlockId& found);
  // Splits the front `size` bytes off a found block when `split`, keeps the rest free, and hands the front
  // out: allocated, in the live map, counted. `charged` is what allocated_bytes counts (0: the block size).
  Address alloc_found_block(BlockId id, Bytes size, Bytes requested, bool split, Bytes charged = 0);
  // Merges a block whose use has ended with its free neighbours and puts it back in its pool.
  void free_block(BlockId id);
  // PyTorch's try_merge_blocks; returns the bytes taken over (0: not merged).
  Bytes try_merge(BlockId dst, BlockId src);
  void insert_into_pool(BlockId id);
  void erase_from_pool(BlockId id);

  // Cross-stream frees.
  void process_events();               // at the start of every allocate, as PyTorch does
  void synchronize_and_free_events();  // the OOM ladder and empty_cache
  bool has_pending_events() const noexcept { return pending_event_count_ != 0; }

  // Hooks for the models.
  // A block whose use has ended (freed, and its events complete): back to the cache. `direct`: freed
  // without stream uses, at the moment of the free.
  virtual void return_block(BlockId id, bool direct) {
    (void)direct;
    free_block(id);
  }
  // try_merge took `src` over into `dst`; `src` is about to be destroyed.
  virtual void on_merge(BlockId dst, BlockId src) {
    (void)dst;
    (void)src;
  }

  // Segments of pages (cudaMalloc and GMLake's chunked segments). Counts reserved bytes and
  // num_device_alloc, and tells the observer. A segment larger than the device's capacity is out of memory
  // at once: nothing is reserved, and no list of its pages is made (it would be as long as the request is
  // large).
  Result<std::uint32_t> create_segment(Bytes size, Bytes page_size, AccessCalls access, StreamId stream, PoolKind pool,
                                       std::uint32_t owner = 0);
  // A block spanning a whole segment, free and in no pool.
  BlockId make_segment_block(std::uint32_t segment);
  // Unmaps and releases every page and the reservation (cudaFree). With `synchronize`, waits for the
  // device first, as cudaFree does implicitly; false (and nothing released) when that wait fails, since
  // nothing is unmapped without proof that the device is done with it.
  bool release_segment(std::uint32_t segment, bool synchronize);
  Segment& segment(std::uint32_t id) noexcept { return segments_[id]; }
  const Segment& segment(std::uint32_t id) const noexcept { return segments_[id]; }
  std::size_t segment_count() const noexcept { return segments_.size(); }

  // Accounting.
  void add_reserved(Bytes bytes) noexcept;
  void remove_reserved(Bytes bytes) noexcept { reserved_ -= bytes; }
  Bytes reserved() const noexcept { return reserved_; }  // PyTorch's total_allocated_memory
  void notify(SegmentEvent::Kind kind, Address address, Bytes size, StreamId stream, PoolKind pool) const;

  // Options and their consequences.
  const BaselineOptions& options() const noexcept { return options_; }
  bool fraction_set() const noexcept { return options_.memory_fraction > 0.0; }
  Bytes allowed_memory_maximum() const noexcept;
  bool gc_enabled() const noexcept { return fraction_set() && options_.garbage_collection_threshold > 0.0; }
  // A segment of `size` more would pass the memory fraction (PyTorch's set_fraction check).
  bool over_fraction(Bytes size) const noexcept {
    return fraction_set() && reserved_ + size > allowed_memory_maximum();
  }
  // PyTorch's garbage_collect_cached_blocks: frees unsplit large blocks, oldest first, until the reserved
  // bytes are under the threshold. `release` gives one such block's segment back.
  template <class Release>
  void garbage_collect_cached_blocks(Release&& release);
  // PyTorch's release_available_cached_blocks: with max_split_size set, gives back one whole cached
  // segment of at least the request (or of max_split_size), else the largest oversize ones of this stream
  // until enough is freed. True when enough was given back.
  template <class Release>
  bool release_available_cached_blocks(BlockPool& pool, StreamId stream, Bytes size, Release&& release);
  // PyTorch's release_blocks without expandable segments: gives back every cached whole segment.
  template <class Release>
  void release_whole_blocks(BlockPool& pool, Release&& release);

  // PyTorch's release_cached_blocks for private pools: every freeable pool gives back its cached whole
  // segments (`release` is called with its small and its large block pool), and one that holds no segment
  // afterwards is erased.
  template <class Release>
  void release_freeable_pools(Release&& release);
  // A private pool made (`made`) or gave back one segment: PyTorch's cudaMalloc_count. Models with segments of
  // their own (expandable segments) call it; create_segment and release_segment do for the others.
  void count_segment(std::uint32_t owner, bool made) noexcept;

  Error out_of_memory(Bytes size, Bytes rounded, Bytes segment_size, StreamId stream);
  // A request whose rounding passes 2^64: out of memory before any step of the ladder, which could not
  // size a segment for it.
  Error out_of_memory_unroundable(Bytes size, StreamId stream);

  // Frees everything the model holds; the derived destructors call it while their hooks still exist.
  void release_everything();
  virtual void release_model_memory() = 0;

  std::string name_;
  Driver& driver_;
  BaselineOptions options_;
  DeviceMemory memory_;
  NodeRecycler node_pool_;  // before every container that uses it
  BlockStore blocks_;
  BlockPool small_{true, &node_pool_};
  BlockPool large_{false, &node_pool_};
  support::AddressTable<BlockId> live_;  // allocated blocks by address
  AllocatorStats stats_;

  // PyTorch's PrivatePool. Index i + 1 is the owner number of private_pools_[i]; a slot is reused after
  // its pool is erased.
  struct PrivatePool {
    PrivatePool(std::pmr::memory_resource* resource, std::uint32_t index)
        : small(true, resource, index), large(false, resource, index) {}
    PoolId id{};
    std::uint32_t uses = 0;   // PyTorch's use_count: captures (graphs) that still use the pool
    std::size_t segments = 0; // PyTorch's cudaMalloc_count
    bool live = false;        // false: erased, the slot is free
    BlockPool small;
    BlockPool large;
  };
  struct Capture {
    std::uint32_t owner;
    StreamFilter accepts;
  };
  std::deque<PrivatePool> private_pools_;         // after node_pool_, whose nodes they use
  std::map<PoolId, std::uint32_t> pools_in_use_;  // owner numbers of the pools with uses left, by id
  std::vector<Capture> captures_;                 // PyTorch's captures_underway, in the order begun

 private:
  struct PendingFree {
    EventId event;
    BlockId block;
  };
  struct StreamEvents {
    StreamId stream;
    std::deque<PendingFree> entries;
  };

  BlockPool& capture_pool_for(Bytes rounded, StreamId stream);

  Result<void> insert_events(BlockId id);
  void complete_free(BlockId id, bool direct);
  StreamEvents& events_of(StreamId stream);

  std::vector<StreamEvents> pending_;  // PyTorch's cuda_events: per stream, in record order
  std::size_t pending_event_count_ = 0;
  std::deque<Segment> segments_;
  std::vector<std::uint32_t> free_segments_;
  Bytes reserved_ = 0;
  bool released_ = false;
};

template <class Release>
void CachingCore::garbage_collect_cached_blocks(Release&& release) {
  const auto gc_threshold =
      static_cast<Bytes>(options_.garbage_collection_threshold * static_cast<double>(allowed_memory_maximum()));
  if (reserved_ <= gc_threshold) return;
  const Bytes target = reserved_ - gc_threshold;
  Bytes reclaimed = 0;

  auto age = [&](const PoolKey& key) {
    return static_cast<std::size_t>(large_.get_free_blocks_call_count - blocks_[key.id].gc_count_base);
  };
  std::size_t total_age = 0;
  int freeable = 0;
  for (const PoolKey& key : large_.blocks) {
    if (!blocks_[key.id].is_split()) {
      total_age += age(key);
      ++freeable;
    }
  }
  if (freeable == 0) return;

  // Free blocks at or above the mean age, again and again, until enough is reclaimed.
  bool freed = true;
  while (reclaimed < target && freed && freeable > 0) {
    const double threshold = static_cast<double>(total_age) / freeable;
    freed = false;
    for (auto it = large_.blocks.begin(); it != large_.blocks.end();) {
      const PoolKey key = *it;
      ++it;
      if (blocks_[key.id].is_split() || static_cast<double>(age(key)) < threshold) continue;
      freed = true;
      reclaimed += key.size;
      total_age -= age(key);
      --freeable;
      release(key.id);
    }
  }
}

template <class Release>
bool CachingCore::release_available_cached_blocks(BlockPool& pool, StreamId stream, Bytes size, Release&& release) {
  const Bytes max_split = options_.max_split_size;
  if (max_split == unlimited_split_size) return false;
  const Bytes wanted = size < max_split ? max_split : size;
  auto it = pool.blocks.lower_bound(PoolKey{stream_key(stream), wanted, 0, no_block});
  if (it != pool.blocks.end() && it->stream == stream_key(stream)) {
    if (blocks_[it->id].is_split()) return false;  // only whole segments can be given back
    release(it->id);
    return true;
  }
  // No single block is large enough: free oversize blocks of this stream, largest first.
  if (it == pool.blocks.begin()) return false;
  Bytes released = 0;
  --it;
  while (released < wanted && it->size >= max_split && it->stream == stream_key(stream) &&
         !blocks_[it->id].is_split()) {
    const BlockId id = it->id;
    released += it->size;
    const bool first = it == pool.blocks.begin();
    if (!first) --it;
    release(id);
    if (first) break;
  }
  return released >= wanted;
}

template <class Release>
void CachingCore::release_whole_blocks(BlockPool& pool, Release&& release) {
  for (auto it = pool.blocks.begin(); it != pool.blocks.end();) {
    const BlockId id = it->id;
    ++it;
    if (!blocks_[id].is_split()) release(id);
  }
}

template <class Release>
void CachingCore::release_freeable_pools(Release&& release) {
  for (std::size_t i = 0; i < private_pools_.size(); ++i) {
    PrivatePool& pool = private_pools_[i];
    if (!pool.live || pool.uses != 0) continue;
    release(pool.small);
    release(pool.large);
    if (pool.segments == 0 && pool.small.blocks.empty() && pool.large.blocks.empty() && pool.small.unmapped.empty() &&
        pool.large.unmapped.empty()) {
      pool.live = false;  // erased: nothing of it is left
      pool.id = PoolId{};
    }
  }
}

}  // namespace tessera::baselines
