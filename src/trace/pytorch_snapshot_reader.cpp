// PyTorch memory snapshots: the pickle's device_traces become the trace, its segments supply the blocks
// that were live before recording began and the reserved bytes at the end (docs/trace-format.md).
//
// The caller's view only: a block is allocated at `alloc` (size = the requested bytes) and becomes free at
// `free_completed`, when the allocator may reuse it, not at `free_requested`, when the caller let go of it
// but the device may still be using it. Segment events are the allocator's own and go to the side record.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <span>
#include <unordered_map>
#include <unordered_set>

#include "tessera/trace.hpp"
#include "trace/gzip_file.hpp"
#include "trace/pickle_reader.hpp"
#include "trace/readers.hpp"
#include "trace/snapshot_pools.hpp"
#include "trace/trace_builder.hpp"

namespace tessera {

namespace {

using trace_detail::PickleKind;
using trace_detail::PickleRef;
using trace_detail::PickleTree;
using trace_detail::TraceBuilder;

class SnapshotReader {
 public:
  SnapshotReader(const PickleTree& tree, std::string_view source, const PytorchSnapshotOptions& options)
      : tree_(tree), source_(source), options_(options) {}

  Result<PytorchRecording> read() {
    const PickleRef root = tree_.root();
    if (tree_.kind(root) != PickleKind::dict) {
      return fail("the pickle", fmt::format("holds a {}, not a snapshot dict", to_string(tree_.kind(root))));
    }
    const std::optional<PickleRef> traces = tree_.find(root, "device_traces");
    if (!traces || tree_.kind(*traces) != PickleKind::list) {
      return fail("the snapshot",
                  "has no device_traces list (record with torch.cuda.memory._record_memory_history first)");
    }
    const std::span<const PickleRef> devices = tree_.items(*traces);
    int device = 0;
    if (options_.device) {
      device = *options_.device;
      if (device < 0 || (!devices.empty() && static_cast<std::size_t>(device) >= devices.size())) {
        return fail("device_traces", fmt::format("has no device {} (it holds {})", device, devices.size()));
      }
    } else {
      std::size_t most = 0;
      for (std::size_t d = 0; d < devices.size(); ++d) {
        const std::size_t count = tree_.size(devices[d]);
        if (count > most) {
          most = count;
          device = static_cast<int>(d);
        }
      }
    }
    if (!devices.empty()) {
      const PickleRef events = devices[static_cast<std::size_t>(device)];
      if (tree_.kind(events) != PickleKind::list) {
        return fail(fmt::format("device_traces[{}]", device), "is not a list");
      }
      recording_.recorded_events = tree_.items(events).size();
      if (auto error = read_segment_pools(device, tree_.items(events))) return std::move(*error);
      for (std::size_t i = 0; i < tree_.items(events).size(); ++i) {
        if (auto error = read_event(device, i, tree_.items(events)[i])) return std::move(*error);
      }
    }
    if (auto error = read_segments(device)) return std::move(*error);
    return finish(device);
  }

 private:
  Error fail(std::string_view where, std::string_view what) const {
    return make_error(Errc::invalid_argument, fmt::format("{}: {} {}", source_, where, what));
  }

  // A refused alloc or declaration other than one at a live address.
  Error builder_error(std::string_view where, TraceBuilder::Status status) const {
    if (status == TraceBuilder::Status::zero_size) {
      return fail(where, fmt::format("is a block of 0 bytes: {}", TraceBuilder::zero_size_reason));
    }
    return fail(where, "is one block too many");
  }

  // A required integer field of a dict.
  std::optional<Error> field(PickleRef dict, std::string_view key, std::string_view where, std::int64_t& out) const {
    const std::optional<PickleRef> value = tree_.find(dict, key);
    if (!value) return fail(where, fmt::format("has no '{}'", key));
    const std::optional<std::int64_t> number = tree_.integer(*value);
    if (!number) return fail(where, fmt::format("has a {} for '{}', not an int", to_string(tree_.kind(*value)), key));
    out = *number;
    return {};
  }

  std::optional<Error> size_field(PickleRef dict, std::string_view key, std::string_view where,
                                  std::uint64_t& out) const {
    std::int64_t value = 0;
    if (auto error = field(dict, key, where, value)) return error;
    if (value < 0) return fail(where, fmt::format("has a negative '{}' ({})", key, value));
    out = static_cast<std::uint64_t>(value);
    return {};
  }

