// The live blocks by address: an open-addressing hash table (linear probing, backward-shift deletion), so
// that the lookup of every free touches one or two cache lines and allocates nothing. Address 0 marks an
// empty slot; no driver hands out address 0.
#pragma once

#include <bit>
#include <cstdint>
#include <vector>

#include "baselines/blocks.hpp"

namespace tessera::baselines {

class AddressMap {
 public:
  AddressMap() : slots_(64) {}

  std::size_t size() const noexcept { return size_; }

  // The block at `address`, or no_block.
  BlockId find(Address address) const noexcept {
    for (std::size_t i = home(address);; i = (i + 1) & mask()) {
      const Slot& slot = slots_[i];
      if (slot.address == address) return slot.block;
      if (slot.address == 0) return no_block;
    }
  }

  void insert(Address address, BlockId block) {
    if ((size_ + 1) * 4 > slots_.size() * 3) grow();
    place(address, block);
    ++size_;
  }

  // Removes `address`; true when it was there.
  bool erase(Address address) noexcept {
    std::size_t i = home(address);
    while (slots_[i].address != address) {
      if (slots_[i].address == 0) return false;
      i = (i + 1) & mask();
    }
    // Shift later members of the probe run back, so that no tombstone is needed.
    for (std::size_t j = (i + 1) & mask(); slots_[j].address != 0; j = (j + 1) & mask()) {
      const std::size_t wanted = home(slots_[j].address);
      const bool stays = i <= j ? (i < wanted && wanted <= j) : (i < wanted || wanted <= j);
      if (stays) continue;
      slots_[i] = slots_[j];
      i = j;
    }
    slots_[i] = Slot{};
    --size_;
    return true;
  }

 private:
  struct Slot {
    Address address = 0;
    BlockId block = no_block;
  };

  std::size_t mask() const noexcept { return slots_.size() - 1; }
  std::size_t home(Address address) const noexcept {
    // Blocks are 512-byte aligned: drop those bits, then mix (Fibonacci hashing).
    const auto shift = static_cast<unsigned>(64 - std::countr_zero(slots_.size()));
    return static_cast<std::size_t>(((address >> 9) * 0x9E3779B97F4A7C15ull) >> shift);
  }
  void place(Address address, BlockId block) noexcept {
    std::size_t i = home(address);
    while (slots_[i].address != 0) i = (i + 1) & mask();
    slots_[i] = Slot{address, block};
  }
  void grow() {
    std::vector<Slot> old(slots_.size() * 2);
    old.swap(slots_);
    for (const Slot& slot : old) {
      if (slot.address != 0) place(slot.address, slot.block);
    }
  }

  std::vector<Slot> slots_;
  std::size_t size_ = 0;
};

}  // namespace tessera::baselines
