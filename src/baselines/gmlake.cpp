// "gmlake": GMLake, the virtual-memory stitching allocator of glake (a patched PyTorch caching allocator).
//
// Whose rules: GMLake/src/CUDACachingAllocator.cpp and GMLake/include/cuda_vmm_allocator.h of the glake
// project (PyTorch 2.0 based), and the paper (Guo et al., "GMLake:
// Efficient and Transparent GPU Memory Defragmentation for Large-scale DNN Training with Virtual Memory
// Stitching", ASPLOS 2024). Facts only, restated from those sources, with GMLake's defaults
// (vmmDefragment=1, fragLimit=512 MiB, reuseLimit=10, defragLevel=0, autoGC=1000 GiB, reAlloc=0):
//   - small pool (≤ 1 MiB): PyTorch's native rules, 2 MiB cudaMalloc segments;
//   - large pool: requests are rounded up to 2 MiB; a miss allocates a segment of PyTorch's size made of
//     2 MiB physical chunks (one cuMemCreate each), mapped side by side with one map and one set_access per
//     chunk; a block is split when the remainder is at least 2 MiB (and the request under max_split_size);
//   - search order for a large request: best fit among free blocks of the stream; only if none of them is
//     large enough, a free stitched block of the stream no larger than 10 × the request (it uses only the
//     chunks the request needs; the blocks owning them are cut at chunk boundaries); then stitching: for a
//     request ≥ 512 MiB, the stream's free blocks, largest first, until they cover the request (at least two
//     blocks in the pool, the last one split), their chunks mapped into one new virtual range; then new
//     memory; then PyTorch's ladder (release oversize segments, release every whole cached segment after
//     synchronizing events), each step followed by another stitching attempt;
//   - a stitched block whose chunks are partly taken by others is "fragmented" and cannot be reused; its
//     garbage collection frees stitched virtual ranges (in free order, only after their free event has
//     completed), never physical memory, on empty_cache and once stitched address space passes 1000 GiB;
//     physical chunks go only with their whole segment (empty_cache, the OOM ladder, the GC threshold);
//   - every free records an event on the block's stream (GMLake's self_last_event);
//   - private pools (CUDA graphs) as PyTorch 2.0 keeps them, whose allocator GMLake patches: a capture's
//     allocations come from the pool's own block pools and chunked segments, its freed blocks go back there
//     only, a pool released by its last graph is freed by the next release_cached_blocks (CachingCore,
//     docs/baselines.md "Private pools").
// Not modelled for private pools: GMLake keeps one set of free stitched blocks for every pool and takes a
// large request of a capture to it too, and it splits the shared cache's blocks whose chunks such a block
// uses; a graph could then be handed memory that eager allocations reuse. The model never stitches for a
// private pool nor hands it a stitched block, so that a graph's memory stays its own.
// Approximations, documented in docs/baselines.md: a stitched block is guarded by its own free event only
// (GMLake also inherits the newest event of the blocks it stitches); the GC of stitched ranges on a failed
// new allocation is not modelled (it needs more free device memory than the request, which never holds on
// a driver that fails only at capacity); one device synchronization precedes a batch of chunked segment
// releases (GMLake relies on cuMemUnmap being synchronous), and the stream of a stitched block is
// synchronized before a stitched range is unmapped at its free.
#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include "baselines/caching_core.hpp"
#include "baselines/models.hpp"

namespace tessera::baselines {
namespace {

inline constexpr Bytes kChunk = 2 * MiB;  // GMLake's kGranularity: its physical chunk

class GMLake final : public CachingCore {
 public:
  GMLake(Driver& driver, const BaselineOptions& options)
      : CachingCore("gmlake", driver, options), can_stitch_(driver.capabilities().page_multi_mapping) {}
  ~GMLake() override { release_everything(); }

  Result<Address> do_allocate(Bytes size, StreamId stream) override;
  Result<void> empty_cache() override;

 private:
  enum Kind : std::uint8_t { plain = 0, original = 1, stitched = 2 };

