// A block: a contiguous virtual range of one region, live (handed to a caller) or free in the cache.
// Blocks of a region tile it and are linked in address order, so that a freed block merges with its
// free neighbours in O(1). A free block also sits in its placement's free index through an intrusive hook:
// no host allocation on the fast path.
#pragma once

#include <boost/intrusive/list.hpp>
#include <boost/intrusive/list_hook.hpp>
#include <boost/intrusive/set_hook.hpp>
#include <cstdint>

#include "tessera/tags.hpp"
#include "tessera/types.hpp"

namespace tessera::core {

class Arena;

struct Block {
  Address address = 0;
  Bytes size = 0;
  Bytes requested = 0;  // what the caller asked for; 0 while free
  Block* previous = nullptr;
  Block* next = nullptr;
  Arena* arena = nullptr;
  std::uint32_t region = 0;
  bool live = false;
  bool pending = false;        // freed by the caller, waiting for events before it may be reused
  // Live, but not the caller's: free bytes at the edge of a mapped granule, lent to a block built on the
  // out-of-memory ladder whose own first or last slot maps the same granule (sliver_sharing.cpp).
  bool lent = false;
  // What a pause does with its contents: the open tag's choice when it was handed out, for its life (tags.hpp).
  OnPause on_pause = OnPause::discard;
  std::uint64_t freed_at = 0;  // the allocator's clock at the latest free that formed this block
  boost::intrusive::set_member_hook<boost::intrusive::link_mode<boost::intrusive::safe_link>> free_hook;
  // In the allocator's reclaim list while free and possibly holding idle pages, oldest freed first.
  boost::intrusive::list_member_hook<boost::intrusive::link_mode<boost::intrusive::safe_link>> reclaim_hook;

  Address end() const noexcept { return address + size; }
  bool is_free() const noexcept { return !live && !pending; }
};

// No size counter: nothing asks for the size, and the fast path would update it at every carve and merge.
using ReclaimList = boost::intrusive::list<
    Block, boost::intrusive::member_hook<Block, decltype(Block::reclaim_hook), &Block::reclaim_hook>,
    boost::intrusive::constant_time_size<false>>;

}  // namespace tessera::core
