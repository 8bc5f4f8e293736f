// PyTorch memory snapshots out: the trace becomes device_traces[device], and `segments` holds what both
// readers need to rebuild the blocks live before the recording (docs/trace-format.md):
//   - an initial block freed by an event needs nothing: its free_completed without an alloc says it;
//   - an initial block never freed gets a segment of its own, one active_allocated block that no event
//     touches, in trace order, so Tessera's reader numbers it as the trace does;
//   - the addresses every other block ever had are covered by segments too (inactive except the blocks
//     live at the end), because MemoryViz's "Allocator State History" finds each block's segment by
//     address and fails on a block outside every segment.
// With an allocator state, its segments are written instead, blocks tiling each one.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <iterator>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "tessera/snapshot.hpp"
#include "tessera/trace.hpp"
#include "trace/gzip_file.hpp"
#include "trace/pickle_writer.hpp"
#include "trace/snapshot_layout.hpp"

namespace tessera {

namespace {

using trace_detail::PickleWriter;

// Where synthesized addresses start: where CUDA maps device memory on Linux, and below 2^53 so that
// MemoryViz's JavaScript numbers hold every address exactly.
constexpr Address synthetic_base = 0x7f0000000000;
constexpr Bytes block_rounding = 512;  // PyTorch's rounding of block sizes
constexpr Bytes segment_alignment = 2 * MiB;
constexpr Bytes small_segment = 2 * MiB;  // PyTorch's small-pool segments are this size

// The bytes a block occupies in the layout: rounded as PyTorch rounds, and never zero, so that two live
// blocks never share an address.
Bytes footprint(std::uint64_t size) { return align_up(std::max<Bytes>(size, 1), block_rounding); }

struct BlockFacts {
  std::uint64_t size = 0;
  std::uint32_t stream = 0;
  bool initial = false;
  bool allocated = false;  // by an event
  bool freed = false;      // by an event
};

std::vector<BlockFacts> block_facts(const Trace& trace) {
  std::vector<BlockFacts> facts(trace.block_count);
  for (const InitialBlock& block : trace.initial_blocks)
    facts[block.id] = {block.size, block.stream, true, false, false};
  for (const TraceEvent& event : trace.events) {
    if (event.kind == TraceEventKind::alloc) {
      facts[event.block].size = event.size;
      facts[event.block].stream = event.stream;
      facts[event.block].allocated = true;
    } else if (event.kind == TraceEventKind::free) {
      facts[event.block].freed = true;
    }
  }
  return facts;
}

bool never_freed_initial(const BlockFacts& block) { return block.initial && !block.freed; }

// Best fit over one stream's address range, growing it at the top when nothing fits: blocks get the
// kind of addresses a caching allocator hands out, reused after their free.
class BestFit {
 public:
  Bytes take(Bytes size) {
    const auto fit = by_size_.lower_bound({size, 0});
    if (fit != by_size_.end()) {
      const auto [free_size, start] = *fit;
      erase(start, free_size);
      if (free_size > size) insert(start + size, free_size - size);
      return start;
    }
    Bytes start = top_;
    if (!by_start_.empty()) {
      const auto last = std::prev(by_start_.end());
      if (last->first + last->second == top_) {
        start = last->first;
        erase(last->first, last->second);
      }
    }
    top_ = start + size;
    return start;
  }

  void give(Bytes start, Bytes size) {
    const auto next = by_start_.lower_bound(start);
    if (next != by_start_.end() && start + size == next->first) {
      size += next->second;
      erase(next->first, next->second);
    }
    const auto after = by_start_.lower_bound(start);
    if (after != by_start_.begin()) {
      const auto previous = std::prev(after);
      if (previous->first + previous->second == start) {
        start = previous->first;
        size += previous->second;
        erase(previous->first, previous->second);
      }
    }
    insert(start, size);
  }

  Bytes top() const { return top_; }

 private:
  void insert(Bytes start, Bytes size) {
    by_start_.emplace(start, size);
    by_size_.emplace(size, start);
  }
  void erase(Bytes start, Bytes size) {
    by_start_.erase(start);
    by_size_.erase({size, start});
  }

