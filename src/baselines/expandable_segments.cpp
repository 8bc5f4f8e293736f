// "expandable": PyTorch's caching allocator with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.
//
// Whose rules: PyTorch's DeviceCachingAllocator and ExpandableSegment in c10/cuda/CUDACachingAllocator.cpp
// as of PyTorch 2.5 (Note [Expandable Segments] there). Facts only, restated from that file:
//   - one segment per (stream, pool): a reservation of 9/8 of the device's memory, rounded up to whole
//     pages, created when no existing segment of that stream and pool has room; pages are 2 MiB in the
//     small pool and 20 MiB in the large pool, each its own cuMemCreate handle;
//   - rounding, pools, best fit and the max_split_size refusals are the native allocator's, except that a
//     free block followed by unmapped space is ranked by what it can grow to, and any remainder of at
//     least 512 B is split off in both pools;
//   - a miss maps new pages at the lowest address of the stream's segments where a free block plus the
//     unmapped space after it (or an unmapped range) fits the request: create the handles, map each, one
//     set_access over the new range; the mapped range merges with free neighbours;
//   - pages are unmapped only by empty_cache and by the last step of the out-of-memory ladder: events are
//     synchronized, then every free block gives back the whole pages inside it, after synchronizing its
//     segment's stream; a segment whose pages are all gone gives its reservation back;
//   - num_device_alloc counts map steps and num_device_free unmap steps, as PyTorch counts them.
//   - private pools (CUDA graphs): the current source maps expandable segments for a private pool too (only
//     Meta's internal build turns that off): the pool's own segments, per stream and size pool, grown and
//     unmapped by the rules above, with the pool rules of the native model (CachingCore, docs/baselines.md
//     "Private pools"); a freeable pool's fully unmapped segments give their reservation back.
// Not modelled: garbage_collection_threshold (in PyTorch it finds no whole segment to free here, since
// the unmapped tail is a neighbour of every block) and release_available_cached_blocks (with
// max_split_size set PyTorch would assert on an expandable block there); both are skipped.
#include <algorithm>
#include <limits>
#include <optional>

#include "baselines/caching_core.hpp"
#include "baselines/models.hpp"

namespace tessera::baselines {
namespace {

class ExpandableSegments final : public CachingCore {
 public:
  ExpandableSegments(Driver& driver, const BaselineOptions& options)
      : CachingCore("expandable", driver, options),
        small_page_(align_up(kSmallBuffer, driver.granularity())),
        large_page_(align_up(kLargeBuffer, driver.granularity())) {}
  ~ExpandableSegments() override { release_everything(); }

  Result<Address> do_allocate(Bytes size, StreamId stream) override;
  Result<void> empty_cache() override;

 private:
  // One reservation of one stream and pool, with the page (if any) under each page-sized slot.
  struct ExpandableSegment {
    Address base = 0;
    Bytes page_size = 0;
    std::size_t max_pages = 0;
    std::vector<std::optional<ChunkId>> pages;  // trimmed of trailing empty slots, like PyTorch's handles_
    StreamId stream{};
    PoolKind pool = PoolKind::large;
    std::uint32_t owner = 0;  // the private pool it belongs to (Block::owner)
    bool live = false;
  };

  Result<BlockId> alloc_block(BlockPool& pool, StreamId stream, Bytes size, Bytes segment_size, bool is_retry);
  Result<BlockId> try_allocate_expandable_block(BlockPool& pool, StreamId stream, Bytes size);
  // A free or unmapped block with room for `size`, in an existing segment or a new one; no_block when no
  // segment could hold it.
  Result<BlockId> find_expandable_block(BlockPool& pool, StreamId stream, Bytes size);
  // A segment's address space: 9/8 of the device's capacity, rounded up to whole pages; none past 2^64.
  std::optional<Bytes> segment_space(Bytes page_size) const noexcept;
  Result<bool> map_block(BlockId id, Bytes size);
  void unmap_block(BlockId id);
  void release_cached_blocks();
  void release_blocks(BlockPool& pool);
  void release_expandable_segment(BlockId id);
  bool allocatable(BlockId id) const;
  void release_model_memory() override;

