// A block: a contiguous virtual range of one region, live (handed to a caller) or free in the cache.
// Blocks of a region tile it and are linked in address order, so that a freed block merges with its
// free neighbours in O(1).
#pragma once

#include <cstdint>

#include "tessera/types.hpp"

namespace tessera::core {

struct Block {
  Address address = 0;
  Bytes size = 0;
  Bytes requested = 0;  // what the caller asked for; 0 while free
  Block* previous = nullptr;
  Block* next = nullptr;
  std::uint32_t region = 0;
  bool live = false;
  bool pending = false;        // freed by the caller, waiting for events before it may be reused
  std::uint64_t freed_at = 0;  // the allocator's clock at the latest free that formed this block

  Address end() const noexcept { return address + size; }
};

}  // namespace tessera::core
