// The readers and writers of the trace formats Tessera understands (docs/trace-format.md), over the trace
// model (tessera/trace_model.hpp), and the writers of PyTorch snapshot files from what an allocator holds
// (tessera/snapshot.hpp).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/result.hpp"
#include "tessera/snapshot.hpp"
#include "tessera/trace_model.hpp"
#include "tessera/types.hpp"

namespace tessera {

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
  // What the allocator did to its device memory, in order with the trace's events; not owned. Non-null: they
  // are written as segment_alloc, segment_free, segment_map and segment_unmap entries, and the segments are
  // what they leave (with a state: the state's mapped runs, which they must lead to), so that MemoryViz
  // draws the reserved bytes as they went. `changes_from_empty`: they start from an allocator that held
  // nothing (a replay); otherwise they are a window of a longer run (a history), and the pooled bytes before
  // it are the state's less what the window pooled.
  const std::vector<SegmentChange>* segment_changes = nullptr;
  bool changes_from_empty = true;
  // The first this many changes (from empty) made the memory that held the initial blocks: they are the
  // snapshot's starting state, in its segments but not written as entries, as PyTorch records memory that
  // existed before recording began (ReplayResult::starting_segment_changes).
  std::size_t starting_changes = 0;
  // Stacks of the events (AllocationHistory::stacks and event_stacks); not owned. An alloc's stack is
  // written as the `frames` of its alloc, of its free and of its block in the segments.
  const std::vector<Stack>* stacks = nullptr;
  const std::vector<std::uint32_t>* event_stacks = nullptr;
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