  std::uint32_t stream_of(PickleRef dict) {
    std::int64_t value = 0;
    if (const auto stream = tree_.find(dict, "stream")) value = tree_.integer(*stream).value_or(0);
    return builder_.stream(StreamId{static_cast<std::uintptr_t>(value)});
  }

  std::int64_t time_of(PickleRef dict) const {
    const std::optional<PickleRef> time = tree_.find(dict, "time_us");
    if (!time) return no_time;
    if (const auto integer = tree_.integer(*time)) return *integer;
    if (const auto real = tree_.real(*time)) return std::llround(*real);
    return no_time;  // None: the recording had no clock
  }

  // The entry's or block's `frames` as an index into the stack table (0: none). Frames that are not a list of
  // {filename, line, name} dicts are no stack: the viewer shows none either. Each distinct stack is kept once.
  std::uint32_t stack_of(PickleRef dict) {
    const std::optional<PickleRef> frames = tree_.find(dict, "frames");
    if (!frames || tree_.kind(*frames) != PickleKind::list || tree_.items(*frames).empty()) return 0;
    if (const auto known = stack_by_list_.find(*frames); known != stack_by_list_.end()) return known->second;
    Stack stack;
    std::string key;
    for (const PickleRef frame : tree_.items(*frames)) {
      if (tree_.kind(frame) != PickleKind::dict) return 0;
      StackFrame out;
      if (const auto filename = tree_.find(frame, "filename")) out.filename = tree_.string(*filename).value_or("");
      if (const auto name = tree_.find(frame, "name")) out.name = tree_.string(*name).value_or("");
      if (const auto line = tree_.find(frame, "line")) {
        out.line = static_cast<std::uint32_t>(std::clamp<std::int64_t>(tree_.integer(*line).value_or(0), 0, std::numeric_limits<std::uint32_t>::max()));
      }
      key += fmt::format("{}\n{}\n{}\n", out.filename, out.line, out.name);
      stack.push_back(std::move(out));
    }
    const auto [it, inserted] = stack_by_text_.try_emplace(std::move(key), static_cast<std::uint32_t>(stacks_.size()));
    if (inserted) stacks_.push_back(std::move(stack));
    stack_by_list_.emplace(*frames, it->second);
    return it->second;
  }

  std::optional<Error> read_event(int device, std::size_t index, PickleRef event) {
    const std::string where = fmt::format("device_traces[{}][{}]", device, index);
    if (tree_.kind(event) != PickleKind::dict) return fail(where, "is not a dict");
    const std::optional<PickleRef> action_ref = tree_.find(event, "action");
    const std::optional<std::string_view> action = action_ref ? tree_.string(*action_ref) : std::nullopt;
    if (!action) return fail(where, "has no 'action' string");
    const std::string located = fmt::format("{} ({})", where, *action);

    if (*action == "alloc" || *action == "free_completed") {
      std::int64_t address = 0;
      std::uint64_t size = 0;
      if (auto error = field(event, "addr", located, address)) return error;
      if (auto error = size_field(event, "size", located, size)) return error;
      const auto key = static_cast<std::uint64_t>(address);
      const std::uint32_t stream = stream_of(event);
      const std::int64_t time = time_of(event);
      if (time != no_time) last_time_ = time;
      if (*action == "alloc") {
        enter_pool(pools_.pool_of(key, index), stream, time);
        const TraceBuilder::Status status = builder_.alloc(key, size, stream, time);
        if (status == TraceBuilder::Status::already_live) {
          return fail(located, fmt::format("at address {:#x}, which holds a live block", key));
        }
        if (status != TraceBuilder::Status::ok) return builder_error(located, status);
        if (const std::uint32_t stack = stack_of(event); stack != 0) builder_.stack_of_last_event(stack);
      } else {
        // A free of an address the recording never used frees a block live before it began.
        if (!builder_.seen(key)) {
          const TraceBuilder::Status status = builder_.declare_initial(key, size, stream);
          if (status != TraceBuilder::Status::ok) return builder_error(located, status);
          // Its alloc was not recorded: the free's stack is all that is known of it.
          if (const std::uint32_t stack = stack_of(event); stack != 0) builder_.stack_of_last_initial(stack);
        }
        if (builder_.free(key, time) != TraceBuilder::Status::ok) {
          return fail(located, fmt::format("of address {:#x}, which holds no live block", key));
        }
        if (const std::uint32_t stack = stack_of(event); stack != 0) builder_.stack_of_last_event(stack);
      }
      reserved_delta_at_event_.push_back(reserved_delta_);
      return {};
    }
    const bool grows = *action == "segment_alloc" || *action == "segment_map";
    if (grows || *action == "segment_free" || *action == "segment_unmap") {
      std::int64_t address = 0;
      std::uint64_t size = 0;
      if (auto error = field(event, "addr", located, address)) return error;
      if (auto error = size_field(event, "size", located, size)) return error;
      reserved_delta_ += grows ? static_cast<std::int64_t>(size) : -static_cast<std::int64_t>(size);
      const auto key = static_cast<std::uint64_t>(address);
      if (*action == "segment_alloc") {
        recording_.segment_allocs.push_back(RecordedSegmentAlloc{size, stream_of(event), builder_.event_count()});
      } else if (*action == "segment_free" && !segments_seen_.contains(key)) {
        recording_.initial_segment_sizes.push_back(size);  // freed before the recording allocated it
      }
      if (*action == "segment_alloc" || *action == "segment_free") segments_seen_.insert(key);
      return {};
    }
    ++recording_.ignored_events;  // free_requested, snapshot, oom, and actions of later PyTorch versions
    return {};
  }

