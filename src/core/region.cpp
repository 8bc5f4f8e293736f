#include "core/region.hpp"

#include <cassert>

namespace tessera::core {

void Region::cover(std::size_t first, std::size_t end) {
  if (chunks.empty()) {
    table_low = first / 64 * 64;
    const std::size_t size = (end - table_low + 63) / 64 * 64;
    chunks.assign(size, PageId{0});
    page_granules.assign(size, 0);
    page_offsets.assign(size, 0);
    accessible_bits.assign(size / 64, 0);
    return;
  }
  if (first < table_low) {
    const std::size_t reach = std::min(table_low, std::max(table_low - first, chunks.size()));
    const std::size_t low = (table_low - reach) / 64 * 64;
    const std::size_t added = table_low - low;
    chunks.insert(chunks.begin(), added, PageId{0});
    page_granules.insert(page_granules.begin(), added, 0);
    page_offsets.insert(page_offsets.begin(), added, 0);
    accessible_bits.insert(accessible_bits.begin(), added / 64, 0);
    table_low = low;
  }
  if (end > table_end()) {
    const std::size_t size = (std::max(end - table_low, chunks.size() * 2) + 63) / 64 * 64;
    chunks.resize(size, PageId{0});
    page_granules.resize(size, 0);
    page_offsets.resize(size, 0);
    accessible_bits.resize(size / 64, 0);
  }
}

void Region::set_page(std::size_t head, Page page) {
  cover(head, head + page.granules);
  const std::size_t first = head - table_low;
  for (std::size_t index = first; index < first + page.granules; ++index) {
    assert(chunks[index] == PageId{0});
    chunks[index] = page.chunk;
    accessible_bits[index / 64] |= std::uint64_t{1} << (index % 64);
  }
  page_granules[first] = page.granules;
  page_offsets[first] = page.offset;
  mapped += page.granules;
}

void Region::set_accessible(std::size_t head, bool accessible) {
  const std::size_t first = head - table_low;
  for (std::size_t index = first; index < first + page_granules[first]; ++index) {
    const std::uint64_t bit = std::uint64_t{1} << (index % 64);
    accessible_bits[index / 64] = accessible ? accessible_bits[index / 64] | bit : accessible_bits[index / 64] & ~bit;
  }
}

Page Region::clear_page(std::size_t head) {
  const std::size_t first = head - table_low;
  const Page page{chunks[first], page_granules[first], page_offsets[first]};
  assert(page.granules > 0);
  for (std::size_t index = first; index < first + page.granules; ++index) {
    chunks[index] = PageId{0};
    accessible_bits[index / 64] &= ~(std::uint64_t{1} << (index % 64));
  }
  page_granules[first] = 0;
  mapped -= page.granules;
  return page;
}

}  // namespace tessera::core
