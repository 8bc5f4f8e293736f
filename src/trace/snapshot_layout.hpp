// What a PyTorch snapshot file lays out, before it is pickled: segments tiled by blocks, and the segment
// entries of device_traces. Shared by the writer (pytorch_snapshot_writer.cpp) and the segment changes
// (snapshot_segments.cpp).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tessera/result.hpp"
#include "tessera/snapshot.hpp"

namespace tessera::trace_detail {

// Where the segment of pooled memory (SegmentChange::pooled) starts: above every address a process's virtual
// memory reaches (2^47 on x86-64, 2^48 on Arm), and below 2^53, so that MemoryViz's JavaScript numbers hold it
// exactly.
inline constexpr Address pool_segment_base = Address{1} << 52;

enum class BlockState : std::uint8_t { active_allocated, active_pending_free, inactive };

struct OutBlock {
  Address address = 0;
  Bytes size = 0;
  Bytes requested = 0;
  BlockState state = BlockState::inactive;
  std::uint32_t stack = 0;  // index into the stacks written (0: none)
};

struct OutSegment {
  Address address = 0;
  Bytes total_size = 0;
  std::uint64_t stream = 0;  // the platform's value
  bool small = false;
  std::vector<OutBlock> blocks;  // tiling [address, address + total_size) in order, as MemoryViz assumes
};

// One segment entry of device_traces, its address resolved (the pooled segment's included).
struct SegmentEntry {
  std::string_view action;  // segment_alloc, segment_free, segment_map, segment_unmap
  Address address = 0;
  Bytes size = 0;
  StreamId stream{};
  std::size_t before_event = 0;
};

// The changes as entries, in order; the pooled and unpooled bytes of each place between two trace events
// summed into one segment_map or segment_unmap of the pooled segment: a shrink before that place's other
// entries (pages leave the pool before they are mapped), a growth after them (they join it once unmapped), so
// that the entries never add up to more than was held.
// `pooled_before` is what was pooled before the first change. Errc::invalid_argument when the changes are not
// in the order of their events, one has no bytes, or more is unpooled than was pooled.
Result<std::vector<SegmentEntry>> segment_entries(const std::vector<SegmentChange>& changes, std::size_t event_count,
                                                  Bytes pooled_before);

// Bytes pooled less unpooled by the changes (negative: they took more out of the pool than they put in).
std::int64_t pooled_change(const std::vector<SegmentChange>& changes);

// A range of device memory held at the end of the changes.
struct HeldRange {
  Address address = 0;
  Bytes size = 0;
  StreamId stream{};
  bool segment = false;  // made by alloc (a segment of its own); else a run of mapped pages
};

// What changes that start from nothing leave: the ranges in address order (mapped runs side by side on one
// stream merged into one, as MemoryViz merges them) and the pooled bytes. Errc::invalid_argument naming the
// change when one maps over memory that is held, unmaps memory that is not mapped (or mapped on two streams),
// or frees a segment that was not made.
struct HeldMemory {
  std::vector<HeldRange> ranges;
  Bytes pooled = 0;
};
Result<HeldMemory> fold_segment_changes(const std::vector<SegmentChange>& changes);

// `whole` cut to the runs that are mapped: a segment per run that meets it, its blocks clipped to the run, the
// gaps between them inactive. A live block that does not lie wholly inside a run (a paused tag's) is left
// out, as MemoryViz can place no block outside a segment.
std::vector<OutSegment> cut_to_mapped(const OutSegment& whole, const std::vector<MappedRange>& runs);

// The pooled memory as one segment of its own: one inactive block.
OutSegment pooled_segment(Bytes pooled);

}  // namespace tessera::trace_detail