  // The private pools of the end state's segments (snapshot_pools.hpp), and the entries that last made or freed
  // a segment where a pooled one lies, before the entries are read.
  std::optional<Error> read_segment_pools(int device, std::span<const PickleRef> entries) {
    const std::optional<PickleRef> segments = tree_.find(tree_.root(), "segments");
    if (!segments || tree_.kind(*segments) != PickleKind::list) return {};  // read_segments says what is wrong
    for (std::size_t s = 0; s < tree_.items(*segments).size(); ++s) {
      const PickleRef segment = tree_.items(*segments)[s];
      if (tree_.kind(segment) != PickleKind::dict) continue;
      const std::optional<PickleRef> pool_ref = tree_.find(segment, "segment_pool_id");
      if (!pool_ref) continue;  // PyTorch before 2.1: every segment is the shared cache's
      const std::string where = fmt::format("segments[{}].segment_pool_id", s);
      const std::span<const PickleRef> pair = tree_.items(*pool_ref);
      const bool sequence = tree_.kind(*pool_ref) == PickleKind::tuple || tree_.kind(*pool_ref) == PickleKind::list;
      std::optional<std::int64_t> first;
      std::optional<std::int64_t> second;
      if (sequence && pair.size() == 2) {
        first = tree_.integer(pair[0]);
        second = tree_.integer(pair[1]);
      }
      if (!first || !second || *first < 0 || *second < 0) {
        return fail(where, "is not a pair of non-negative ints (PyTorch's MempoolId_t)");
      }
      const PoolId pool{static_cast<std::uint64_t>(*first), static_cast<std::uint64_t>(*second)};
      if (pool == PoolId{}) continue;
      // Malformed fields are read_segments' to report, where it meets them.
      const auto segment_device = tree_.find(segment, "device");
      const auto address = tree_.find(segment, "address");
      const auto total_size = tree_.find(segment, "total_size");
      if (!segment_device || !address || !total_size || tree_.integer(*segment_device) != device) continue;
      const std::optional<std::int64_t> start = tree_.integer(*address);
      const std::optional<std::int64_t> size = tree_.integer(*total_size);
      if (!start || !size || *size < 0) continue;
      if (auto overlap = pools_.add_segment(static_cast<Address>(*start), static_cast<Bytes>(*size), pool, s)) {
        return fail(fmt::format("segments[{}]", s), *overlap);
      }
    }
    if (pools_.empty()) return {};
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const PickleRef entry = entries[i];
      if (tree_.kind(entry) != PickleKind::dict) continue;
      const auto action = tree_.find(entry, "action");
      const auto address = tree_.find(entry, "addr");
      if (!action || !address) continue;
      const std::string_view name = tree_.string(*action).value_or("");
      if (name != "segment_alloc" && name != "segment_free") continue;
      if (const auto start = tree_.integer(*address)) pools_.segment_event(static_cast<Address>(*start), i);
    }
    return {};
  }

