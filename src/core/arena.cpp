#include "core/arena.hpp"

namespace tessera::core {

Block* Arena::new_block() {
  if (!spare_.empty()) {
    Block* block = spare_.back();
    spare_.pop_back();
    *block = Block{};
    return block;
  }
  return &storage_.emplace_back();
}

Block* Arena::add_region(Address base, Bytes span) {
  Region region;
  region.base = base;
  region.span = span;
  Block* block = new_block();
  block->address = base;
  block->size = span;
  block->arena = this;
  block->region = static_cast<std::uint32_t>(regions_.size());
  region.first_block = block;
  region.last_block = block;
  regions_.push_back(std::move(region));
  return block;
}

SlotRange Arena::touched_slots(const Block& block) const {
  const Region& region = regions_[block.region];
  const std::size_t first = slot_of(region, block.address);
  const std::size_t last = slot_of(region, block.end() - 1);
  return {first, last - first + 1};
}

SlotRange Arena::inner_slots(const Block& block) const {
  const Region& region = regions_[block.region];
  const std::size_t first = (block.address - region.base + granule_ - 1) >> granule_shift_;
  const std::size_t end = slot_of(region, block.end());
  return end > first ? SlotRange{first, end - first} : SlotRange{};
}

bool Arena::holds_whole_page(const Block& block) const {
  const Region& region = region_of(block);
  const SlotRange inner = region.within_table(inner_slots(block));
  for (std::size_t slot = inner.first; slot < inner.end(); ++slot) {
    const std::uint32_t size = region.page_granules_at(slot);
    if (size > 0 && slot + size <= inner.end()) return true;
  }
  return false;
}

}  // namespace tessera::core
