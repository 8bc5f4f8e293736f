// The trace model: what every reader produces, every replay consumes and the allocator's history is told
// in (docs/trace-format.md). The readers and writers of its formats are in tessera/trace.hpp.
//
// A trace is the sequence of allocation requests one device saw: allocs with the bytes the caller asked
// for, frees, and iteration markers. Blocks are named by dense ids that the reader assigns, one per block
// lifetime: a recorded address that is freed and handed out again becomes two blocks. Recordings that start
// mid-run have blocks that were live before the first event; they are listed apart (initial_blocks) so that
// a replay can create them before it starts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/result.hpp"
#include "tessera/tags.hpp"
#include "tessera/types.hpp"

namespace tessera {

using BlockId = std::uint32_t;

// time_us of an event whose recording carries no time.
inline constexpr std::int64_t no_time = std::numeric_limits<std::int64_t>::min();

// pause and resume: a tag's blocks give their device memory back and take it again, keeping their addresses
// (DeviceAllocator::pause); the blocks stay live meanwhile.
// record_stream: a live block is used on one more stream (DeviceAllocator::record_stream; PyTorch's
// Tensor.record_stream), so its free must wait for that stream's work too.
// begin_pool, end_pool, release_pool: a private pool (Trace::pools) starts and stops taking the allocations on
// one stream, and gives up one use (DeviceAllocator::begin_allocate_to_pool and its kin; a CUDA graph's capture).
enum class TraceEventKind : std::uint8_t {
  alloc, free, iteration, pause, resume, record_stream, begin_pool, end_pool, release_pool
};

std::string_view to_string(TraceEventKind kind) noexcept;

// The tag of an allocation, and of a pause or resume: an index into Trace::tags.
using TraceTag = std::uint32_t;
inline constexpr TraceTag trace_default_tag = 0;

// 32 bytes, no pointers: a replay streams through millions of them. backup and tag sit in what was padding.
struct TraceEvent {
  std::uint64_t size = 0;          // alloc, free: the block's requested bytes; iteration: the index;
                                   // the pool events: the pool, an index into Trace::pools
  std::int64_t time_us = no_time;  // when it was recorded, in microseconds; no_time when unknown
  BlockId block = 0;               // alloc, free, record_stream
  std::uint32_t stream = 0;        // alloc, free: index into Trace::streams; record_stream: the stream that
                                   // uses the block; begin_pool: the stream whose allocations go to the pool
  TraceEventKind kind = TraceEventKind::alloc;
  bool backup = false;             // pause: the tag's live blocks are copied to host memory first
  TraceTag tag = trace_default_tag;  // alloc: the block's tag; pause, resume: the tag

  // A free repeats its block's size and stream so that a replay needs no lookup to call free(ptr, size).
  static TraceEvent alloc(BlockId block, std::uint64_t size, std::uint32_t stream, std::int64_t time_us = no_time) {
    return {size, time_us, block, stream, TraceEventKind::alloc};
  }
  static TraceEvent free(BlockId block, std::uint64_t size, std::uint32_t stream, std::int64_t time_us = no_time) {
    return {size, time_us, block, stream, TraceEventKind::free};
  }
  static TraceEvent iteration(std::uint64_t index, std::int64_t time_us = no_time) {
    return {index, time_us, 0, 0, TraceEventKind::iteration};
  }
  static TraceEvent tagged_alloc(BlockId block, std::uint64_t size, std::uint32_t stream, TraceTag tag,
                                 std::int64_t time_us = no_time) {
    return {size, time_us, block, stream, TraceEventKind::alloc, false, tag};
  }
  static TraceEvent pause(TraceTag tag, bool backup, std::int64_t time_us = no_time) {
    return {0, time_us, 0, 0, TraceEventKind::pause, backup, tag};
  }
  static TraceEvent resume(TraceTag tag, std::int64_t time_us = no_time) {
    return {0, time_us, 0, 0, TraceEventKind::resume, false, tag};
  }
  static TraceEvent record_stream(BlockId block, std::uint32_t stream, std::int64_t time_us = no_time) {
    return {0, time_us, block, stream, TraceEventKind::record_stream};
  }
  static TraceEvent begin_pool(std::uint32_t pool, std::uint32_t stream, std::int64_t time_us = no_time) {
    return {pool, time_us, 0, stream, TraceEventKind::begin_pool};
  }
  static TraceEvent end_pool(std::uint32_t pool, std::int64_t time_us = no_time) {
    return {pool, time_us, 0, 0, TraceEventKind::end_pool};
  }
  static TraceEvent release_pool(std::uint32_t pool, std::int64_t time_us = no_time) {
    return {pool, time_us, 0, 0, TraceEventKind::release_pool};
  }
  bool is_pool_event() const noexcept {
    return kind == TraceEventKind::begin_pool || kind == TraceEventKind::end_pool ||
           kind == TraceEventKind::release_pool;
  }

  bool operator==(const TraceEvent&) const = default;
};
static_assert(sizeof(TraceEvent) == 32);

// A block live before recording began.
struct InitialBlock {
  BlockId id = 0;
  std::uint64_t size = 0;    // requested bytes
  std::uint32_t stream = 0;  // index into Trace::streams