  // An allocation into `pool` on `stream` (none: the shared cache's) is about to be added: the pool's
  // begin_pool comes first, unless the allocations before went to it on that stream too.
  void enter_pool(std::optional<std::uint32_t> pool, std::uint32_t stream, std::int64_t time) {
    if (open_pool_ && (!pool || *pool != open_pool_->pool || stream != open_pool_->stream)) leave_pool(time);
    if (!pool || open_pool_) return;
    add_pool_event(TraceEvent::begin_pool(*pool, stream, time));
    open_pool_ = OpenPool{*pool, stream};
  }

  void leave_pool(std::int64_t time) {
    if (!open_pool_) return;
    add_pool_event(TraceEvent::end_pool(open_pool_->pool, time));
    open_pool_.reset();
  }

  void add_pool_event(const TraceEvent& event) {
    builder_.pool_event(event);
    reserved_delta_at_event_.push_back(reserved_delta_);
    pool_events_ = true;
  }

  std::optional<Error> read_segments(int device) {
    const std::optional<PickleRef> segments = tree_.find(tree_.root(), "segments");
    if (!segments) return {};  // a trace without the allocator's state: no untouched blocks to add
    if (tree_.kind(*segments) != PickleKind::list) return fail("segments", "is not a list");
    for (std::size_t s = 0; s < tree_.items(*segments).size(); ++s) {
      const PickleRef segment = tree_.items(*segments)[s];
      const std::string where = fmt::format("segments[{}]", s);
      if (tree_.kind(segment) != PickleKind::dict) return fail(where, "is not a dict");
      std::int64_t segment_device = 0;
      if (auto error = field(segment, "device", where, segment_device)) return error;
      if (segment_device != device) continue;
      std::int64_t address = 0;
      std::uint64_t total_size = 0;
      if (auto error = field(segment, "address", where, address)) return error;
      if (auto error = size_field(segment, "total_size", where, total_size)) return error;
      recording_.final_reserved += total_size;
      if (!segments_seen_.contains(static_cast<std::uint64_t>(address))) {
        recording_.initial_segment_sizes.push_back(total_size);
      }
      const std::optional<PickleRef> blocks = tree_.find(segment, "blocks");
      if (!blocks) continue;
      // Each segment has blocks of its own. A pickle's memo can hand one list to every segment, and reading
      // it once per segment would take time quadratic in the file's size.
      if (const auto [first, inserted] = blocks_lists_.try_emplace(*blocks, s); !inserted) {
        return fail(fmt::format("{}.blocks", where),
                    fmt::format("is the list of segments[{}] again (the pickle shares it): a snapshot lists each "
                                "block once",
                                first->second));
      }
      // Snapshots before PyTorch 2.1 give blocks no address: they tile the segment in order.
      auto block_address = static_cast<std::uint64_t>(address);
      for (std::size_t b = 0; b < tree_.items(*blocks).size(); ++b) {
        const PickleRef block = tree_.items(*blocks)[b];
        const std::string block_where = fmt::format("segments[{}].blocks[{}]", s, b);
        if (tree_.kind(block) != PickleKind::dict) return fail(block_where, "is not a dict");
        std::uint64_t size = 0;
        if (auto error = size_field(block, "size", block_where, size)) return error;
        if (tree_.find(block, "address")) {
          std::int64_t explicit_address = 0;
          if (auto error = field(block, "address", block_where, explicit_address)) return error;
          block_address = static_cast<std::uint64_t>(explicit_address);
        }
        const std::optional<PickleRef> state_ref = tree_.find(block, "state");
        const std::string_view state = state_ref ? tree_.string(*state_ref).value_or("") : "";
        // A block the events never touched and that is still allocated was live all along. (One the events
        // did touch is the events' business; active_pending_free is allocated until free_completed.)
        if ((state == "active_allocated" || state == "active_pending_free") && !builder_.seen(block_address)) {
          std::uint64_t requested = size;
          if (tree_.find(block, "requested_size")) {
            if (auto error = size_field(block, "requested_size", block_where, requested)) return error;
          }
          const TraceBuilder::Status status = builder_.declare_initial(block_address, requested, stream_of(segment));
          if (status != TraceBuilder::Status::ok) return builder_error(block_where, status);
          if (const std::uint32_t stack = stack_of(block); stack != 0) builder_.stack_of_last_initial(stack);
        }
        block_address += size;
      }
    }
    return {};
  }

