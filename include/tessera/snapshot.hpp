// What an allocator holds, as PyTorch's memory snapshot shows it (segments and their blocks), the allocation
// history, and the writers of PyTorch snapshot files. Below the allocator: the trace layer writes the files,
// the allocator fills the types.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "tessera/result.hpp"
#include "tessera/trace.hpp"
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

struct SnapshotSegment {
  Address address = 0;
  Bytes total_size = 0;  // virtual size of the region
  Bytes mapped_size = 0;
  StreamId stream{};
  MemoryPool pool = MemoryPool::large;
  std::vector<SnapshotBlock> blocks;
  // Tessera: the tag its blocks were allocated under, and whether it is paused (its pages given back).
  std::string tag = "default";
  bool paused = false;
};

struct AllocatorSnapshot {
  std::vector<SnapshotSegment> segments;
  Bytes pooled_bytes = 0;  // pages held unmapped, ready for reuse
};

// The allocation history (PyTorch's torch.cuda.memory._record_memory_history): the newest allocs and frees,
// with the addresses they had, and the allocator's segments at the moment it was taken — what
// write_history_snapshot needs to write a file that pytorch.org/memory_viz opens.
struct AllocationHistory {
  // Oldest first. Blocks allocated before the window (or before recording began) are initial blocks: those
  // freed inside the window, then those still live. Stream indices follow first use.
  Trace trace;
  std::vector<Address> addresses;  // addresses[id]: the address block `id` had
  AllocatorSnapshot state;         // segments and blocks when the history was taken
  std::size_t dropped_events = 0;  // recorded events that fell out of the ring
};

// ---- Writers of PyTorch snapshots (docs/trace-format.md, "Writing PyTorch snapshots"): the pickle that
// torch.cuda.memory._dump_snapshot writes, which PyTorch's viewer (pytorch.org/memory_viz) opens and
// read_pytorch_snapshot reads back as the same trace. Iteration markers are not written: the format has no
// place for them.

struct SnapshotWriteOptions {
  // The device the snapshot files the trace under. Default: the number after the last ':' of trace.device
  // ("cuda:1" -> 1), else 0.
  std::optional<int> device;
  // The allocator's segments and blocks after the replay that handed out `addresses`, written as the
  // snapshot's segments (each cut after the last byte a block used); not owned. Null: segments are
  // synthesized from the trace. Its allocated blocks at addresses no event touches must be exactly the
  // initial blocks never freed, on their streams.
  const AllocatorSnapshot* state = nullptr;
};

// `addresses[id]` is the address block `id` had (from a replay); empty: each block gets a synthesized
// address, reused after its free as a best-fit allocator would. Errc::invalid_argument when the trace does
// not validate(), `addresses` has not block_count entries, two live blocks share an address, or the state
// disagrees with the trace.
// Read back, the trace is equal but for iteration markers when its ids and streams are in the reader's
// order: the initial blocks freed by an event first, in the order of their frees, then the initial blocks
// never freed, then the others in the order of their allocs; streams in order of first use (traces read
// from snapshots are in that order). Otherwise it is equal but for that numbering; with a state, the
// never-freed initial blocks come in the state's order.
Result<std::string> format_pytorch_snapshot(const Trace& trace, const std::vector<Address>& addresses = {},
                                            const SnapshotWriteOptions& options = {});
// Gzip-compressed when the path ends in ".gz" (Tessera reads it as it is; MemoryViz needs it inflated).
Result<void> write_pytorch_snapshot(const Trace& trace, const std::vector<Address>& addresses,
                                    const std::filesystem::path& path, const SnapshotWriteOptions& options = {});

// Writes the history as a PyTorch snapshot file under `device` (gzip when the path ends in ".gz").
Result<void> write_history_snapshot(const AllocationHistory& history, const std::filesystem::path& path,
                                    int device = 0);

}  // namespace tessera
