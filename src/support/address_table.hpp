// Live blocks by address: an open-addressing hash table (linear probing, deletion by backward shift), so
// that allocate and free find and record a block without a host allocation. Grows at 50% load. Fibonacci hashing.
// Tessera's allocator and the PyTorch models keep their live blocks in it. Keys are block addresses: 512-byte
// aligned, never ~0 (the marker of an empty slot).
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/types.hpp"

namespace tessera::support {

template <class Value>
class AddressTable {
 public:
  AddressTable() : slots_(64) {}

  std::size_t size() const noexcept { return count_; }

  static constexpr std::size_t npos = ~std::size_t{0};

  // The slot that holds `key`, or npos: a free looks its block up once and erases by slot.
  std::size_t slot_of(Address key) const noexcept {
    if (key == empty) return npos;  // the marker of an empty slot is never a block
    for (std::size_t index = home(key);; index = (index + 1) & mask()) {
      const Slot& slot = slots_[index];
      if (slot.key == key) return index;
      if (slot.key == empty) return npos;
    }
  }
  Value value_at(std::size_t slot) const noexcept { return slots_[slot].value; }

  const Value* find(Address key) const {
    const std::size_t slot = slot_of(key);
    return slot == npos ? nullptr : &slots_[slot].value;
  }

  // Inserts a key that is not present.
  void insert(Address key, Value value) {
    if (2 * (count_ + 1) > mask_ + 1) grow();
    std::size_t index = home(key);
    while (slots_[index].key != empty) index = (index + 1) & mask();
    slots_[index] = Slot{key, value};
    ++count_;
  }

  bool erase(Address key) {
    const std::size_t slot = slot_of(key);
    if (slot == npos) return false;
    erase_slot(slot);
    return true;
  }

  void erase_slot(std::size_t hole) {
    // Shift back the entries after it whose home lies at or before the hole, so probes stay unbroken.
    for (std::size_t next = (hole + 1) & mask(); slots_[next].key != empty; next = (next + 1) & mask()) {
      const std::size_t wanted = home(slots_[next].key);
      const bool between = hole <= next ? (wanted > hole && wanted <= next) : (wanted > hole || wanted <= next);
      if (between) continue;
      slots_[hole] = slots_[next];
      hole = next;
    }
    slots_[hole].key = empty;
    --count_;
  }

 private:
  static constexpr Address empty = ~Address{0};  // never a block address: blocks are 512-byte aligned
  struct Slot {
    Address key = empty;
    Value value{};
  };

  std::size_t mask() const noexcept { return mask_; }
  // Fibonacci hashing: the top bits of the product, which every bit of the key reaches (blocks are
  // 512-byte aligned: those bits are dropped first).
  std::size_t home(Address key) const noexcept {
    Address bits = key >> 9;
    bits ^= bits >> 19;  // blocks of hundreds of MiB differ only in high bits: fold them down before the product
    return static_cast<std::size_t>(bits * 0x9e3779b97f4a7c15ull >> shift_);
  }

  void grow() {
    std::vector<Slot> old(slots_.size() * 2);
    old.swap(slots_);
    mask_ = slots_.size() - 1;
    shift_ -= 1;
    count_ = 0;
    for (const Slot& slot : old) {
      if (slot.key != empty) insert(slot.key, slot.value);
    }
  }

  std::vector<Slot> slots_;
  std::size_t mask_ = 63;    // slots_.size() - 1, kept: the vector would divide its byte length at every probe
  unsigned shift_ = 64 - 6;  // 64 - log2(slots)
  std::size_t count_ = 0;
};

}  // namespace tessera::support