  std::map<Bytes, Bytes> by_start_;
  std::set<std::pair<Bytes, Bytes>> by_size_;  // (size, start): the smallest fit, then the lowest address
  Bytes top_ = 0;
};

// Never-freed initial blocks side by side from the base, then one best-fit range per stream.
std::vector<Address> synthesize_addresses(const Trace& trace, const std::vector<BlockFacts>& facts) {
  std::vector<Address> addresses(trace.block_count, 0);
  Address next = synthetic_base;
  for (const InitialBlock& block : trace.initial_blocks) {
    if (!never_freed_initial(facts[block.id])) continue;
    addresses[block.id] = next;
    next += footprint(block.size);
  }
  std::vector<BestFit> ranges(trace.streams.size());
  std::vector<Bytes> offsets(trace.block_count, 0);
  for (const InitialBlock& block : trace.initial_blocks) {
    if (facts[block.id].freed) offsets[block.id] = ranges[block.stream].take(footprint(block.size));
  }
  for (const TraceEvent& event : trace.events) {
    if (event.kind == TraceEventKind::alloc) {
      offsets[event.block] = ranges[event.stream].take(footprint(event.size));
    } else if (event.kind == TraceEventKind::free) {
      ranges[event.stream].give(offsets[event.block], footprint(event.size));
    }
  }
  // Ranges start on a fresh segment boundary, never touching the one before: each stays its own segment.
  std::vector<Address> bases(ranges.size(), 0);
  for (std::size_t s = 0; s < ranges.size(); ++s) {
    if (ranges[s].top() == 0) continue;
    if (next != synthetic_base) next = align_up(next + 1, segment_alignment);
    bases[s] = next;
    next += ranges[s].top();
  }
  for (BlockId id = 0; id < trace.block_count; ++id) {
    if (!never_freed_initial(facts[id]) && (facts[id].initial || facts[id].allocated)) {
      addresses[id] = bases[facts[id].stream] + offsets[id];
    }
  }
  return addresses;
}

Error invalid(std::string message) { return make_error(Errc::invalid_argument, std::move(message)); }

// Both readers key blocks by address: an alloc at an address that holds a live block cannot be read back.
Result<void> check_addresses(const Trace& trace, const std::vector<Address>& addresses) {
  std::unordered_map<Address, BlockId> live;
  for (const InitialBlock& block : trace.initial_blocks) {
    const auto [it, inserted] = live.emplace(addresses[block.id], block.id);
    if (!inserted) {
      return invalid(fmt::format("initial blocks {} and {} share address {:#x}", it->second, block.id, it->first));
    }
  }
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    const TraceEvent& event = trace.events[i];
    if (event.kind == TraceEventKind::alloc) {
      const auto [it, inserted] = live.emplace(addresses[event.block], event.block);
      if (!inserted) {
        return invalid(fmt::format("event {}: block {} is at {:#x}, where block {} is still live", i, event.block,
                                   it->first, it->second));
      }
    } else if (event.kind == TraceEventKind::free) {
      live.erase(addresses[event.block]);
    }
  }
  return {};
}

// ---- The segments, as the snapshot lists them.

using trace_detail::BlockState;
using trace_detail::OutBlock;
using trace_detail::OutSegment;

std::string_view state_name(BlockState state) {
  switch (state) {
    case BlockState::active_allocated: return "active_allocated";
    case BlockState::active_pending_free: return "active_pending_free";
    case BlockState::inactive: return "inactive";
  }
  return "inactive";
}

// Without a state: a segment per never-freed initial block, then the union of every other block's
// footprint, cut into disjoint extents, with the blocks live at the end active and the rest inactive.
std::vector<OutSegment> synthesize_segments(const Trace& trace, const std::vector<BlockFacts>& facts,
                                            const std::vector<Address>& addresses,
                                            const std::vector<std::uint32_t>& block_stack) {
  auto stack_of = [&](BlockId id) { return block_stack.empty() ? 0 : block_stack[id]; };
  std::vector<OutSegment> segments;
  for (const InitialBlock& block : trace.initial_blocks) {
    if (!never_freed_initial(facts[block.id])) continue;
    const Address address = addresses[block.id];
    const Bytes size = footprint(block.size);
    segments.push_back({address,
                        size,
                        static_cast<std::uint64_t>(trace.streams[block.stream]),
                        size <= small_segment,
                        {{address, size, block.size, BlockState::active_allocated, stack_of(block.id)}}});
  }
  std::vector<BlockId> others;
  for (BlockId id = 0; id < trace.block_count; ++id) {
    if (!never_freed_initial(facts[id]) && (facts[id].initial || facts[id].allocated)) others.push_back(id);
  }
  std::sort(others.begin(), others.end(), [&](BlockId a, BlockId b) { return addresses[a] < addresses[b]; });
  std::vector<BlockId> live_at_end;
  for (const BlockId id : others) {
    if (!facts[id].freed) live_at_end.push_back(id);  // sorted by address too; addresses distinct
  }
  std::size_t next_live = 0;
  for (std::size_t i = 0; i < others.size();) {
    const Address start = addresses[others[i]];
    Address end = start + footprint(facts[others[i]].size);
    const std::uint32_t stream = facts[others[i]].stream;
    for (++i; i < others.size() && addresses[others[i]] <= end; ++i) {
      end = std::max<Address>(end, addresses[others[i]] + footprint(facts[others[i]].size));
    }
    OutSegment segment{
        start, end - start, static_cast<std::uint64_t>(trace.streams[stream]), end - start <= small_segment, {}};
    Address cursor = start;
    for (; next_live < live_at_end.size() && addresses[live_at_end[next_live]] < end; ++next_live) {
      const BlockId id = live_at_end[next_live];
      const Address address = addresses[id];
      if (address > cursor) segment.blocks.push_back({cursor, address - cursor, 0, BlockState::inactive});
      // A replay may pack blocks closer than the rounding: a block ends where the next live one starts.
      Address block_end = std::min<Address>(address + footprint(facts[id].size), end);
      if (next_live + 1 < live_at_end.size()) block_end = std::min(block_end, addresses[live_at_end[next_live + 1]]);
      segment.blocks.push_back({address, block_end - address, facts[id].size, BlockState::active_allocated, stack_of(id)});
      cursor = block_end;
    }
    if (cursor < end) segment.blocks.push_back({cursor, end - cursor, 0, BlockState::inactive});
    segments.push_back(std::move(segment));
  }
  return segments;
}

// A VMM allocator reserves far more virtual space than it hands out (Tessera: twice the device). The ends
// no block of the trace ever reached hold no memory (a region that grows up leaves its tail untouched, one
// that grows down its head); left in, they would shrink every block of MemoryViz's segment view to a
// sliver. The segment runs from the 2 MiB boundary at or below the first byte used to the one past the last.
void trim_untouched_ends(OutSegment& segment, Address used_begin, Address used_end) {
  const Address begin = std::max(segment.address, segment.address + (used_begin - segment.address) /
                                                                         segment_alignment * segment_alignment);
  const Address end = std::min(segment.address + segment.total_size,
                               segment.address + align_up(used_end - segment.address, segment_alignment));
  while (!segment.blocks.empty() && segment.blocks.back().address >= end) segment.blocks.pop_back();
  if (!segment.blocks.empty() && segment.blocks.back().address + segment.blocks.back().size > end) {
    segment.blocks.back().size = end - segment.blocks.back().address;  // an inactive block: used_end is past the others
  }
  std::size_t first = 0;
  while (first < segment.blocks.size() && segment.blocks[first].address + segment.blocks[first].size <= begin) ++first;
  segment.blocks.erase(segment.blocks.begin(), segment.blocks.begin() + static_cast<std::ptrdiff_t>(first));
  if (!segment.blocks.empty() && segment.blocks.front().address < begin) {
    // An inactive block: used_begin is at or before the others.
    segment.blocks.front().size -= begin - segment.blocks.front().address;
    segment.blocks.front().address = begin;
  }
  segment.address = begin;
  segment.total_size = end - begin;
}

// With a state: its segments, gaps between blocks filled with inactive ones, and either trimmed as above or, when
// `cut_to_runs` (the snapshot has segment entries), cut to their mapped runs: what is reserved, every segment that
// holds any. The blocks the reader will take for initial ones (allocated, at an address no event touches) must be
// the never-freed initial blocks, on their streams, or the trace would not read back. A lent block (the bytes of a
// sliver that a shared block uses) is written inactive when cut: the shared block is the trace's.
Result<std::vector<OutSegment>> state_segments(const Trace& trace, const std::vector<BlockFacts>& facts,
                                               const std::vector<Address>& addresses, const AllocatorSnapshot& state,
                                               const std::vector<std::uint32_t>& block_stack, bool cut_to_runs) {
  std::unordered_set<Address> touched;  // by events
  std::unordered_map<Address, BlockId> live_at_end;
  for (BlockId id = 0; id < trace.block_count; ++id) {
    if (facts[id].allocated || facts[id].freed) touched.insert(addresses[id]);
    if ((facts[id].initial || facts[id].allocated) && !facts[id].freed) live_at_end.emplace(addresses[id], id);
  }
  std::vector<std::pair<Address, Address>> used;  // every block's footprint, by start
  for (BlockId id = 0; id < trace.block_count; ++id) {
    if (facts[id].initial || facts[id].allocated)
      used.emplace_back(addresses[id], addresses[id] + footprint(facts[id].size));
  }
  std::sort(used.begin(), used.end());
  std::size_t initial_found = 0;
  std::vector<OutSegment> segments;
  for (const SnapshotSegment& from : state.segments) {
    OutSegment segment{
        from.address, from.total_size, static_cast<std::uint64_t>(from.stream), from.pool == SizePool::small, {}};
    std::vector<SnapshotBlock> blocks = from.blocks;
    std::sort(blocks.begin(), blocks.end(), [](const auto& a, const auto& b) { return a.address < b.address; });
    Address cursor = from.address;
    const Address end = from.address + from.total_size;
    for (const SnapshotBlock& block : blocks) {
      if (cut_to_runs && block.lent_to != 0) continue;  // an inactive gap
      if (block.address < cursor || block.address + block.size > end) {
        return invalid(fmt::format("state: the block at {:#x} overlaps another or leaves its segment at {:#x}",
                                   block.address, from.address));
      }
      if (block.address > cursor) segment.blocks.push_back({cursor, block.address - cursor, 0, BlockState::inactive});
      const auto state_of = static_cast<BlockState>(static_cast<std::uint8_t>(block.state));
      Bytes requested = block.requested;
      const auto live = live_at_end.find(block.address);
      if (live != live_at_end.end()) requested = facts[live->second].size;  // the trace's word, for an exact read
      if (state_of != BlockState::inactive && !touched.contains(block.address)) {
        if (live == live_at_end.end() || !never_freed_initial(facts[live->second])) {
          return invalid(
              fmt::format("state: the block at {:#x} is allocated, but the trace neither touches it "
                          "nor has it as an initial block",
                          block.address));
        }
        if (trace.streams[facts[live->second].stream] != from.stream) {
          return invalid(fmt::format("state: initial block {} is in a segment of another stream", live->second));
        }
        ++initial_found;
      }
      const std::uint32_t stack = live != live_at_end.end() && !block_stack.empty() ? block_stack[live->second] : 0;
      segment.blocks.push_back({block.address, block.size, requested, state_of, stack});
      cursor = block.address + block.size;
    }
    if (cursor < end) segment.blocks.push_back({cursor, end - cursor, 0, BlockState::inactive});
    if (cut_to_runs) {
      for (OutSegment& run : trace_detail::cut_to_mapped(segment, from.mapped)) segments.push_back(std::move(run));
      continue;
    }
    Address used_begin = end;
    Address used_end = from.address;
    for (auto it = std::lower_bound(used.begin(), used.end(), std::pair<Address, Address>{from.address, 0});
         it != used.end() && it->first < end; ++it) {
      used_begin = std::min(used_begin, it->first);
      used_end = std::max(used_end, std::min(it->second, end));
    }
    for (const OutBlock& block : segment.blocks) {
      if (block.state == BlockState::inactive) continue;
      used_begin = std::min(used_begin, block.address);
      used_end = std::max(used_end, block.address + block.size);
    }
    if (used_end == from.address) continue;  // a segment no block of the trace ever reached
    trim_untouched_ends(segment, used_begin, used_end);
    segments.push_back(std::move(segment));
  }
  const auto never_freed = static_cast<std::size_t>(
      std::count_if(facts.begin(), facts.end(), [](const BlockFacts& block) { return never_freed_initial(block); }));
  if (initial_found != never_freed) {
    return invalid(fmt::format("state: {} of the trace's {} initial blocks never freed are allocated in it",
                               initial_found, never_freed));
  }
  return segments;
}

// SnapshotBlock::State and BlockState must name the same states in the same order.
static_assert(static_cast<int>(SnapshotBlock::State::active_allocated) ==
              static_cast<int>(BlockState::active_allocated));
static_assert(static_cast<int>(SnapshotBlock::State::active_pending_free) ==
              static_cast<int>(BlockState::active_pending_free));
static_assert(static_cast<int>(SnapshotBlock::State::inactive) == static_cast<int>(BlockState::inactive));

// Where the stacks come from: the options' (a history's), else the trace's own (a recording's frames, carried
// through a replay); none when neither has any.
struct StackSource {
  const std::vector<Stack>* table = nullptr;
  const std::vector<std::uint32_t>* events = nullptr;
  const std::vector<std::uint32_t>* initial = nullptr;
  bool own_frees = false;  // the trace's: a free is written with its own stack, none included, to read back the same
};

StackSource stack_source(const Trace& trace, const SnapshotWriteOptions& options) {
  if (options.event_stacks != nullptr && !options.event_stacks->empty()) return {options.stacks, options.event_stacks, nullptr};
  if (!trace.stacks.empty()) return {&trace.stacks, &trace.event_stacks, &trace.initial_stacks, true};
  return {};
}

// ---- The pickle.

// A stack as PyTorch writes `frames`: a list of {filename, line, name}, innermost first. Index 0 is none.
void write_frames(PickleWriter& out, const std::vector<Stack>* stacks, std::uint32_t stack) {
  out.memo_string("frames");
  out.begin_list();
  if (stacks != nullptr && stack != 0) {
    for (const StackFrame& frame : (*stacks)[stack]) {
      out.begin_dict();
      out.memo_string("filename");
      out.memo_string(frame.filename);
      out.memo_string("line");
      out.integer(frame.line);
      out.memo_string("name");
      out.memo_string(frame.name);
      out.end_dict();
    }
  }
  out.end_list();
}

void write_segment(PickleWriter& out, const OutSegment& segment, int device, const std::vector<Stack>* stacks) {
  Bytes allocated = 0, active = 0, requested = 0;
  for (const OutBlock& block : segment.blocks) {
    if (block.state == BlockState::active_allocated) allocated += block.size;
    if (block.state != BlockState::inactive) {
      active += block.size;
      requested += block.requested;
    }
  }
  out.begin_dict();
  out.memo_string("device");
  out.integer(device);
  out.memo_string("address");
  out.unsigned_integer(segment.address);
  out.memo_string("total_size");
  out.unsigned_integer(segment.total_size);
  out.memo_string("allocated_size");
  out.unsigned_integer(allocated);
  out.memo_string("active_size");
  out.unsigned_integer(active);
  out.memo_string("requested_size");
  out.unsigned_integer(requested);
  out.memo_string("stream");
  // As PyTorch writes a stream (int64_t of the cudaStream_t) and the reader reads it back: a handle with the
  // top bit set is a negative number, not a long integer beyond int64.
  out.integer(static_cast<std::int64_t>(segment.stream));
  out.memo_string("segment_type");
  out.memo_string(segment.small ? "small" : "large");
  out.memo_string("segment_pool_id");  // the default pool, as PyTorch writes it
  out.begin_tuple(2);
  out.integer(0);
  out.integer(0);
  out.end_tuple();
  out.memo_string("is_expandable");  // virtual memory management, as with PyTorch's expandable segments
  out.boolean(true);
  write_frames(out, nullptr, 0);
  out.memo_string("blocks");
  out.begin_list();
  for (const OutBlock& block : segment.blocks) {
    out.begin_dict();
    out.memo_string("address");
    out.unsigned_integer(block.address);
    out.memo_string("size");
    out.unsigned_integer(block.size);
    out.memo_string("requested_size");
    out.unsigned_integer(block.requested);
    out.memo_string("state");
    out.memo_string(state_name(block.state));
    write_frames(out, stacks, block.stack);
    out.end_dict();
  }
  out.end_list();
  out.end_dict();
}

// Every entry has a time_us, as PyTorch 2.x writes it: None where the trace has no time (the reader reads that
// as no time).
void write_time(PickleWriter& out, std::int64_t time_us) {
  out.memo_string("time_us");
  if (time_us == no_time) {
    out.none();
  } else {
    out.integer(time_us);
  }
}

// allocator_settings as PyTorch names them: its defaults, but for expandable segments (the segments are written
// is_expandable: memory mapped into reserved ranges).
void write_allocator_settings(PickleWriter& out) {
  out.memo_string("allocator_settings");
  out.begin_dict();
  out.memo_string("PYTORCH_CUDA_ALLOC_CONF");
  out.memo_string("");
  out.memo_string("max_split_size");
  out.integer(-1);
  out.memo_string("garbage_collection_threshold");
  out.real(0.0);
  out.memo_string("expandable_segments");
  out.boolean(true);
  out.memo_string("pinned_num_register_threads");
  out.integer(1);
  out.memo_string("release_lock_on_cudamalloc");
  out.boolean(false);
  out.memo_string("pinned_use_cuda_host_register");
  out.boolean(false);
  out.memo_string("roundup_power2_divisions");
  out.begin_dict();
  for (std::uint64_t interval = 1; interval <= 32768; interval *= 2) {
    out.memo_string(fmt::format("{}", interval));
    out.integer(0);
  }
  out.end_dict();
  out.end_dict();
}

void write_entry(PickleWriter& out, std::string_view action, const Trace& trace, const TraceEvent& event,
                 Address address, const std::vector<Stack>* stacks, std::uint32_t stack) {
  out.begin_dict();
  out.memo_string("action");
  out.memo_string(action);
  out.memo_string("addr");
  out.unsigned_integer(address);
  out.memo_string("size");
  out.unsigned_integer(event.size);
  out.memo_string("stream");
  out.integer(static_cast<std::int64_t>(static_cast<std::uint64_t>(trace.streams[event.stream])));  // as above
  write_time(out, event.time_us);
  write_frames(out, stacks, stack);
  out.end_dict();
}

void write_segment_entry(PickleWriter& out, const trace_detail::SegmentEntry& entry, std::int64_t time_us) {
  out.begin_dict();
  out.memo_string("action");
  out.memo_string(entry.action);
  out.memo_string("addr");
  out.unsigned_integer(entry.address);
  out.memo_string("size");
  out.unsigned_integer(entry.size);
  out.memo_string("stream");
  out.integer(static_cast<std::int64_t>(static_cast<std::uint64_t>(entry.stream)));  // as above
  write_time(out, time_us);
  write_frames(out, nullptr, 0);
  out.end_dict();
}

// A free is free_requested then free_completed at once: the caller let go and the block was reusable at
// the same moment (MemoryViz shows the pair as one "free"). Segment entries go before the event they precede,
// at the time of the last event before them (of the first event when none is). An alloc carries its block's
// stack; a free of the trace's stacks its own (a recording's frees), one of a history's its block's.
void write_events(PickleWriter& out, const Trace& trace, const std::vector<Address>& addresses,
                  const std::vector<trace_detail::SegmentEntry>& segment_entries, const StackSource& stacks,
                  const std::vector<std::uint32_t>& block_stack) {
  std::int64_t first_time = no_time;
  for (const TraceEvent& event : trace.events) {
    if (event.time_us != no_time) {
      first_time = event.time_us;
      break;
    }
  }
  std::int64_t last_time = first_time;
  out.begin_list();
  std::size_t next_entry = 0;
  auto entries_before = [&](std::size_t index) {
    for (; next_entry < segment_entries.size() && segment_entries[next_entry].before_event == index; ++next_entry) {
      write_segment_entry(out, segment_entries[next_entry], last_time);
    }
  };
  for (std::size_t index = 0; index < trace.events.size(); ++index) {
    entries_before(index);
    const TraceEvent& event = trace.events[index];
    if (event.time_us != no_time) last_time = event.time_us;
    const std::uint32_t own = stacks.events == nullptr ? 0 : (*stacks.events)[index];
    const std::uint32_t of_block = block_stack.empty() ? 0 : block_stack[event.block];
    if (event.kind == TraceEventKind::alloc) {
      write_entry(out, "alloc", trace, event, addresses[event.block], stacks.table, of_block);
    } else if (event.kind == TraceEventKind::free) {
      const std::uint32_t stack = own != 0 || stacks.own_frees ? own : of_block;
      write_entry(out, "free_requested", trace, event, addresses[event.block], stacks.table, stack);
      write_entry(out, "free_completed", trace, event, addresses[event.block], stacks.table, stack);
    }
  }
  entries_before(trace.events.size());
  out.end_list();
}

// Without a state, the segments are what the changes leave: each held range tiled by the blocks live at the
// end that start in it (a block that starts in none, such as a GMLake block over chunks mapped a second time,
// is left out) and inactive blocks between them; then the pooled segment.
std::vector<OutSegment> held_segments(const Trace& trace, const std::vector<BlockFacts>& facts,
                                      const std::vector<Address>& addresses, const trace_detail::HeldMemory& held,
                                      const std::vector<std::uint32_t>& block_stack) {
  std::vector<BlockId> live_at_end;
  for (BlockId id = 0; id < trace.block_count; ++id) {
    if ((facts[id].initial || facts[id].allocated) && !facts[id].freed) live_at_end.push_back(id);
  }
  std::sort(live_at_end.begin(), live_at_end.end(), [&](BlockId a, BlockId b) { return addresses[a] < addresses[b]; });
  std::vector<OutSegment> segments;
  std::size_t next_live = 0;
  for (const trace_detail::HeldRange& range : held.ranges) {
    const Address end = range.address + range.size;
    OutSegment segment{range.address, range.size, static_cast<std::uint64_t>(range.stream), range.size <= small_segment,
                       {}};
    Address cursor = range.address;
    for (; next_live < live_at_end.size() && addresses[live_at_end[next_live]] < end; ++next_live) {
      const BlockId id = live_at_end[next_live];
      const Address address = addresses[id];
      if (address < cursor) continue;  // before the range, or inside the block before it
      if (address > cursor) segment.blocks.push_back({cursor, address - cursor, 0, BlockState::inactive});
      Address block_end = std::min<Address>(address + footprint(facts[id].size), end);
      if (next_live + 1 < live_at_end.size()) block_end = std::min(block_end, addresses[live_at_end[next_live + 1]]);
      segment.blocks.push_back({address, block_end - address, facts[id].size, BlockState::active_allocated,
                                block_stack.empty() ? 0 : block_stack[id]});
      cursor = block_end;
    }
    if (cursor < end) segment.blocks.push_back({cursor, end - cursor, 0, BlockState::inactive});
    segments.push_back(std::move(segment));
  }
  if (held.pooled > 0) segments.push_back(trace_detail::pooled_segment(held.pooled));
  return segments;
}

// The stack of each block (0: none): its alloc's, or an initial block's own.
Result<std::vector<std::uint32_t>> block_stacks(const Trace& trace, const StackSource& source) {
  if (source.events == nullptr) return std::vector<std::uint32_t>{};
  const std::vector<std::uint32_t>& event_stacks = *source.events;
  if (event_stacks.size() != trace.events.size()) {
    return invalid(fmt::format("{} event stacks for {} events", event_stacks.size(), trace.events.size()));
  }
  const std::size_t known = source.table == nullptr ? 0 : source.table->size();
  std::vector<std::uint32_t> stacks(trace.block_count, 0);
  if (source.initial != nullptr) {
    for (std::size_t k = 0; k < source.initial->size() && k < trace.initial_blocks.size(); ++k) {
      stacks[trace.initial_blocks[k].id] = (*source.initial)[k];  // validate() checked the indices
    }
  }
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    if (event_stacks[i] == 0) continue;
    if (event_stacks[i] >= known) {
      return invalid(fmt::format("event {} names stack {}; there are {}", i, event_stacks[i], known));
    }
    if (trace.events[i].kind == TraceEventKind::alloc) stacks[trace.events[i].block] = event_stacks[i];
  }
  return stacks;
}

