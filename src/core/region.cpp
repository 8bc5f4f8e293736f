#include "core/region.hpp"

#include <cassert>

namespace tessera::core {

void Region::cover(std::size_t first, std::size_t end) {
  if (chunks_.empty()) {
    table_low_ = first / 64 * 64;
    const std::size_t size = (end - table_low_ + 63) / 64 * 64;
    chunks_.assign(size, ChunkId{0});
    page_granules_.assign(size, 0);
    page_offsets_.assign(size, 0);
    accessible_bits_.assign(size / 64, 0);
    return;
  }
  if (first < table_low_) {
    const std::size_t reach = std::min(table_low_, std::max(table_low_ - first, chunks_.size()));
    const std::size_t low = (table_low_ - reach) / 64 * 64;
    const std::size_t added = table_low_ - low;
    chunks_.insert(chunks_.begin(), added, ChunkId{0});
    page_granules_.insert(page_granules_.begin(), added, 0);
    page_offsets_.insert(page_offsets_.begin(), added, 0);
    accessible_bits_.insert(accessible_bits_.begin(), added / 64, 0);
    table_low_ = low;
  }
  if (end > table_end()) {
    const std::size_t size = (std::max(end - table_low_, chunks_.size() * 2) + 63) / 64 * 64;
    chunks_.resize(size, ChunkId{0});
    page_granules_.resize(size, 0);
    page_offsets_.resize(size, 0);
    accessible_bits_.resize(size / 64, 0);
  }
}

void Region::set_page(std::size_t head, Page page) {
  cover(head, head + page.granules);
  const std::size_t first = head - table_low_;
  for (std::size_t index = first; index < first + page.granules; ++index) {
    assert(chunks_[index] == ChunkId{0});
    chunks_[index] = page.chunk;
    accessible_bits_[index / 64] |= std::uint64_t{1} << (index % 64);
  }
  page_granules_[first] = page.granules;
  page_offsets_[first] = page.offset;
  mapped_ += page.granules;
}

void Region::set_accessible(std::size_t head, bool accessible) {
  const std::size_t first = head - table_low_;
  for (std::size_t index = first; index < first + page_granules_[first]; ++index) {
    const std::uint64_t bit = std::uint64_t{1} << (index % 64);
    accessible_bits_[index / 64] = accessible ? accessible_bits_[index / 64] | bit : accessible_bits_[index / 64] & ~bit;
  }
}

Page Region::clear_page(std::size_t head) {
  const std::size_t first = head - table_low_;
  const Page page{chunks_[first], page_granules_[first], page_offsets_[first]};
  assert(page.granules > 0);
  for (std::size_t index = first; index < first + page.granules; ++index) {
    chunks_[index] = ChunkId{0};
    accessible_bits_[index / 64] &= ~(std::uint64_t{1} << (index % 64));
  }
  page_granules_[first] = 0;
  mapped_ -= page.granules;
  return page;
}

}  // namespace tessera::core
