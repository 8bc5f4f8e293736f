// Placement (layer 3): the free blocks of one arena, ordered by size then address, so that the best fit
// — the smallest block that holds the request, the lowest address among equals — is one lookup. Pure
// host code: it never calls a driver.
#pragma once

#include <set>

#include "core/block.hpp"

namespace tessera::core {

class FreeIndex {
 public:
  void insert(Block* block) { blocks_.insert(block); }
  void erase(Block* block) { blocks_.erase(block); }
  bool contains(Block* block) const { return blocks_.count(block) != 0; }
  std::size_t size() const noexcept { return blocks_.size(); }

  // The smallest free block of at least `size` bytes, lowest address first; null when none.
  Block* best_fit(Bytes size) const {
    Block probe;
    probe.size = size;
    probe.address = 0;
    auto found = blocks_.lower_bound(&probe);
    return found == blocks_.end() ? nullptr : *found;
  }

  // Free blocks from the best fit upwards, for policies that look past the first candidate.
  template <class Visit>
  void visit_from(Bytes size, Visit&& visit) const {
    Block probe;
    probe.size = size;
    for (auto it = blocks_.lower_bound(&probe); it != blocks_.end(); ++it) {
      if (!visit(*it)) return;
    }
  }

  template <class Visit>
  void visit_all(Visit&& visit) const {
    for (Block* block : blocks_) visit(block);
  }

 private:
  struct BySizeThenAddress {
    bool operator()(const Block* left, const Block* right) const noexcept {
      return left->size != right->size ? left->size < right->size : left->address < right->address;
    }
  };
  std::set<Block*, BySizeThenAddress> blocks_;
};

}  // namespace tessera::core
