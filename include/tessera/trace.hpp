// Allocation traces: the model every reader produces and every replay consumes, and the readers and
// writers of the formats Tessera understands (docs/trace-format.md).
//
// A trace is the sequence of allocation requests one device saw: allocs with the bytes the caller asked
// for, frees, and iteration markers. Blocks are named by dense ids that the reader assigns, one per block
// lifetime: a recorded address that is freed and handed out again becomes two blocks. Recordings that start
// mid-run have blocks that were live before the first event; they are listed apart (initial_blocks) so that
// a replay can create them before it starts.
#pragma once

#include <cstdint>
#include <filesystem>
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
enum class TraceEventKind : std::uint8_t { alloc, free, iteration, pause, resume };

std::string_view to_string(TraceEventKind kind) noexcept;

// The tag of an allocation, and of a pause or resume: an index into Trace::tags.
using TraceTag = std::uint32_t;
inline constexpr TraceTag trace_default_tag = 0;

// 32 bytes, no pointers: a replay streams through millions of them. backup and tag sit in what was padding.
struct TraceEvent {
  std::uint64_t size = 0;          // alloc, free: the block's requested bytes; iteration: the index
  std::int64_t time_us = no_time;  // when it was recorded, in microseconds; no_time when unknown
  BlockId block = 0;               // alloc, free
  std::uint32_t stream = 0;        // alloc, free: index into Trace::streams
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

// Every id and stream index in range; every initial block and every alloc names a block not seen before
// (ids are never reused) and has at least one byte; every free names a live block and repeats its size and
// stream. The tag table starts with "default" and names each tag once; every tag index is in range; a pause
// names a tag that is not paused, a resume one that is, and no alloc comes under a paused tag. The stacks are
// none, or as Trace says: one per event and one per initial block, each in the table. The error names the
// first offending event.
Result<void> validate(const Trace& trace);

// ---- Readers. Each reads a whole file; gzip-compressed input is recognized by its magic bytes and
// inflated transparently. A truncated or corrupt input is an Errc::invalid_argument error whose message
// names the source and where: "<source>:<line>: ..." for text, "<source>: byte N: ..." for binary. The
// parse_* variants read from memory; `source` names the input in messages and gives the trace its name.

// PyTorch memory snapshots (torch.cuda.memory._dump_snapshot): a pickle of a dict with device_traces and
// segments.
struct PytorchSnapshotOptions {
  std::optional<int> device;  // the device whose trace to read; default: the one with most events
};

// What the real PyTorch allocator did with segments during the recording, for checking a model of it. Not
// part of the trace: segment events are the allocator's, not the caller's.
struct RecordedSegmentAlloc {
  std::uint64_t size = 0;
  std::uint32_t stream = 0;   // index into Trace::streams
  std::size_t before_event = 0;  // index of the trace event that follows it (events.size() if none)
};

struct PytorchRecording {
  Trace trace;
  std::vector<RecordedSegmentAlloc> segment_allocs;  // every segment_alloc, in order
  // Reserved bytes: initial_reserved before the first event; reserved_after[i] after trace.events[i] and
  // every segment event recorded before it; final_reserved, the segments' total when the snapshot was taken.
  // initial_reserved = final_reserved - (segment_alloc + segment_map) + (segment_free + segment_unmap):
  // the snapshot's segments are the allocator's state at the end of the recording (docs/trace-format.md).
  std::uint64_t initial_reserved = 0;
  std::vector<std::uint64_t> reserved_after;
  std::uint64_t final_reserved = 0;
  std::vector<std::uint64_t> initial_segment_sizes;  // segments that existed before the first event
  bool reserved_consistent = true;  // false when the segment events do not add up (clamped at zero)
  std::size_t recorded_events = 0;  // entries in the device's trace, of every action
  std::size_t ignored_events = 0;   // free_requested, snapshot, oom and unknown actions
};

Result<PytorchRecording> read_pytorch_recording(const std::filesystem::path& path,
                                                const PytorchSnapshotOptions& options = {});
Result<PytorchRecording> parse_pytorch_recording(std::string_view bytes, std::string_view source,
                                                 const PytorchSnapshotOptions& options = {});
Result<Trace> read_pytorch_snapshot(const std::filesystem::path& path, const PytorchSnapshotOptions& options = {});
Result<Trace> parse_pytorch_snapshot(std::string_view bytes, std::string_view source,
                                     const PytorchSnapshotOptions& options = {});

// Per-tensor lifetimes, CSV "id,lower,upper,size" with a header (more columns are ignored): live from step
// lower to step upper (exclusive). At each step frees come before allocs, each in order of id.
Result<Trace> read_lifetimes_csv(const std::filesystem::path& path);
Result<Trace> parse_lifetimes_csv(std::string_view bytes, std::string_view source);

// STAlloc's Megatron trace (mem_log_dev<N>.txt): "1 <ptr> <size> <stream>" mallocs, "0 <ptr> <size> <stream>"
// frees, "Iteration Index : <n>" markers become iteration events, the other marker lines are skipped.
Result<Trace> read_stalloc_trace(const std::filesystem::path& path);
Result<Trace> parse_stalloc_trace(std::string_view bytes, std::string_view source);

// What a profile says the real allocator held while it was recorded, beside the trace: the line a replay's
// reserved bytes are compared with. Kept apart from Trace so that the replay of a trace does not depend on it.
struct RecordedTotals {
  // After each trace event (trace.events.size() entries), or empty when the profile does not carry them.
  std::vector<std::uint64_t> reserved_after;
  std::vector<std::uint64_t> allocated_after;
  std::uint64_t peak_reserved = 0;   // the most of reserved_after, and of the reserved bytes before the first event
  std::uint64_t peak_allocated = 0;  // likewise of allocated_after
};

enum class TraceFormat : std::uint8_t;

struct ProfileRecording {
  Trace trace;
  RecordedTotals recorded;
  TraceFormat format{};  // what it was read as (read_recording); TraceFormat::automatic when not said
  // Where `recorded` comes from when not from the file itself: the memory_record.csv read beside it.
  std::filesystem::path recorded_from;
};

// Kineto's Chrome trace JSON (torch.profiler with profile_memory=True, export_chrome_trace): the "[memory]"
// instant events of one device. `device` names it as Trace::device does ("cpu", "cuda:0"); default: the
// device with the most events.
struct KinetoTraceOptions {
  std::optional<std::string> device;
};

Result<ProfileRecording> read_kineto_recording(const std::filesystem::path& path, const KinetoTraceOptions& options = {});
Result<ProfileRecording> parse_kineto_recording(std::string_view bytes, std::string_view source,
                                                const KinetoTraceOptions& options = {});
Result<Trace> read_kineto_trace(const std::filesystem::path& path, const KinetoTraceOptions& options = {});
Result<Trace> parse_kineto_trace(std::string_view bytes, std::string_view source, const KinetoTraceOptions& options = {});

// torch_npu's profiler output operator_memory.csv: one row per tensor lifetime. `device` names the device as
// Trace::device does ("npu:0", the Device Type column in lower case); default: the one with the most rows.
struct OperatorMemoryOptions {
  std::optional<std::string> device;
};

Result<ProfileRecording> read_operator_memory_recording(const std::filesystem::path& path,
                                                        const OperatorMemoryOptions& options = {});
Result<ProfileRecording> parse_operator_memory_recording(std::string_view bytes, std::string_view source,
                                                         const OperatorMemoryOptions& options = {});
Result<Trace> read_operator_memory_csv(const std::filesystem::path& path, const OperatorMemoryOptions& options = {});
Result<Trace> parse_operator_memory_csv(std::string_view bytes, std::string_view source,
                                        const OperatorMemoryOptions& options = {});

// torch_npu's profiler output memory_record.csv, written beside operator_memory.csv: the allocators' totals
// over time, one row per change. Its columns, as torch_npu's profiler documentation lists them: Component,
// Timestamp(us), Total Allocated(MB), Total Reserved(MB), Total Active(MB), Stream Ptr, Device Type. Found by
// name in the header; Component, Timestamp(us), Total Reserved(MB) and Device Type are required (the others
// are not read: other writers of the file, MindSpore's profiler among them, leave out Stream Ptr).
struct MemoryRecord {
  std::size_t line = 0;    // in the file, for messages
  std::string component;   // "PTA" (torch_npu's caching allocator), "GE", "PTA+GE", "APP" (the whole process), ...
  std::int64_t time_us = 0;  // Timestamp(us), rounded to the microsecond
  std::optional<std::uint64_t> allocated;  // Total Allocated, in bytes; none when the file has no such column
  std::uint64_t reserved = 0;              // Total Reserved, in bytes
  std::string device;      // as Trace::device names it ("npu:0"): Device Type in lower case
};

Result<std::vector<MemoryRecord>> read_memory_record_csv(const std::filesystem::path& path);
Result<std::vector<MemoryRecord>> parse_memory_record_csv(std::string_view bytes, std::string_view source);

// The component whose rows are the real allocator's: PTA, torch_npu's caching allocator, whose blocks
// operator_memory.csv's aten rows are. (APP counts every byte the process holds on the device, the runtime's
// included; GE is the graph engine's own memory.)
inline constexpr std::string_view real_allocator_component = "PTA";

// The totals of `component`'s records on the trace's device after each trace event: those of the last record
// at or before the event's time (0 before the first). Records before the first event count towards the peaks
// as the totals before it; records after the last event are past the trace. None when no record is of that
// component and device, or when an event of the trace carries no time.
std::optional<RecordedTotals> totals_from_memory_record(const Trace& trace, const std::vector<MemoryRecord>& records,
                                                        std::string_view component = real_allocator_component);

// Tessera's own text format (docs/trace-format.md), written by write_text_trace and read back unchanged.
Result<Trace> read_text_trace(const std::filesystem::path& path);
Result<Trace> parse_text_trace(std::string_view bytes, std::string_view source);
std::string format_text_trace(const Trace& trace);
// Gzip-compressed when the path ends in ".gz".
Result<void> write_text_trace(const Trace& trace, const std::filesystem::path& path);

enum class TraceFormat : std::uint8_t {
  automatic,
  pytorch_snapshot,
  lifetimes_csv,
  stalloc,
  text,
  kineto_json,
  operator_memory_csv,
};

std::string_view to_string(TraceFormat format) noexcept;

struct TraceReadOptions {
  TraceFormat format = TraceFormat::automatic;  // automatic: by content, then by extension
  PytorchSnapshotOptions pytorch;
  // Unset: the device pytorch.device names ("cuda:N"), else the one with the most events.
  std::optional<std::string> profile_device = std::nullopt;
};

// Any of the formats above.
Result<Trace> read_trace(const std::filesystem::path& path, const TraceReadOptions& options = {});
Result<Trace> parse_trace(std::string_view bytes, std::string_view source, const TraceReadOptions& options = {});
// Any format, with what the file recorded of the real allocator: PyTorch snapshots' and the profiles'
// reserved bytes, the profiles' allocated bytes (empty where the format has none). read_recording of an
// operator_memory.csv with a memory_record.csv in the same folder takes the totals from the latter (its PTA
// rows, totals_from_memory_record) where it has any; an unreadable memory_record.csv is an error naming it.
Result<ProfileRecording> read_recording(const std::filesystem::path& path, const TraceReadOptions& options = {});
Result<ProfileRecording> parse_recording(std::string_view bytes, std::string_view source,
                                         const TraceReadOptions& options = {});

}  // namespace tessera
