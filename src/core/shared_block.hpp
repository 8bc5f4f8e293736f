// A shared block (bookkeeping): a block built over slivers on the out-of-memory ladder, in a virtual range
// of its own (sliver_sharing.cpp says when and why). Its mappings, in slot order: a granule lent by a home
// arena (not owned: the home slot maps it too, and a lent block there keeps the sliver's bytes), then pages
// of its own, then another lent granule.
#pragma once

#include <cstdint>
#include <vector>

#include "core/arena.hpp"
#include "core/block.hpp"
#include "core/page_pool.hpp"

namespace tessera::core {

struct SharedMapping {
  std::size_t slot;
  Page page;
  Arena* home = nullptr;  // a lent granule: its arena, and the lent block that holds the sliver there
  Block* lent = nullptr;
  bool mapped = false;

  bool is_sliver() const noexcept { return lent != nullptr; }
};

struct SharedBlock {
  Block block;  // arena null
  SizePool pool = SizePool::large;
  StreamId stream{};
  TagId tag = default_tag;
  Address base = 0;
  Bytes span = 0;
  std::vector<SharedMapping> mappings;
  bool reserved = true;  // its virtual range not yet released

  // The granules of its own pages mapped now: the slivers' granules are their home segments'.
  std::size_t own_mapped_granules() const noexcept {
    std::size_t granules = 0;
    for (const SharedMapping& mapping : mappings) granules += mapping.mapped && !mapping.is_sliver() ? mapping.page.granules : 0;
    return granules;
  }
};

}  // namespace tessera::core
