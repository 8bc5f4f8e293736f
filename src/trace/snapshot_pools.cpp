#include "trace/snapshot_pools.hpp"

#include <fmt/format.h>

#include <iterator>

namespace tessera::trace_detail {

std::optional<std::string> SnapshotPools::add_segment(Address address, Bytes size, PoolId pool, std::size_t segment) {
  if (pool == PoolId{} || size == 0) return {};
  const Address end = address + size < address ? ~Address{0} : address + size;
  // The pooled segment before this one may reach into it; the one after may start inside it.
  auto after = segments_.lower_bound(address);
  if (after != segments_.end() && after->first < end) {
    return fmt::format("overlaps segments[{}] of pool ({}, {})", after->second.segment, pools_[after->second.pool].id.first,
                       pools_[after->second.pool].id.second);
  }
  if (after != segments_.begin()) {
    const auto before = std::prev(after);
    if (before->second.end > address) {
      return fmt::format("overlaps segments[{}] of pool ({}, {})", before->second.segment,
                         pools_[before->second.pool].id.first, pools_[before->second.pool].id.second);
    }
  }
  const auto [known, inserted] = pool_index_.try_emplace(pool, static_cast<std::uint32_t>(pools_.size()));
  if (inserted) pools_.push_back(TracePool{pool, pool.first == 0 ? PoolKind::plain : PoolKind::graph});
  segments_.emplace(address, Segment{end, known->second, segment, std::nullopt});
  return {};
}

void SnapshotPools::segment_event(Address address, std::size_t entry) {
  if (const auto found = segments_.find(address); found != segments_.end()) found->second.since = entry;
}

std::optional<std::uint32_t> SnapshotPools::pool_of(Address address, std::size_t entry) const {
  auto after = segments_.upper_bound(address);
  if (after == segments_.begin()) return {};
  const Segment& segment = std::prev(after)->second;
  if (address >= segment.end) return {};
  if (segment.since && entry <= *segment.since) return {};
  return segment.pool;
}

}  // namespace tessera::trace_detail
