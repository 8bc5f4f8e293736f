// The shared blocks the allocator holds (bookkeeping, layer 2): blocks built over slivers
// (sliver_sharing.cpp), each in a virtual range of its own, in the order they were built, and found from
// their block in O(1) by its address (a shared block's address is its own: no arena holds it).
#pragma once

#include <algorithm>
#include <memory>
#include <unordered_map>
#include <vector>

#include "core/shared_block.hpp"

namespace tessera::core {

class SharedBlocks {
 public:
  using List = std::vector<std::unique_ptr<SharedBlock>>;

  // Keeps `shared`, whose block's address is set and no other shared block's.
  SharedBlock& add(std::unique_ptr<SharedBlock> shared) {
    SharedBlock& kept = *blocks_.emplace_back(std::move(shared));
    by_address_.emplace(kept.block.address, &kept);
    return kept;
  }
  // The shared block whose block is `block`; null for a block of an arena.
  SharedBlock* of(const Block* block) noexcept {
    const auto found = by_address_.find(block->address);
    return found != by_address_.end() && &found->second->block == block ? found->second : nullptr;
  }
  const SharedBlock* of(const Block* block) const noexcept { return const_cast<SharedBlocks*>(this)->of(block); }
  // Forgets the shared block of `block`; the others keep their order.
  void remove(const Block* block) {
    if (of(block) == nullptr) return;
    by_address_.erase(block->address);
    std::erase_if(blocks_, [&](const auto& candidate) { return &candidate->block == block; });
  }

  List::const_iterator begin() const noexcept { return blocks_.begin(); }
  List::const_iterator end() const noexcept { return blocks_.end(); }
  bool empty() const noexcept { return blocks_.empty(); }
  std::size_t size() const noexcept { return blocks_.size(); }

 private:
  List blocks_;  // in the order built
  std::unordered_map<Address, SharedBlock*> by_address_;
};

}  // namespace tessera::core