  bool operator==(const InitialBlock&) const = default;
};

// A private pool of the trace: its id (PyTorch's MempoolId_t; a snapshot's segment_pool_id) and kind. An id
// is in the table once; a pool released and begun again is the same entry.
struct TracePool {
  PoolId id;
  PoolKind kind = PoolKind::graph;

  bool operator==(const TracePool&) const = default;
};

// One frame of the stack that made an allocation or a free, as PyTorch's snapshot writes it. A stack lists its frames
// innermost first.
struct StackFrame {
  std::string filename;
  std::uint32_t line = 0;
  std::string name;

  bool operator==(const StackFrame&) const = default;
};
using Stack = std::vector<StackFrame>;

struct Trace {
  std::string name;                         // the recording's name: the file's stem unless the file names it
  std::string device;                       // where it was recorded ("cuda:0"); empty when unknown
  std::vector<StreamId> streams;            // the stream table: index -> the platform's stream value
  // The tag table: index -> name; index 0 is default_tag_name ("default"), the tag of every
  // block no region named. Initial blocks carry the default tag.
  std::vector<std::string> tags{std::string(default_tag_name)};
  std::vector<TracePool> pools;            // the private pools the pool events name; empty without any
  std::vector<InitialBlock> initial_blocks;
  std::vector<TraceEvent> events;
  BlockId block_count = 0;                  // block ids are 0 .. block_count-1; readers number initial blocks first
  // The stacks the recording gave its allocs and frees (a PyTorch snapshot's frames), kept apart from the
  // events so that a trace without them costs nothing: all three empty, or stacks[0] is the empty stack and
  // event_stacks[i] (one per event) and initial_stacks[k] (one per initial block) index the table. The text
  // format does not carry them.
  std::vector<Stack> stacks;
  std::vector<std::uint32_t> event_stacks;
  std::vector<std::uint32_t> initial_stacks;

  bool operator==(const Trace&) const = default;
};

// The peak here is the design's peak_allocated: most live requested bytes at any moment, initial blocks
// included. Assumes a trace that validate() accepts.
struct TraceSummary {
  std::size_t allocs = 0;
  std::size_t frees = 0;
  std::size_t iterations = 0;
  std::size_t initial_blocks = 0;
  Bytes initial_bytes = 0;
  Bytes peak_live_bytes = 0;
  // The first event after which the peak was reached; npos when the initial blocks are the peak.
  std::size_t peak_event = npos;
  Bytes live_bytes_at_end = 0;
  std::size_t live_blocks_at_end = 0;
  Bytes largest_alloc = 0;
  std::size_t streams = 0;  // distinct streams the blocks use
  std::int64_t first_time_us = no_time;  // of the first and last events that carry a time
  std::int64_t last_time_us = no_time;
  // The live bytes passed 2^64 after this event (npos: never); the byte figures above are then not sums.
  std::size_t live_past_2_64 = npos;
  std::size_t pauses = 0;
  std::size_t resumes = 0;
  std::size_t record_streams = 0;
  std::size_t pool_begins = 0;  // begin_pool events (graph captures)
  // The most live bytes of blocks whose tag is not paused: what an allocator must hold when a paused tag
  // costs nothing. Equal to peak_live_bytes in a trace without pauses.
  Bytes peak_resident_bytes = 0;
  std::size_t peak_resident_event = npos;  // as peak_event

  static constexpr std::size_t npos = static_cast<std::size_t>(-1);
};

TraceSummary summarize(const Trace& trace);

// A tag name in a trace: one word, without blanks or control characters, so that the text format can write it
// as a field.
bool is_trace_tag_name(std::string_view name) noexcept;

// The order of a private pool's events, as PyTorch calls them (DeviceAllocator::begin_allocate_to_pool): a begin
// names a pool no capture is allocating to (PyTorch refuses a second one); an end closes the begin; a release takes one of the uses the begins gave, never the last while the pool is
// still being allocated to. validate() and the readers (for their line numbers) keep one.
class PoolOrder {
 public:
  // Applies one pool event on pool `pool` of `table`; what is wrong with it, or none.
  std::optional<std::string> apply(TraceEventKind kind, std::uint64_t pool, const std::vector<TracePool>& table);

 private:
  std::vector<std::uint64_t> uses_;    // by pool index: begins less releases
  std::vector<std::uint64_t> active_;  // begins less ends
};

// Every id and stream index in range; every initial block and every alloc names a block not seen before
// (ids are never reused) and has at least one byte; every free names a live block and repeats its size and
// stream. The tag table starts with "default" and names each tag once; every tag index is in range; a pause
// names a tag that is not paused, a resume one that is, and no alloc comes under a paused tag. A record_stream
// names a live block and a stream in range. The pool table names each id once, none of them (0, 0); a pool
// event names a pool in range; an end names a pool being allocated to, a release one with a use left that
// the release would not leave active and unreleased (PyTorch's rules, DeviceAllocator). The stacks are
// none, or as Trace says: one per event and one per initial block, each in the table. The error names the
// first offending event.
Result<void> validate(const Trace& trace);

}  // namespace tessera
