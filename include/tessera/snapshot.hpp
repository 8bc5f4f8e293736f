// What an allocator holds, as PyTorch's memory snapshot shows it (segments and their blocks), and the
// allocation history: values the allocator fills and the trace layer's writers (tessera/trace.hpp) write as
// PyTorch snapshot files. Below both, so that the allocator knows no file format.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/trace_model.hpp"
#include "tessera/types.hpp"

namespace tessera {

// Segments and blocks as PyTorch's snapshot names them: a segment is one reserved virtual region of a
// (stream, pool); its blocks tile it.
struct SnapshotBlock {
  Address address = 0;
  Bytes size = 0;
  Bytes requested = 0;
  enum class State : std::uint8_t { active_allocated, active_pending_free, inactive } state = State::inactive;
  Bytes mapped_bytes = 0;  // how much of the block has physical pages under it
  // Tessera: the block's bytes are lent to the shared block at this address (0: not lent). Such a block is
  // shown active_allocated: a sliver of a granule that the shared block's first or last slot maps too.
  Address lent_to = 0;
};

// A run of mapped virtual memory: pages side by side, each counted once (not a second mapping of a page that
// is mapped elsewhere too, such as a shared block's sliver).
struct MappedRange {
  Address address = 0;
  Bytes size = 0;

  bool operator==(const MappedRange&) const = default;
};

struct SnapshotSegment {
  Address address = 0;
  Bytes total_size = 0;  // virtual size of the region
  Bytes mapped_size = 0;
  StreamId stream{};
  SizePool pool = SizePool::large;
  std::vector<SnapshotBlock> blocks;
  // Tessera: the tag its blocks were allocated under, and whether it is paused (its pages given back).
  std::string tag = "default";
  bool paused = false;
  // Tessera: the mapped runs of the region in address order, each as long as it runs (mapped_size in all).
  std::vector<MappedRange> mapped{};
};

struct AllocatorSnapshot {
  std::vector<SnapshotSegment> segments;
  Bytes pooled_bytes = 0;  // pages held unmapped, ready for reuse
};

// What an allocator did to its device memory while a trace ran, in the words of PyTorch's trace entries:
//   alloc / free    a segment made and given back whole (cudaMalloc and cudaFree: PyTorch's native
//                   allocator, GMLake's chunked segments, a memory-saver handle);
//   map / unmap     physical pages mapped into, or unmapped from, a range that stays reserved (expandable
//                   segments, Tessera's regions); an unmap undoes exactly one earlier map or a part of it;
//   pooled / unpooled   physical memory held unmapped, ready for reuse, grows or shrinks (Tessera's page
//                   pool: pages created and not mapped yet, or unmapped and kept). It has no address; the
//                   snapshot shows it as one segment of its own (docs/trace-format.md).
// The bytes of alloc + map + pooled less free + unmap + unpooled are the reserved bytes the changes account
// for: a replay's, after every event.
struct SegmentChange {
  enum class Kind : std::uint8_t { alloc, free, map, unmap, pooled, unpooled };
  Kind kind = Kind::map;
  Address address = 0;  // none for pooled and unpooled
  Bytes size = 0;
  StreamId stream{};
  // The index of the trace event it comes before (trace.events.size(): after the last). Changes made while
  // an alloc was served come before it, those made while a free was served after it.
  std::size_t before_event = 0;

  bool operator==(const SegmentChange&) const = default;
};

// The allocation history (PyTorch's torch.cuda.memory._record_memory_history): the newest allocs and frees,
// with the addresses they had, and the allocator's segments at the moment it was taken — what
// write_history_snapshot (tessera/trace.hpp) needs to write a file that pytorch.org/memory_viz opens.
struct AllocationHistory {
  // Oldest first. Blocks allocated before the window (or before recording began) are initial blocks: those
  // freed inside the window, then those still live. Stream indices follow first use.
  Trace trace;
  std::vector<Address> addresses;  // addresses[id]: the address block `id` had
  AllocatorSnapshot state;         // segments and blocks when the history was taken
  std::size_t dropped_events = 0;  // recorded events that fell out of the ring
  // What was mapped, unmapped and pooled inside the window, in order with the trace's events.
  std::vector<SegmentChange> segment_changes;
  // The stacks recorded with the allocations (record_history's context): stacks[0] is the empty one;
  // event_stacks[i], when not empty, is the index of trace.events[i]'s stack.
  std::vector<Stack> stacks;
  std::vector<std::uint32_t> event_stacks;
};

}  // namespace tessera
