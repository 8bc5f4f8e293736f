// Pages created and not mapped now, ready for reuse (layer 2). A page is a whole number of granules; the
// pool keeps them by size so that a hole of n slots takes the largest page that fits in it.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "tessera/types.hpp"

namespace tessera::core {

struct Page {
  PageId id{};
  std::uint32_t granules = 0;
};

class PagePool {
 public:
  explicit PagePool(std::uint32_t largest_page) : by_size_(largest_page + 1) {}

  bool empty() const noexcept { return granules_ == 0; }
  std::size_t granules() const noexcept { return granules_; }

  void put(Page page) {
    by_size_[page.granules].push_back(page.id);
    granules_ += page.granules;
  }

  // The largest pooled page of at most `granules` granules.
  std::optional<Page> take_at_most(std::size_t granules) {
    for (std::size_t size = std::min(granules, by_size_.size() - 1); size > 0; --size) {
      if (by_size_[size].empty()) continue;
      const Page page{by_size_[size].back(), static_cast<std::uint32_t>(size)};
      by_size_[size].pop_back();
      granules_ -= size;
      return page;
    }
    return std::nullopt;
  }

  // Any pooled page, largest first: what goes back to the device first.
  std::optional<Page> take_any() { return take_at_most(by_size_.size() - 1); }

  template <class Visit>
  void visit(Visit&& visit) const {
    for (std::size_t size = 1; size < by_size_.size(); ++size) {
      for (PageId id : by_size_[size]) visit(Page{id, static_cast<std::uint32_t>(size)});
    }
  }

 private:
  std::vector<std::vector<PageId>> by_size_;  // index: granules
  std::size_t granules_ = 0;
};

}  // namespace tessera::core