  // The chunks of one large-pool segment (by core segment id).
  struct Chunks {
    std::vector<std::uint8_t> in_use;         // taken by an allocated block or a stitched block's prefix
    std::vector<std::vector<BlockId>> users;  // stitched blocks mapping each chunk, sized at the first stitch
    std::size_t stitch_refs = 0;
    BlockId head = no_block;  // the block at the segment's base
  };
  struct ChunkRef {
    std::uint32_t segment;
    std::uint32_t index;
    bool dropped;  // unmapped from the stitched range because its segment was given back
  };
  enum class StitchState : std::uint8_t { allocated, free, fragmented };
  struct Stitch {
    std::vector<ChunkRef> chunks;
    std::vector<BlockId> borrowed;  // original blocks whose chunks this block uses while allocated
    std::size_t used_prefix = 0;    // chunks used while allocated: the request's, from the front
    std::size_t busy = 0;           // chunks in use by anyone
    StitchState state = StitchState::allocated;
    bool doomed = false;            // lost a chunk: deleted at its free instead of cached
    std::uint64_t release_seq = 0;  // free order, for the GC
  };
  using ReleaseOrder = std::map<std::uintptr_t, std::set<std::pair<std::uint64_t, BlockId>>>;

  std::optional<Bytes> round_request(Bytes size) const noexcept;
  bool should_split(const Block& block, Bytes size) const noexcept;

  Result<BlockId> realloc_block(BlockPool& pool, StreamId stream, Bytes segment_size, bool is_retry);
  void release_block(BlockId id);
  void release_cached_blocks();
  bool sync_before_release();

  // Chunk bookkeeping.
  std::size_t first_chunk(const Block& block) const noexcept;
  void mark_chunks(std::uint32_t segment, std::size_t first, std::size_t count, bool use, BlockId except);
  void mark_block_chunks(BlockId id, bool use) {
    const Block& block = blocks_[id];
    mark_chunks(block.segment, first_chunk(block), block.size / kChunk, use, no_block);
  }
  BlockId covering_block(std::uint32_t segment, std::size_t chunk) const;
  void split_into_runs(BlockId id, std::vector<BlockId>& borrowed);

  // Stitched blocks.
  BlockId take_free_stitched(StreamId stream, Bytes size);
  BlockId stitch(StreamId stream, Bytes size);
  void release_stitched(BlockId id);
  void delete_stitched(BlockId id);
  void drop_stitch_refs(std::uint32_t segment);
  Bytes collect_stitched_garbage(int time, Bytes required);
  void move_to_fragmented(BlockId id);
  void move_to_free(BlockId id);
  bool free_event_complete(BlockId id);

  void record_free_event(BlockId id);
  void release_free_event(BlockId id);

  void return_block(BlockId id, bool direct) override;
  void on_merge(BlockId dst, BlockId src) override;
  void release_model_memory() override;