  Result<PytorchRecording> finish(int device) {
    leave_pool(last_time_);
    // The segments are the allocator's state when the snapshot was taken, after the last event; the
    // reserved bytes before the first event are that total with the recorded segment changes undone.
    std::int64_t initial = static_cast<std::int64_t>(recording_.final_reserved) - reserved_delta_;
    if (initial < 0) {
      recording_.reserved_consistent = false;
      initial = 0;
    }
    recording_.initial_reserved = static_cast<std::uint64_t>(initial);
    recording_.reserved_after.reserve(reserved_delta_at_event_.size());
    for (const std::int64_t delta : reserved_delta_at_event_) {
      std::int64_t reserved = initial + delta;
      if (reserved < 0) {
        recording_.reserved_consistent = false;
        reserved = 0;
      }
      recording_.reserved_after.push_back(static_cast<std::uint64_t>(reserved));
    }
    recording_.trace = builder_.finish(trace_detail::trace_name_from_source(source_), fmt::format("cuda:{}", device));
    if (pool_events_) recording_.trace.pools = pools_.pools();
    if (!recording_.trace.event_stacks.empty() || !recording_.trace.initial_stacks.empty()) recording_.trace.stacks = std::move(stacks_);
    return std::move(recording_);
  }

  const PickleTree& tree_;
  std::string_view source_;
  const PytorchSnapshotOptions& options_;
  TraceBuilder builder_;
  PytorchRecording recording_;
  std::int64_t reserved_delta_ = 0;                    // segment bytes gained since the first event
  std::vector<std::int64_t> reserved_delta_at_event_;  // reserved_delta_ as each trace event was read
  std::unordered_set<std::uint64_t> segments_seen_;    // addresses of segment_alloc and segment_free
  std::unordered_map<PickleRef, std::size_t> blocks_lists_;  // the segment each blocks list was read for
  std::vector<Stack> stacks_{Stack{}};                        // the trace's stack table, stacks_[0] empty
  std::unordered_map<std::string, std::uint32_t> stack_by_text_;
  std::unordered_map<PickleRef, std::uint32_t> stack_by_list_;  // a frames list the pickle shares, read once
  trace_detail::SnapshotPools pools_;
  struct OpenPool {
    std::uint32_t pool = 0;
    std::uint32_t stream = 0;
  };
  std::optional<OpenPool> open_pool_;  // the pool the allocations go to between its begin_pool and end_pool
  bool pool_events_ = false;
  std::int64_t last_time_ = no_time;  // of the last alloc or free read, for the last end_pool
};

}  // namespace

namespace trace_detail {

Result<PytorchRecording> parse_pytorch_inflated(std::string_view bytes, std::string_view source, bool inflated,
                                                const PytorchSnapshotOptions& options) {
  const std::string where = inflated ? fmt::format("{} (inflated)", source) : std::string(source);
  Result<PickleTree> tree = parse_pickle(bytes, where);
  if (!tree) return std::move(tree).error();
  return SnapshotReader(*tree, source, options).read();
}

}  // namespace trace_detail

Result<PytorchRecording> parse_pytorch_recording(std::string_view bytes, std::string_view source,
                                                 const PytorchSnapshotOptions& options) {
  return trace_detail::with_inflated(
      bytes, source,
      [&](std::string_view pickle, bool inflated) {
        return trace_detail::parse_pytorch_inflated(pickle, source, inflated, options);
      },
      trace_detail::trace_start_check(TraceFormat::pytorch_snapshot, source));
}

Result<PytorchRecording> read_pytorch_recording(const std::filesystem::path& path,
                                                const PytorchSnapshotOptions& options) {
  Result<std::string> bytes = trace_detail::read_file_bytes(
      path, trace_detail::trace_start_check(TraceFormat::pytorch_snapshot, path.string()));
  if (!bytes) return std::move(bytes).error();
  return parse_pytorch_recording(*bytes, path.string(), options);
}

Result<Trace> parse_pytorch_snapshot(std::string_view bytes, std::string_view source,
                                     const PytorchSnapshotOptions& options) {
  Result<PytorchRecording> recording = parse_pytorch_recording(bytes, source, options);
  if (!recording) return std::move(recording).error();
  return std::move(recording->trace);
}

Result<Trace> read_pytorch_snapshot(const std::filesystem::path& path, const PytorchSnapshotOptions& options) {
  Result<PytorchRecording> recording = read_pytorch_recording(path, options);
  if (!recording) return std::move(recording).error();
  return std::move(recording->trace);
}

}  // namespace tessera