// The segment changes as entries, and the segments they leave; `relabel`: the changes' streams as the state's
// segments that hold them say (an observer of mappings knows no stream).
struct ChangeLayout {
  std::vector<trace_detail::SegmentEntry> entries;
  std::optional<trace_detail::HeldMemory> held;  // changes from empty without a state
};

Result<ChangeLayout> lay_out_changes(const Trace& trace, const SnapshotWriteOptions& options) {
  const std::vector<SegmentChange>& given = *options.segment_changes;
  std::vector<SegmentChange> relabeled;
  if (options.state != nullptr) {
    // By address: the state's segments do not overlap.
    std::map<Address, const SnapshotSegment*> by_address;
    for (const SnapshotSegment& segment : options.state->segments) by_address.emplace(segment.address, &segment);
    relabeled = given;
    for (SegmentChange& change : relabeled) {
      if (change.kind == SegmentChange::Kind::pooled || change.kind == SegmentChange::Kind::unpooled) continue;
      auto it = by_address.upper_bound(change.address);
      if (it == by_address.begin()) continue;
      const SnapshotSegment& segment = *std::prev(it)->second;
      if (change.address < segment.address + segment.total_size) change.stream = segment.stream;
    }
  }
  const std::vector<SegmentChange>& changes = options.state != nullptr ? relabeled : given;
  ChangeLayout layout;
  Bytes pooled_before = 0;
  if (options.changes_from_empty) {
    Result<trace_detail::HeldMemory> held = trace_detail::fold_segment_changes(changes);
    if (!held) return std::move(held).error();
    if (options.state != nullptr) {
      // The state must be where the changes lead: the same runs mapped, the same bytes pooled.
      std::vector<MappedRange> state_runs;
      for (const SnapshotSegment& segment : options.state->segments) {
        state_runs.insert(state_runs.end(), segment.mapped.begin(), segment.mapped.end());
      }
      std::sort(state_runs.begin(), state_runs.end(), [](const auto& a, const auto& b) { return a.address < b.address; });
      std::vector<MappedRange> change_runs;
      for (const trace_detail::HeldRange& range : held->ranges) change_runs.push_back({range.address, range.size});
      auto merge = [](std::vector<MappedRange>& runs) {
        std::vector<MappedRange> merged;
        for (const MappedRange& run : runs) {
          if (!merged.empty() && merged.back().address + merged.back().size == run.address) {
            merged.back().size += run.size;
          } else {
            merged.push_back(run);
          }
        }
        runs = std::move(merged);
      };
      merge(state_runs);
      merge(change_runs);
      if (state_runs != change_runs || held->pooled != options.state->pooled_bytes) {
        return invalid(fmt::format("the segment changes leave {} mapped runs and {} bytes pooled; the state has {} "
                                   "mapped runs and {} bytes pooled",
                                   change_runs.size(), held->pooled, state_runs.size(), options.state->pooled_bytes));
      }
    } else {
      layout.held = std::move(*held);
    }
  } else {
    if (options.state == nullptr) return invalid("segment changes of a window need the allocator's state at its end");
    const std::int64_t before = static_cast<std::int64_t>(options.state->pooled_bytes) - trace_detail::pooled_change(changes);
    if (before < 0) {
      return invalid(fmt::format("the segment changes pool {} bytes more than the state holds",
                                 -before));
    }
    pooled_before = static_cast<Bytes>(before);
  }
  // The starting state's changes are in the segments (the fold above) and not among the entries: undone by
  // MemoryViz, they would leave the blocks live before the first entry outside every segment.
  const std::size_t starting = options.starting_changes;
  if (starting > changes.size()) {
    return invalid(fmt::format("{} starting segment changes of {}", starting, changes.size()));
  }
  if (starting > 0 && !options.changes_from_empty) {
    return invalid("starting segment changes need changes that start from empty");
  }
  const std::vector<SegmentChange> starting_state(changes.begin(), changes.begin() + static_cast<std::ptrdiff_t>(starting));
  const std::vector<SegmentChange> after_start(changes.begin() + static_cast<std::ptrdiff_t>(starting), changes.end());
  if (starting > 0) {
    if (Result<trace_detail::HeldMemory> held = trace_detail::fold_segment_changes(starting_state); !held) {
      return std::move(held).error();
    } else {
      pooled_before = held->pooled;
    }
  }
  Result<std::vector<trace_detail::SegmentEntry>> entries =
      trace_detail::segment_entries(after_start, trace.events.size(), pooled_before);
  if (!entries) return std::move(entries).error();
  layout.entries = std::move(*entries);
  return layout;
}

