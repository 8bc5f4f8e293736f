// The budget (policy, layer 4): how much physical memory the allocator may hold — the limit, a whole
// number of granules, the device's capacity until set_memory_fraction lowers it — and the room left
// under it. The one reader of the limit: every "may I create a chunk" and every figure in an
// out-of-memory message asks here. What is held is the mapper's count (chunks created, mapped or pooled).
#pragma once

#include <algorithm>
#include <cstddef>

#include "core/mapper.hpp"

namespace tessera::core {

class Budget {
 public:
  explicit Budget(const Mapper& mapper)
      : mapper_(mapper), granule_(mapper.granule()), limit_(mapper.capacity() / granule_ * granule_) {}

  Bytes limit() const noexcept { return limit_; }
  // The limit at `fraction` (0 < fraction <= 1, checked by the caller) of the capacity, at least a granule.
  // Live blocks may already hold more, as in PyTorch: the limit then only stops growth.
  void set_fraction(double fraction) noexcept {
    const auto allowed = static_cast<Bytes>(static_cast<double>(mapper_.capacity()) * fraction);
    limit_ = std::max(granule_, allowed / granule_ * granule_);
  }

  // Bytes that may still be created under the limit.
  Bytes free_bytes() const noexcept { return limit_ - std::min(limit_, mapper_.held()); }
  // Granules that may still be created under the limit.
  std::size_t room() const noexcept { return free_bytes() / granule_; }
  // Granules that may be created before half the limit is held: growth past a block (page_max above a
  // granule) spends only this, so that near the limit no page is left pinned by a neighbour.
  std::size_t room_below_half() const noexcept {
    const Bytes half = limit_ / 2;
    const Bytes held = mapper_.held();
    return half > held ? (half - held) / granule_ : 0;
  }
  bool above_half() const noexcept { return mapper_.held() > limit_ / 2; }
  // `threshold` (0, 1) of the limit: garbage collection's target, the bound of a handle per block.
  Bytes share(double threshold) const noexcept {
    return static_cast<Bytes>(static_cast<double>(limit_) * threshold);
  }

 private:
  const Mapper& mapper_;
  Bytes granule_;
  Bytes limit_;
};

}  // namespace tessera::core
