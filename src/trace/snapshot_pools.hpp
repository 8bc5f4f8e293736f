// Which private pool a PyTorch snapshot's allocation went to. PyTorch records no pool on a trace entry; a
// segment of the snapshot's end state names its pool (segment_pool_id), and every block of a segment is its
// pool's. So an allocation inside a segment of a private pool, made after the recording last made or freed a
// segment at that segment's address, went to that pool. One made before (the address may then have been
// another segment's), or inside a segment the recording made and freed, is the shared cache's: the snapshot
// keeps no pool for memory it no longer holds (docs/trace-format.md, "Private pools of a snapshot").
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "tessera/trace.hpp"

namespace tessera::trace_detail {

class SnapshotPools {
 public:
  // A segment of the end state in pool `pool` ((0, 0): the shared cache, ignored), covering [address, address
  // + size); `segment` is its index in the snapshot's list. Graph captures name pools (n, 0), MemPools (0, n):
  // the kind follows. The error, when it overlaps a pooled segment added before, names that one.
  std::optional<std::string> add_segment(Address address, Bytes size, PoolId pool, std::size_t segment);
  // Entry `entry` of the device's trace made or freed a segment at `address`.
  void segment_event(Address address, std::size_t entry);
  // The pool (an index into pools()) that entry `entry`'s allocation at `address` went to; none: the shared cache.
  std::optional<std::uint32_t> pool_of(Address address, std::size_t entry) const;

  const std::vector<TracePool>& pools() const noexcept { return pools_; }
  bool empty() const noexcept { return segments_.empty(); }

 private:
  struct Segment {
    Address end = 0;
    std::uint32_t pool = 0;            // index into pools_
    std::size_t segment = 0;           // index in the snapshot's list, for messages
    std::optional<std::size_t> since;  // the last entry that made or freed a segment here
  };
  std::map<Address, Segment> segments_;  // by start address
  std::vector<TracePool> pools_;
  std::map<PoolId, std::uint32_t> pool_index_;
};

}  // namespace tessera::trace_detail