Result<int> device_of(const Trace& trace, const SnapshotWriteOptions& options) {
  if (options.device) {
    if (*options.device < 0) return invalid(fmt::format("device {} is negative", *options.device));
    return *options.device;
  }
  const std::size_t colon = trace.device.rfind(':');
  if (colon == std::string::npos) return 0;
  int device = 0;
  const char* first = trace.device.data() + colon + 1;
  const char* last = trace.device.data() + trace.device.size();
  const auto [end, error] = std::from_chars(first, last, device);
  return error == std::errc() && end == last && device >= 0 ? device : 0;
}

}  // namespace

Result<std::string> format_pytorch_snapshot(const Trace& trace, const std::vector<Address>& addresses,
                                            const SnapshotWriteOptions& options) {
  if (Result<void> valid = validate(trace); !valid) return std::move(valid).error();
  if (!addresses.empty() && addresses.size() != trace.block_count) {
    return invalid(fmt::format("{} addresses for {} blocks", addresses.size(), trace.block_count));
  }
  // A trace without blocks (no history, nothing live) needs no addresses: its snapshot is the state's segments.
  if (options.state != nullptr && addresses.empty() && trace.block_count > 0) {
    return invalid("an allocator state needs the addresses of the replay it ended");
  }
  Result<int> device = device_of(trace, options);
  if (!device) return std::move(device).error();

  const std::vector<BlockFacts> facts = block_facts(trace);
  const std::vector<Address> synthesized =
      addresses.empty() ? synthesize_addresses(trace, facts) : std::vector<Address>{};
  const std::vector<Address>& where = addresses.empty() ? synthesized : addresses;
  if (!addresses.empty()) {
    if (Result<void> checked = check_addresses(trace, addresses); !checked) return std::move(checked).error();
  }
  const StackSource stacks = stack_source(trace, options);
  Result<std::vector<std::uint32_t>> block_stack = block_stacks(trace, stacks);
  if (!block_stack) return std::move(block_stack).error();
  ChangeLayout changes;
  if (options.segment_changes != nullptr) {
    Result<ChangeLayout> laid_out = lay_out_changes(trace, options);
    if (!laid_out) return std::move(laid_out).error();
    changes = std::move(*laid_out);
  }
  std::vector<OutSegment> segments;
  if (options.state != nullptr) {
    const bool cut = options.segment_changes != nullptr;
    Result<std::vector<OutSegment>> from_state = state_segments(trace, facts, where, *options.state, *block_stack, cut);
    if (!from_state) return std::move(from_state).error();
    segments = std::move(*from_state);
    if (cut && options.state->pooled_bytes > 0) segments.push_back(trace_detail::pooled_segment(options.state->pooled_bytes));
  } else if (changes.held) {
    segments = held_segments(trace, facts, where, *changes.held, *block_stack);
  } else {
    segments = synthesize_segments(trace, facts, where, *block_stack);
  }

  // The four top-level keys PyTorch 2.x writes; MemoryViz reads the first two.
  PickleWriter out;
  out.begin_dict();
  out.memo_string("segments");
  out.begin_list();
  for (const OutSegment& segment : segments) write_segment(out, segment, *device, stacks.table);
  out.end_list();
  out.memo_string("device_traces");
  out.begin_list();
  for (int d = 0; d < *device; ++d) {
    out.begin_list();
    out.end_list();
  }
  write_events(out, trace, where, changes.entries, stacks, *block_stack);
  out.end_list();
  write_allocator_settings(out);
  out.memo_string("external_annotations");  // none: a trace records no annotations
  out.begin_list();
  out.end_list();
  out.end_dict();
  return out.finish();
}

Result<void> write_pytorch_snapshot(const Trace& trace, const std::vector<Address>& addresses,
                                    const std::filesystem::path& path, const SnapshotWriteOptions& options) {
  Result<std::string> pickle = format_pytorch_snapshot(trace, addresses, options);
  if (!pickle) return std::move(pickle).error();
  if (path.extension() == ".gz") return trace_detail::write_file_bytes(path, trace_detail::gzip(*pickle));
  return trace_detail::write_file_bytes(path, *pickle);
}

Result<void> write_history_snapshot(const AllocationHistory& history, const std::filesystem::path& path, int device) {
  SnapshotWriteOptions options;
  options.device = device;
  options.state = &history.state;
  // A window of a longer run: what was mapped before it is in the state's mapped runs.
  options.segment_changes = &history.segment_changes;
  options.changes_from_empty = false;
  options.stacks = &history.stacks;
  options.event_stacks = &history.event_stacks;
  return write_pytorch_snapshot(history.trace, history.addresses, path, options);
}

}  // namespace tessera