  Bytes small_page_;
  Bytes large_page_;
  std::vector<ExpandableSegment> segments_;
};

Result<Address> ExpandableSegments::do_allocate(Bytes size, StreamId stream) {
  if (!captures_underway()) process_events();  // event queries would invalidate a capture
  const std::optional<Bytes> rounded_size = round_size(size, options_.roundup_power2_divisions);
  const std::optional<Bytes> segment = rounded_size ? allocation_size(*rounded_size) : std::nullopt;
  if (!segment) return out_of_memory_unroundable(size, stream);
  const Bytes rounded = *rounded_size;
  BlockPool& pool = pool_for(rounded, stream);
  const Bytes segment_size = *segment;  // PyTorch checks the memory fraction against it

  BlockId block = no_block;
  if (get_free_block(pool, stream, rounded, true, block) != Search::found) {
    block = no_block;
    auto made = alloc_block(pool, stream, rounded, segment_size, false);
    if (!made) return std::move(made).error();
    block = *made;
    if (block == no_block && !captures_underway()) {
      release_cached_blocks();
      made = alloc_block(pool, stream, rounded, segment_size, true);
      if (!made) return std::move(made).error();
      block = *made;
    }
  }
  if (block == no_block) return out_of_memory(size, rounded, rounded, stream);
  return alloc_found_block(block, rounded, size, blocks_[block].size - rounded >= kMinBlockSize);
}

Result<BlockId> ExpandableSegments::alloc_block(BlockPool& pool, StreamId stream, Bytes size, Bytes segment_size,
                                                bool is_retry) {
  if (is_retry) stats_.num_alloc_retries += 1;
  if (over_fraction(segment_size)) return no_block;
  return try_allocate_expandable_block(pool, stream, size);
}

bool ExpandableSegments::allocatable(BlockId id) const {
  if (id == no_block) return false;
  const Block& block = blocks_[id];
  return !block.allocated && block.event_count == 0 && block.stream_uses.empty();
}

Result<BlockId> ExpandableSegments::find_expandable_block(BlockPool& pool, StreamId stream, Bytes size) {
  auto has_room = [&](BlockId id) {
    Bytes room = 0;
    while (room < size && allocatable(id)) {
      room += blocks_[id].size;
      id = blocks_[id].next;
    }
    return room >= size;
  };
  // The lowest unmapped range of this stream, or the free block just before it, that has room.
  for (auto it = pool.unmapped.lower_bound(PoolKey{stream_key(stream), 0, 0, no_block});
       it != pool.unmapped.end() && it->stream == stream_key(stream); ++it) {
    BlockId candidate = it->id;
    if (allocatable(blocks_[candidate].prev)) candidate = blocks_[candidate].prev;
    if (has_room(candidate)) return candidate;
  }

  // A new segment: address space for 9/8 of the device's memory. A request larger than that has room in no
  // segment: out of memory, without reserving one that could never serve it.
  ExpandableSegment seg;
  seg.page_size = pool.is_small ? small_page_ : large_page_;
  const std::optional<Bytes> space = segment_space(seg.page_size);
  if (!space || size > *space) return no_block;
  seg.max_pages = *space / seg.page_size;
  auto base = memory_.reserve(*space);
  if (!base) return std::move(base).error();
  seg.base = *base;
  seg.stream = stream;
  seg.pool = kind_of(pool);
  seg.owner = pool.owner;
  seg.live = true;
  count_segment(seg.owner, true);
  auto slot = std::find_if(segments_.begin(), segments_.end(), [](const ExpandableSegment& s) { return !s.live; });
  if (slot == segments_.end()) slot = segments_.insert(segments_.end(), ExpandableSegment{});
  *slot = std::move(seg);

  const BlockId id = blocks_.create();
  Block& block = blocks_[id];
  block.address = slot->base;
  block.size = slot->max_pages * slot->page_size;
  block.stream = stream;
  block.segment = static_cast<std::uint32_t>(slot - segments_.begin());
  block.owner = slot->owner;
  block.pool = slot->pool;
  block.mapped = false;
  insert_into_pool(id);
  return id;
}

std::optional<Bytes> ExpandableSegments::segment_space(Bytes page_size) const noexcept {
  const Bytes capacity = driver_.capacity();
  const Bytes eighth = capacity / 8;
  const Bytes rest = capacity % 8 * 9 / 8;  // what 9/8 of the capacity's last 0..7 bytes adds
  if (eighth > (std::numeric_limits<Bytes>::max() - rest) / 9) return std::nullopt;
  return round_up_checked(eighth * 9 + rest, page_size);
}

Result<BlockId> ExpandableSegments::try_allocate_expandable_block(BlockPool& pool, StreamId stream, Bytes size) {
  auto found = find_expandable_block(pool, stream, size);
  if (!found) return std::move(found).error();
  if (*found == no_block) return no_block;
  BlockId candidate = *found;
  // The candidate is an unmapped range, or a free block followed by one.
  if (!blocks_[candidate].mapped) {
    auto mapped = map_block(candidate, std::min(blocks_[candidate].size, size));
    if (!mapped) return std::move(mapped).error();
    if (!*mapped) return no_block;
  }
  while (blocks_[candidate].size < size) {
    const BlockId next = blocks_[candidate].next;  // unmapped: map what is missing, merging with candidate
    auto mapped = map_block(next, std::min(size - blocks_[candidate].size, blocks_[next].size));
    if (!mapped) return std::move(mapped).error();
    if (!*mapped) return no_block;
    candidate = next;
  }
  erase_from_pool(candidate);
  return candidate;
}

Result<bool> ExpandableSegments::map_block(BlockId id, Bytes size) {
  ExpandableSegment& seg = segments_[blocks_[id].segment];
  const Address start = blocks_[id].address;
  const std::size_t begin = (start - seg.base) / seg.page_size;
  const std::size_t end = (start + size - seg.base + seg.page_size - 1) / seg.page_size;
  // More pages than the device holds would fail at its capacity anyway: out of memory before a list of them
  // is made (as long as the request is large).
  if (end - begin > driver_.capacity() / seg.page_size) return false;
  std::vector<ChunkId> pages(end - begin);
  auto done = memory_.create_and_map(seg.base + begin * seg.page_size, seg.page_size, AccessCalls::whole_range, pages);
  if (!done) {
    if (done.error().code == Errc::out_of_memory) return false;
    return std::move(done).error();
  }
  if (seg.pages.size() < end) seg.pages.resize(end);
  for (std::size_t i = begin; i < end; ++i) seg.pages[i] = pages[i - begin];

  const Bytes mapped = (end - begin) * seg.page_size;
  erase_from_pool(id);
  blocks_[id].mapped = true;
  if (mapped < blocks_[id].size) {
    // The rest of the range stays unmapped, as a block of its own after this one.
    const BlockId rest = blocks_.create();
    Block& block = blocks_[id];
    Block& remainder = blocks_[rest];
    remainder.address = block.address + mapped;
    remainder.size = block.size - mapped;
    remainder.stream = block.stream;
    remainder.segment = block.segment;
    remainder.owner = block.owner;
    remainder.pool = block.pool;
    remainder.mapped = false;
    remainder.prev = id;
    remainder.next = block.next;
    if (block.next != no_block) blocks_[block.next].prev = rest;
    block.next = rest;
    block.size = mapped;
    insert_into_pool(rest);
  }
  try_merge(id, blocks_[id].prev);
  try_merge(id, blocks_[id].next);
  insert_into_pool(id);

  add_reserved(mapped);
  stats_.num_device_alloc += 1;
  notify(SegmentEvent::Kind::map, seg.base + begin * seg.page_size, mapped, seg.stream, seg.pool);
  return true;
}

void ExpandableSegments::unmap_block(BlockId id) {
  ExpandableSegment& seg = segments_[blocks_[id].segment];
  const Address start = blocks_[id].address;
  const Address stop = start + blocks_[id].size;
  const std::size_t begin = (start - seg.base + seg.page_size - 1) / seg.page_size;
  const std::size_t end = (stop - seg.base) / seg.page_size;
  if (begin >= end) return;  // no whole page inside the block
  // Unmapping needs proof that the stream's work is done (PyTorch: cudaStreamSynchronize).
  if (!driver_.synchronize_stream(seg.stream)) return;
  for (std::size_t i = begin; i < end; ++i) {
    memory_.unmap_and_release(seg.base + i * seg.page_size, *seg.pages[i], seg.page_size);
    seg.pages[i].reset();
  }
  while (!seg.pages.empty() && !seg.pages.back()) seg.pages.pop_back();

  const Address unmapped_start = seg.base + begin * seg.page_size;
  const Bytes unmapped_size = (end - begin) * seg.page_size;
  erase_from_pool(id);
  auto free_piece = [&](Address address, Bytes size, BlockId before, BlockId after) {
    const BlockId piece = blocks_.create();
    Block& block = blocks_[piece];
    block.address = address;
    block.size = size;
    block.stream = seg.stream;
    block.segment = blocks_[id].segment;
    block.owner = seg.owner;
    block.pool = seg.pool;
    block.prev = before;
    block.next = after;
    if (before != no_block) blocks_[before].next = piece;
    if (after != no_block) blocks_[after].prev = piece;
    insert_into_pool(piece);
  };
  if (unmapped_start > start) free_piece(start, unmapped_start - start, blocks_[id].prev, id);
  if (stop > unmapped_start + unmapped_size) {
    free_piece(unmapped_start + unmapped_size, stop - unmapped_start - unmapped_size, id, blocks_[id].next);
  }
  Block& block = blocks_[id];
  block.address = unmapped_start;
  block.size = unmapped_size;
  block.mapped = false;
  try_merge(id, blocks_[id].prev);
  try_merge(id, blocks_[id].next);
  insert_into_pool(id);

  remove_reserved(unmapped_size);
  stats_.num_device_free += 1;
  notify(SegmentEvent::Kind::unmap, unmapped_start, unmapped_size, seg.stream, seg.pool);
}

void ExpandableSegments::release_expandable_segment(BlockId id) {
  ExpandableSegment& seg = segments_[blocks_[id].segment];
  erase_from_pool(id);
  memory_.release_reservation(seg.base);
  count_segment(seg.owner, false);
  seg = ExpandableSegment{};
  blocks_.destroy(id);
}

void ExpandableSegments::release_blocks(BlockPool& pool) {
  std::vector<BlockId> to_unmap;  // unmapping changes the pool: gather first
  to_unmap.reserve(pool.blocks.size());
  for (const PoolKey& key : pool.blocks) to_unmap.push_back(key.id);
  for (BlockId id : to_unmap) {
    unmap_block(id);
    if (!blocks_[id].is_split() && !blocks_[id].mapped) release_expandable_segment(id);
  }
}

void ExpandableSegments::release_cached_blocks() {
  if (!captures_underway()) {  // as PyTorch: the shared cache waits until no capture is under way
    synchronize_and_free_events();
    release_blocks(large_);
    release_blocks(small_);
  }
  release_freeable_pools([this](BlockPool& pool) {
    release_blocks(pool);
    // A segment left with no page at all gives its reservation back, so that the pool can be erased.
    std::vector<BlockId> empty;
    for (const PoolKey& key : pool.unmapped) {
      if (!blocks_[key.id].is_split()) empty.push_back(key.id);
    }
    for (BlockId id : empty) release_expandable_segment(id);
  });
}

Result<void> ExpandableSegments::empty_cache() {
  release_cached_blocks();
  return memory_.retry_leftovers();
}

void ExpandableSegments::release_model_memory() {
  for (ExpandableSegment& seg : segments_) {
    if (!seg.live) continue;
    for (std::size_t i = 0; i < seg.pages.size(); ++i) {
      if (seg.pages[i]) memory_.unmap_and_release(seg.base + i * seg.page_size, *seg.pages[i], seg.page_size);
    }
    memory_.release_reservation(seg.base);
    seg = ExpandableSegment{};
  }
  remove_reserved(reserved());
}

}  // namespace

Result<std::unique_ptr<DeviceAllocator>> make_expandable_segments_model(Driver& driver,
                                                                        const BaselineOptions& options) {
  return std::unique_ptr<DeviceAllocator>(std::make_unique<ExpandableSegments>(driver, options));
}

}  // namespace tessera::baselines
