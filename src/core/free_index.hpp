// Placement (layer 3): the free blocks of one arena, ordered by size then address, so that the best fit
// — the smallest block that holds the request, the lowest address among equals (the highest, in an index
// built with highest_first) — is one lookup. Pure host code: it never calls a driver. Intrusive: inserting
// and erasing allocate nothing.
#pragma once

#include <boost/intrusive/set.hpp>

#include "core/block.hpp"

namespace tessera::core {

class FreeIndex {
 public:
  explicit FreeIndex(bool highest_first = false)
      : blocks_(BySizeThenAddress{highest_first}), highest_first_(highest_first) {}
  FreeIndex(const FreeIndex&) = delete;
  FreeIndex& operator=(const FreeIndex&) = delete;
  ~FreeIndex() { blocks_.clear(); }

  void insert(Block* block) { blocks_.insert(*block); }
  void erase(Block* block) { blocks_.erase(blocks_.iterator_to(*block)); }
  static bool contains(const Block* block) { return block->free_hook.is_linked(); }
  bool empty() const noexcept { return blocks_.empty(); }

  // The smallest free block of at least `size` bytes, the lowest (highest) address first; null when none.
  Block* best_fit(Bytes size) const {
    auto found = blocks_.lower_bound(Key{size, highest_first_ ? ~Address{0} : 0}, KeyOrder{highest_first_});
    return found == blocks_.end() ? nullptr : const_cast<Block*>(&*found);
  }

  // The free blocks of at least `size` bytes in the index's order, from the best fit on, while `visit`
  // answers true.
  template <class Visit>
  void visit_fits(Bytes size, Visit&& visit) const {
    for (auto it = blocks_.lower_bound(Key{size, highest_first_ ? ~Address{0} : 0}, KeyOrder{highest_first_});
         it != blocks_.end(); ++it) {
      if (!visit(const_cast<Block*>(&*it))) return;
    }
  }

  template <class Visit>
  void visit_all(Visit&& visit) const {
    for (const Block& block : blocks_) visit(&block);
  }

 private:
  struct Key {
    Bytes size;
    Address address;
  };
  struct BySizeThenAddress {
    bool highest_first = false;
    bool operator()(const Block& left, const Block& right) const noexcept {
      if (left.size != right.size) return left.size < right.size;
      return highest_first ? left.address > right.address : left.address < right.address;
    }
  };
  struct KeyOrder {
    bool highest_first = false;
    bool before(Bytes left_size, Address left_address, Bytes right_size, Address right_address) const noexcept {
      if (left_size != right_size) return left_size < right_size;
      return highest_first ? left_address > right_address : left_address < right_address;
    }
    bool operator()(const Block& block, const Key& key) const noexcept {
      return before(block.size, block.address, key.size, key.address);
    }
    bool operator()(const Key& key, const Block& block) const noexcept {
      return before(key.size, key.address, block.size, block.address);
    }
  };
  using Hook = boost::intrusive::member_hook<Block, decltype(Block::free_hook), &Block::free_hook>;
  // No size counter: nothing asks for it, and every carve and merge would update it.
  boost::intrusive::set<Block, Hook, boost::intrusive::compare<BySizeThenAddress>,
                        boost::intrusive::constant_time_size<false>>
      blocks_;
  bool highest_first_;
};

}  // namespace tessera::core