  bool can_stitch_;
  bool device_synced_ = false;
  std::vector<Chunks> chunks_;
  std::unordered_map<BlockId, Stitch> stitches_;
  SizeOrderedSet free_stitched_{&node_pool_};
  ReleaseOrder free_order_;
  ReleaseOrder fragmented_order_;
  std::vector<std::optional<EventId>> free_events_;  // by block id
  Bytes stitched_bytes_ = 0;
  std::uint64_t release_clock_ = 0;
};

std::optional<Bytes> GMLake::round_request(Bytes size) const noexcept {
  const std::optional<Bytes> rounded = round_size(size, 0);
  if (!rounded) return std::nullopt;
  return *rounded > kSmallSize ? round_up_checked(size, kChunk) : rounded;
}

bool GMLake::should_split(const Block& block, Bytes size) const noexcept {
  const Bytes remaining = block.size - size;
  if (block.pool == PoolKind::small) return remaining >= kMinBlockSize;
  return size < options_.max_split_size && remaining >= kChunk;
}

Result<Address> GMLake::do_allocate(Bytes size, StreamId stream) {
  device_synced_ = false;
  if (!captures_underway()) process_events();  // event queries would invalidate a capture
  const std::optional<Bytes> rounded_size = round_request(size);
  const std::optional<Bytes> segment = rounded_size ? allocation_size(*rounded_size) : std::nullopt;
  if (!segment) return out_of_memory_unroundable(size, stream);
  const Bytes rounded = *rounded_size;
  BlockPool& pool = pool_for(rounded, stream);
  const Bytes segment_size = *segment;
  auto release = [this](BlockId id) { release_block(id); };
  const bool shared = pool.owner == 0;  // stitching serves the shared cache only (see the header)

  BlockId block = no_block;
  const Search search = get_free_block(pool, stream, rounded, false, block);
  if (search != Search::found) {
    block = no_block;
    if (search == Search::none && !pool.is_small && shared) block = take_free_stitched(stream, rounded);
  }
  if (block == no_block && shared) block = stitch(stream, rounded);
  if (block == no_block) {
    if (gc_enabled()) garbage_collect_cached_blocks(release);
    auto made = realloc_block(pool, stream, segment_size, false);
    if (!made) return std::move(made).error();
    block = *made;
    if (block == no_block && release_available_cached_blocks(pool, stream, rounded, release)) {
      made = realloc_block(pool, stream, segment_size, false);
      if (!made) return std::move(made).error();
      block = *made;
    }
    if (block == no_block && shared) block = stitch(stream, rounded);
    if (block == no_block && !captures_underway()) {
      release_cached_blocks();
      made = realloc_block(pool, stream, segment_size, true);
      if (!made) return std::move(made).error();
      block = *made;
    }
    if (block == no_block && shared) block = stitch(stream, rounded);
  }
  if (block == no_block) return out_of_memory(size, rounded, segment_size, stream);

  if (blocks_[block].kind == stitched) return alloc_found_block(block, rounded, size, false, rounded);
  const Address address = alloc_found_block(block, rounded, size, should_split(blocks_[block], rounded), rounded);
  if (blocks_[block].kind == original) mark_block_chunks(block, true);
  return address;
}

Result<BlockId> GMLake::realloc_block(BlockPool& pool, StreamId stream, Bytes segment_size, bool is_retry) {
  if (is_retry) stats_.num_alloc_retries += 1;
  if (over_fraction(segment_size)) return no_block;
  const bool small = pool.is_small;
  const std::optional<Bytes> page = small ? round_up_checked(segment_size, memory_.granularity()) : kChunk;
  if (!page) return no_block;
  auto made = create_segment(segment_size, *page, small ? AccessCalls::whole_range : AccessCalls::per_page, stream,
                             kind_of(pool), pool.owner);
  if (!made) {
    if (made.error().code == Errc::out_of_memory) return no_block;
    return std::move(made).error();
  }
  const BlockId id = make_segment_block(*made);
  if (!small) {
    blocks_[id].kind = original;
    if (chunks_.size() <= *made) chunks_.resize(*made + 1);
    chunks_[*made] = Chunks{};
    chunks_[*made].in_use.assign(segment_size / kChunk, 0);
    chunks_[*made].head = id;
  }
  return id;
}

bool GMLake::sync_before_release() {
  if (!device_synced_) device_synced_ = driver_.synchronize_device().ok();
  return device_synced_;
}

void GMLake::release_block(BlockId id) {
  const std::uint32_t seg = blocks_[id].segment;
  const bool chunked = blocks_[id].kind == original;
  if (chunked) {
    if (!sync_before_release()) return;  // no proof that the device is done: kept
    drop_stitch_refs(seg);
    (void)release_segment(seg, false);
    chunks_[seg] = Chunks{};
  } else if (!release_segment(seg, true)) {  // a plain segment is a cudaFree, which waits for the device
    return;
  }
  erase_from_pool(id);
  release_free_event(id);
  blocks_.destroy(id);
}

void GMLake::release_cached_blocks() {
  auto release = [this](BlockId id) { release_block(id); };
  if (!captures_underway()) {
    synchronize_and_free_events();
    release_whole_blocks(large_, release);
    release_whole_blocks(small_, release);
  }
  release_freeable_pools([&](BlockPool& pool) { release_whole_blocks(pool, release); });
}

Result<void> GMLake::empty_cache() {
  device_synced_ = false;
  release_cached_blocks();
  collect_stitched_garbage(2, 0);
  return memory_.retry_leftovers();
}

// --- chunks ---------------------------------------------------------------------------------------------

std::size_t GMLake::first_chunk(const Block& block) const noexcept {
  return (block.address - segment(block.segment).base) / kChunk;
}

void GMLake::mark_chunks(std::uint32_t seg, std::size_t first, std::size_t count, bool use, BlockId except) {
  Chunks& chunks = chunks_[seg];
  std::fill_n(chunks.in_use.begin() + static_cast<std::ptrdiff_t>(first), count, use ? 1 : 0);
  if (chunks.stitch_refs == 0) return;
  for (std::size_t i = first; i < first + count; ++i) {
    for (BlockId user : chunks.users[i]) {
      if (user == except) continue;
      Stitch& other = stitches_.at(user);
      if (use) {
        ++other.busy;
        if (other.state == StitchState::free) move_to_fragmented(user);
      } else {
        --other.busy;
        if (other.busy == 0 && other.state == StitchState::fragmented) move_to_free(user);
      }
    }
  }
}

BlockId GMLake::covering_block(std::uint32_t seg, std::size_t chunk) const {
  const Address at = segment(seg).base + chunk * kChunk;
  BlockId id = chunks_[seg].head;
  while (id != no_block && blocks_[id].address + blocks_[id].size <= at) id = blocks_[id].next;
  return id;
}

void GMLake::split_into_runs(BlockId id, std::vector<BlockId>& borrowed) {
  // Cut a free original block at every change between taken and free chunks: taken runs are lent to the
  // stitched block, free runs go back to the pool.
  const std::vector<std::uint8_t>& in_use = chunks_[blocks_[id].segment].in_use;
  const std::size_t first = first_chunk(blocks_[id]);
  const std::size_t count = blocks_[id].size / kChunk;
  BlockId current = id;
  for (std::size_t begin = 0; begin < count;) {
    const bool used = in_use[first + begin] != 0;
    std::size_t end = begin;
    while (end < count && (in_use[first + end] != 0) == used) ++end;
    BlockId rest = no_block;
    if (end < count) {
      rest = blocks_.create();
      Block& block = blocks_[current];
      Block& after = blocks_[rest];
      after.address = block.address + (end - begin) * kChunk;
      after.size = block.size - (end - begin) * kChunk;
      after.stream = block.stream;
      after.segment = block.segment;
      after.owner = block.owner;
      after.pool = block.pool;
      after.kind = original;
      after.prev = current;
      after.next = block.next;
      if (block.next != no_block) blocks_[block.next].prev = rest;
      block.next = rest;
      block.size = (end - begin) * kChunk;
    }
    if (used) {
      blocks_[current].allocated = true;
      borrowed.push_back(current);
    } else {
      insert_into_pool(current);
    }
    current = rest;
    begin = end;
  }
}

// --- stitched blocks --------------------------------------------------------------------------------------

BlockId GMLake::take_free_stitched(StreamId stream, Bytes size) {
  auto it = free_stitched_.lower_bound(PoolKey{stream_key(stream), size, 0, no_block});
  if (it == free_stitched_.end() || it->stream != stream_key(stream)) return no_block;
  if (static_cast<double>(it->size) > static_cast<double>(size) * options_.gmlake.reuse_limit) return no_block;
  const BlockId id = it->id;
  Stitch& st = stitches_.at(id);
  free_stitched_.erase(it);
  free_order_[stream_key(stream)].erase({st.release_seq, id});

  // Take the chunks the request needs, from the front, and cut the original blocks that own them.
  const std::size_t keep = size / kChunk;
  std::vector<BlockId> covering;
  for (std::size_t i = 0; i < keep; ++i) {
    const ChunkRef ref = st.chunks[i];
    const BlockId owner = covering_block(ref.segment, ref.index);
    if (std::find(covering.begin(), covering.end(), owner) == covering.end()) covering.push_back(owner);
    mark_chunks(ref.segment, ref.index, 1, true, id);
  }
  st.used_prefix = keep;
  st.busy = keep;
  st.state = StitchState::allocated;
  for (BlockId owner : covering) {
    erase_from_pool(owner);
    split_into_runs(owner, st.borrowed);
  }
  return id;
}

BlockId GMLake::stitch(StreamId stream, Bytes size) {
  if (!can_stitch_ || size <= kSmallSize || size < options_.gmlake.fragment_limit) return no_block;
  const std::uintptr_t key = stream_key(stream);
  auto begin = large_.blocks.lower_bound(PoolKey{key, 0, 0, no_block});
  if (begin == large_.blocks.end() || begin->stream != key) return no_block;
  auto end = large_.blocks.upper_bound(PoolKey{key, unlimited_split_size, ~Address{0}, no_block});
  if (std::prev(end) == begin) return no_block;  // one free block cannot be stitched

  // The stream's free blocks, largest first, until they cover the request.
  std::vector<BlockId> taken;
  Bytes covered = 0;
  for (auto it = end; it != begin && covered < size;) {
    --it;
    taken.push_back(it->id);
    covered += it->size;
  }
  if (covered < size) return no_block;
  const Bytes excess = covered - size;  // a whole number of chunks: cut from the last (smallest) block

  std::vector<ChunkRef> refs;
  std::vector<ChunkId> pages;
  refs.reserve(size / kChunk);
  pages.reserve(size / kChunk);
  for (std::size_t k = 0; k < taken.size(); ++k) {
    const Block& block = blocks_[taken[k]];
    const std::size_t first = first_chunk(block);
    std::size_t count = block.size / kChunk;
    if (k + 1 == taken.size()) count -= excess / kChunk;
    for (std::size_t j = 0; j < count; ++j) {
      refs.push_back({block.segment, static_cast<std::uint32_t>(first + j), false});
      pages.push_back(segment(block.segment).pages[first + j]);
    }
  }

  // A new virtual range with every chunk mapped into it; when no range can be had, collect stitched garbage
  // and try again, three times at most.
  std::optional<Address> base;
  for (int gc_time = 0; gc_time < 3 && !base; ++gc_time) {
    auto reserved_range = memory_.reserve(size);
    if (reserved_range) {
      base = *reserved_range;
    } else {
      collect_stitched_garbage(gc_time, size);
    }
  }
  if (!base) return no_block;
  if (!memory_.map_existing(*base, kChunk, AccessCalls::per_page, pages)) {
    memory_.release_reservation(*base);
    return no_block;
  }

  // Commit: the taken blocks are lent to the new stitched block, the last one cut to what is needed.
  for (BlockId id : taken) erase_from_pool(id);
  if (excess > 0) {
    const BlockId last = taken.back();
    const BlockId rest = blocks_.create();
    Block& block = blocks_[last];
    Block& remainder = blocks_[rest];
    remainder.address = block.address + (block.size - excess);
    remainder.size = excess;
    remainder.stream = block.stream;
    remainder.segment = block.segment;
    remainder.owner = block.owner;
    remainder.pool = block.pool;
    remainder.kind = original;
    remainder.prev = last;
    remainder.next = block.next;
    if (block.next != no_block) blocks_[block.next].prev = rest;
    block.next = rest;
    block.size -= excess;
    insert_into_pool(rest);
  }
  for (BlockId id : taken) {
    blocks_[id].allocated = true;
    mark_block_chunks(id, true);
  }

  const BlockId id = blocks_.create();
  Block& block = blocks_[id];
  block.address = *base;
  block.size = size;
  block.stream = stream;
  block.pool = PoolKind::large;
  block.kind = stitched;
  Stitch& st = stitches_[id];
  st = Stitch{};
  st.chunks = std::move(refs);
  st.borrowed = std::move(taken);
  st.used_prefix = st.chunks.size();
  st.busy = st.chunks.size();
  for (const ChunkRef& ref : st.chunks) {
    Chunks& chunks = chunks_[ref.segment];
    if (chunks.users.empty()) chunks.users.resize(chunks.in_use.size());
    chunks.users[ref.index].push_back(id);
    ++chunks.stitch_refs;
  }
  stitched_bytes_ += size;
  if (stitched_bytes_ > options_.gmlake.auto_gc_limit) collect_stitched_garbage(2, 0);
  return id;
}

void GMLake::release_stitched(BlockId id) {
  Stitch& st = stitches_.at(id);
  for (std::size_t i = 0; i < st.used_prefix; ++i) mark_chunks(st.chunks[i].segment, st.chunks[i].index, 1, false, id);
  st.busy -= st.used_prefix;
  st.used_prefix = 0;
  std::vector<BlockId> borrowed = std::move(st.borrowed);
  st.borrowed.clear();
  for (BlockId piece : borrowed) {
    blocks_[piece].allocated = false;
    free_block(piece);
  }
  if (st.doomed && driver_.synchronize_stream(blocks_[id].stream)) {
    delete_stitched(id);  // its range lost a chunk: it goes once the stream's work on it is done
    return;
  }
  st.release_seq = ++release_clock_;
  const std::uintptr_t key = stream_key(blocks_[id].stream);
  if (st.busy == 0 && !st.doomed) {
    st.state = StitchState::free;
    free_stitched_.insert(key_of(blocks_[id], id));
    free_order_[key].insert({st.release_seq, id});
  } else {
    st.state = StitchState::fragmented;
    fragmented_order_[key].insert({st.release_seq, id});
  }
}

void GMLake::move_to_fragmented(BlockId id) {
  Stitch& st = stitches_.at(id);
  const std::uintptr_t key = stream_key(blocks_[id].stream);
  free_stitched_.erase(key_of(blocks_[id], id));
  free_order_[key].erase({st.release_seq, id});
  fragmented_order_[key].insert({st.release_seq, id});
  st.state = StitchState::fragmented;
}

void GMLake::move_to_free(BlockId id) {
  Stitch& st = stitches_.at(id);
  if (st.doomed) return;  // never reused: it waits, fragmented, for the GC
  const std::uintptr_t key = stream_key(blocks_[id].stream);
  fragmented_order_[key].erase({st.release_seq, id});
  free_stitched_.insert(key_of(blocks_[id], id));
  free_order_[key].insert({st.release_seq, id});
  st.state = StitchState::free;
}

void GMLake::delete_stitched(BlockId id) {
  Stitch& st = stitches_.at(id);
  const Block& block = blocks_[id];
  for (std::size_t i = 0; i < st.chunks.size(); ++i) {
    const ChunkRef& ref = st.chunks[i];
    if (ref.dropped) continue;
    memory_.unmap(block.address + i * kChunk);
    Chunks& chunks = chunks_[ref.segment];
    std::erase(chunks.users[ref.index], id);
    --chunks.stitch_refs;
  }
  memory_.release_reservation(block.address);
  const std::uintptr_t key = stream_key(block.stream);
  if (st.state == StitchState::free) {
    free_stitched_.erase(key_of(block, id));
    free_order_[key].erase({st.release_seq, id});
  } else if (st.state == StitchState::fragmented) {
    fragmented_order_[key].erase({st.release_seq, id});
  }
  stitched_bytes_ -= block.size;
  release_free_event(id);
  stitches_.erase(id);
  blocks_.destroy(id);
}

void GMLake::drop_stitch_refs(std::uint32_t seg) {
  // The segment's chunks are about to go: cached stitched blocks that map them go too; an allocated one
  // (which can only map them in the unused tail of its range) loses the mapping and is deleted at its free.
  if (chunks_[seg].stitch_refs == 0) return;
  for (std::size_t index = 0; index < chunks_[seg].users.size(); ++index) {
    const std::vector<BlockId> users = chunks_[seg].users[index];
    for (BlockId user : users) {
      Stitch& st = stitches_.at(user);
      if (st.state != StitchState::allocated) {
        delete_stitched(user);
        continue;
      }
      for (std::size_t pos = st.used_prefix; pos < st.chunks.size(); ++pos) {
        ChunkRef& ref = st.chunks[pos];
        if (ref.dropped || ref.segment != seg || ref.index != index) continue;
        memory_.unmap(blocks_[user].address + pos * kChunk);
        ref.dropped = true;
      }
      st.doomed = true;
      std::erase(chunks_[seg].users[index], user);
      --chunks_[seg].stitch_refs;
    }
  }
}

bool GMLake::free_event_complete(BlockId id) {
  if (id >= free_events_.size() || !free_events_[id]) return true;
  auto done = driver_.query_event(*free_events_[id]);
  return done.ok() && *done;
}

Bytes GMLake::collect_stitched_garbage(int time, Bytes required) {
  // Stitched ranges whose free has completed, in free order per stream; fragmented ones first, free ones
  // too from the second attempt on.
  Bytes garbage = 0;
  for (auto& [stream, order] : fragmented_order_) {
    while (!order.empty()) {
      const BlockId id = order.begin()->second;
      if (!free_event_complete(id)) break;
      garbage += blocks_[id].size;
      delete_stitched(id);
      if (required > 0 && time <= 1 && (garbage >> (2 * (time + 1))) >= required) break;
    }
  }
  if (time > 0) {
    for (auto& [stream, order] : free_order_) {
      while (!order.empty()) {
        const BlockId id = order.begin()->second;
        if (!free_event_complete(id)) break;
        garbage += blocks_[id].size;
        delete_stitched(id);
      }
    }
  }
  return garbage;
}

// --- frees and events ---------------------------------------------------------------------------------------

void GMLake::record_free_event(BlockId id) {
  if (free_events_.size() <= id) free_events_.resize(id + 1);
  if (!free_events_[id]) {
    auto event = memory_.acquire_event();
    if (!event) return;
    free_events_[id] = *event;
  }
  // Without a recorded event the GC of a stitched range would lack its proof: wait for the stream instead.
  if (!driver_.record_event(*free_events_[id], blocks_[id].stream))
    (void)driver_.synchronize_stream(blocks_[id].stream);
}

void GMLake::release_free_event(BlockId id) {
  if (id < free_events_.size() && free_events_[id]) {
    memory_.release_event(*free_events_[id]);
    free_events_[id].reset();
  }
}

void GMLake::return_block(BlockId id, bool direct) {
  if (direct) record_free_event(id);
  switch (blocks_[id].kind) {
    case stitched:
      release_stitched(id);
      break;
    case original:
      mark_block_chunks(id, false);
      free_block(id);
      break;
    default:
      free_block(id);
      break;
  }
}

void GMLake::on_merge(BlockId dst, BlockId src) {
  if (src < free_events_.size() && free_events_[src]) {
    if (dst >= free_events_.size()) free_events_.resize(dst + 1);
    if (!free_events_[dst]) {
      free_events_[dst] = free_events_[src];
      free_events_[src].reset();
    } else {
      release_free_event(src);
    }
  }
  const Block& block = blocks_[src];
  if (block.kind == original && chunks_[block.segment].head == src) chunks_[block.segment].head = dst;
}

void GMLake::release_model_memory() {
  std::vector<BlockId> ids;
  ids.reserve(stitches_.size());
  for (const auto& [id, st] : stitches_) ids.push_back(id);
  for (BlockId id : ids) delete_stitched(id);
  for (std::size_t id = 0; id < free_events_.size(); ++id) release_free_event(static_cast<BlockId>(id));
}

}  // namespace

Result<std::unique_ptr<DeviceAllocator>> make_gmlake_model(Driver& driver, const BaselineOptions& options) {
  return std::unique_ptr<DeviceAllocator>(std::make_unique<GMLake>(driver, options));
}

}  // namespace tessera::baselines
