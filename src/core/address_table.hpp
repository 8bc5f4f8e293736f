// Live blocks by address: an open-addressing hash table (linear probing, deletion by backward shift), so
// that allocate and free find and record a block without a host allocation. Grows at 50% load.
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/types.hpp"

namespace tessera::core {

template <class Value>
class AddressTable {
 public:
  AddressTable() : slots_(64) {}

  std::size_t size() const noexcept { return count_; }

  const Value* find(Address key) const {
    for (std::size_t index = home(key);; index = (index + 1) & mask()) {
      const Slot& slot = slots_[index];
      if (slot.key == empty) return nullptr;
      if (slot.key == key) return &slot.value;
    }
  }

  // Inserts a key that is not present.
  void insert(Address key, Value value) {
    if (2 * (count_ + 1) > slots_.size()) grow();
    std::size_t index = home(key);
    while (slots_[index].key != empty) index = (index + 1) & mask();
    slots_[index] = Slot{key, value};
    ++count_;
  }

  bool erase(Address key) {
    std::size_t index = home(key);
    for (;; index = (index + 1) & mask()) {
      if (slots_[index].key == empty) return false;
      if (slots_[index].key == key) break;
    }
    // Shift back the entries after it whose home lies at or before the hole, so probes stay unbroken.
    std::size_t hole = index;
    for (std::size_t next = (hole + 1) & mask(); slots_[next].key != empty; next = (next + 1) & mask()) {
      const std::size_t wanted = home(slots_[next].key);
      const bool between = hole <= next ? (wanted > hole && wanted <= next) : (wanted > hole || wanted <= next);
      if (between) continue;
      slots_[hole] = slots_[next];
      hole = next;
    }
    slots_[hole].key = empty;
    --count_;
    return true;
  }

 private:
  static constexpr Address empty = ~Address{0};  // never a block address: blocks are 512-byte aligned
  struct Slot {
    Address key = empty;
    Value value{};
  };

  std::size_t mask() const noexcept { return slots_.size() - 1; }
  std::size_t home(Address key) const noexcept {
    return static_cast<std::size_t>((key >> 9) * 0x9e3779b97f4a7c15ull >> 20) & mask();
  }

  void grow() {
    std::vector<Slot> old(slots_.size() * 2);
    old.swap(slots_);
    count_ = 0;
    for (const Slot& slot : old) {
      if (slot.key != empty) insert(slot.key, slot.value);
    }
  }

  std::vector<Slot> slots_;
  std::size_t count_ = 0;
};

}  // namespace tessera::core
