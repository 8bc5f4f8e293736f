// The blocks of the baseline models and the ordered sets they are found in, shaped like PyTorch's caching
// allocator: a block is a range of one segment, linked to its neighbours in that segment; free blocks sit in
// a pool ordered by (stream, size, address) for best fit. Blocks live in a store and are named by index, so
// that a split or a merge allocates nothing but a set node (from a pooled memory resource).
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <memory_resource>
#include <set>
#include <vector>

#include "tessera/types.hpp"

namespace tessera::baselines {

using BlockId = std::uint32_t;
inline constexpr BlockId no_block = std::numeric_limits<BlockId>::max();

enum class PoolKind : std::uint8_t { small, large };

inline std::uintptr_t stream_key(StreamId stream) noexcept { return static_cast<std::uintptr_t>(stream); }

// A free block as the pools order it. The id rides along and takes no part in the order.
struct PoolKey {
  std::uintptr_t stream = 0;
  Bytes size = 0;
  Address address = 0;
  BlockId id = no_block;
};

// PyTorch's BlockComparatorSize: best fit is the first key not below (stream, size, 0).
struct BySize {
  bool operator()(const PoolKey& a, const PoolKey& b) const noexcept {
    if (a.stream != b.stream) return a.stream < b.stream;
    if (a.size != b.size) return a.size < b.size;
    return a.address < b.address;
  }
};

// PyTorch's BlockComparatorAddress, for the unmapped ranges of expandable segments.
struct ByAddress {
  bool operator()(const PoolKey& a, const PoolKey& b) const noexcept {
    if (a.stream != b.stream) return a.stream < b.stream;
    return a.address < b.address;
  }
};

using SizeOrderedSet = std::pmr::set<PoolKey, BySize>;
using AddressOrderedSet = std::pmr::set<PoolKey, ByAddress>;

struct Block {
  Address address = 0;
  Bytes size = 0;
  Bytes requested = 0;  // what the caller asked for (PyTorch's requested_size)
  Bytes charged = 0;    // what allocated_bytes counts for this block while it is allocated
  StreamId stream{};
  BlockId prev = no_block;  // neighbours in the same segment
  BlockId next = no_block;
  std::uint32_t segment = 0;  // index into the owning model's segment table
  std::uint32_t owner = 0;    // the private pool the block belongs to (1-based index), 0: the shared cache
  PoolKind pool = PoolKind::large;
  bool allocated = false;
  bool mapped = true;                   // false only for the unmapped ranges of expandable segments
  std::uint8_t kind = 0;                // model-specific (GMLake: plain, original or stitched)
  std::uint32_t event_count = 0;        // events still pending before the block may be reused
  std::int64_t gc_count_base = 0;       // the pool's search count when the block entered it (PyTorch's GC age)
  std::vector<StreamId> stream_uses;    // streams added by record_stream
  SizeOrderedSet::iterator position{};  // where the block sits in its pool while free and mapped

  bool is_split() const noexcept { return prev != no_block || next != no_block; }
};

// Blocks by index, in fixed-size chunks: references stay valid while blocks are added, and an index costs
// two loads (a deque's costs a division).
class BlockStore {
 public:
  BlockId create() {
    if (!free_.empty()) {
      const BlockId id = free_.back();
      free_.pop_back();
      return id;
    }
    if (count_ == chunks_.size() * kChunk) chunks_.push_back(std::make_unique<Block[]>(kChunk));
    return static_cast<BlockId>(count_++);
  }

  void destroy(BlockId id) {
    Block& block = (*this)[id];
    std::vector<StreamId> uses = std::move(block.stream_uses);
    uses.clear();
    block = Block{};
    block.stream_uses = std::move(uses);  // keeps its capacity for the next block in this slot
    free_.push_back(id);
  }

  Block& operator[](BlockId id) noexcept { return chunks_[id >> kChunkBits][id & (kChunk - 1)]; }
  const Block& operator[](BlockId id) const noexcept { return chunks_[id >> kChunkBits][id & (kChunk - 1)]; }

 private:
  static constexpr unsigned kChunkBits = 10;
  static constexpr std::size_t kChunk = std::size_t{1} << kChunkBits;

  std::vector<std::unique_ptr<Block[]>> chunks_;
  std::size_t count_ = 0;
  std::vector<BlockId> free_;
};

inline PoolKey key_of(const Block& block, BlockId id) noexcept {
  return {stream_key(block.stream), block.size, block.address, id};
}

// The free blocks one request may be served from: small (≤ 1 MiB) or large, all streams in one set; the
// shared cache's, or a private pool's (PyTorch's BlockPool with its owner_PrivatePool).
struct BlockPool {
  BlockPool(bool small, std::pmr::memory_resource* resource, std::uint32_t owner_pool = 0)
      : blocks(resource), unmapped(resource), is_small(small), owner(owner_pool) {}

  SizeOrderedSet blocks;       // free, mapped blocks
  AddressOrderedSet unmapped;  // expandable segments only: ranges without pages
  bool is_small;
  std::uint32_t owner;                          // as Block::owner: 0 for the shared cache
  std::int64_t get_free_blocks_call_count = 0;  // PyTorch's clock for the GC's block ages
};

}  // namespace tessera::baselines
