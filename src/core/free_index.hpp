// Placement (layer 3): the free blocks of one arena, ordered by size then address, so that the best fit
// — the smallest block that holds the request, the lowest address among equals — is one lookup. Pure
// host code: it never calls a driver. Intrusive: inserting and erasing allocate nothing.
#pragma once

#include <boost/intrusive/set.hpp>

#include "core/block.hpp"

namespace tessera::core {

class FreeIndex {
 public:
  FreeIndex() = default;
  FreeIndex(const FreeIndex&) = delete;
  FreeIndex& operator=(const FreeIndex&) = delete;
  ~FreeIndex() { blocks_.clear(); }

  void insert(Block* block) { blocks_.insert(*block); }
  void erase(Block* block) { blocks_.erase(blocks_.iterator_to(*block)); }
  static bool contains(const Block* block) { return block->free_hook.is_linked(); }

  // The smallest free block of at least `size` bytes, lowest address first; null when none.
  Block* best_fit(Bytes size) const {
    auto found = blocks_.lower_bound(Key{size, 0}, KeyOrder{});
    return found == blocks_.end() ? nullptr : const_cast<Block*>(&*found);
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
    bool operator()(const Block& left, const Block& right) const noexcept {
      return left.size != right.size ? left.size < right.size : left.address < right.address;
    }
  };
  struct KeyOrder {
    bool operator()(const Block& block, const Key& key) const noexcept {
      return block.size != key.size ? block.size < key.size : block.address < key.address;
    }
    bool operator()(const Key& key, const Block& block) const noexcept {
      return key.size != block.size ? key.size < block.size : key.address < block.address;
    }
  };
  using Hook = boost::intrusive::member_hook<Block, decltype(Block::free_hook), &Block::free_hook>;
  // No size counter: nothing asks for it, and every carve and merge would update it.
  boost::intrusive::set<Block, Hook, boost::intrusive::compare<BySizeThenAddress>,
                        boost::intrusive::constant_time_size<false>>
      blocks_;
};

}  // namespace tessera::core
