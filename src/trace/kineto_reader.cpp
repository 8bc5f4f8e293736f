// Kineto's Chrome trace JSON, as torch.profiler's export_chrome_trace writes it with profile_memory=True
// (docs/trace-format.md). Every allocation and free the profiled allocator reported is an instant event
// named "[memory]" whose args hold Addr, Bytes (negative for a free), Device Type, Device Id and the
// allocator's Total Allocated and Total Reserved after it. The other events (operators, kernels) are not
// the allocator's and are dropped as they are parsed (trace/json_events.hpp), so that a large profile is
// never held whole; of a [memory] event only its fields are kept.
//
// Bytes live before profiling began appear in two ways: a free of an address the profile never allocated
// (a block of that size, live from the start), and Total Allocated at the first event, which counts every
// live byte. What the frees do not account for becomes one more initial block, so that the trace's live
// bytes follow the profile's own Total Allocated.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tessera/trace.hpp"
#include "trace/gzip_file.hpp"
#include "trace/json_events.hpp"
#include "trace/readers.hpp"
#include "trace/trace_builder.hpp"

namespace tessera {

namespace {

using nlohmann::json;
using trace_detail::TraceBuilder;

constexpr std::string_view memory_event_name = "[memory]";

// A [memory] event's fields, as few bytes as they fit in: a trace may hold 10^7 of them.
struct MemoryEvent {
  std::size_t index = 0;  // in traceEvents
  std::uint64_t address = 0;
  std::int64_t bytes = 0;
  double ts = 0;
  std::uint64_t total_allocated = 0;
  std::uint64_t total_reserved = 0;
  std::uint32_t device = 0;  // in KinetoReader::devices_
  bool has_ts = false;
  bool has_allocated = false;
  bool has_reserved = false;
};

// c10's DeviceType values (c10/core/DeviceType.h); 20 is PrivateUse1, which torch_npu names "npu".
std::string device_name(std::int64_t type, std::int64_t id) {
  switch (type) {
    case 0: return "cpu";
    case 1: return fmt::format("cuda:{}", id);
    case 12: return fmt::format("xpu:{}", id);
    case 13: return fmt::format("mps:{}", id);
    case 20: return fmt::format("npu:{}", id);
    default: return fmt::format("device_type_{}:{}", type, id);
  }
}

class KinetoReader {
 public:
  KinetoReader(std::string_view source, std::string_view position_source, const KinetoTraceOptions& options)
      : source_(source), position_source_(position_source), options_(options) {}

  Result<ProfileRecording> read(std::string_view text) {
    std::vector<MemoryEvent> memory;
    trace_detail::JsonEventSink sink;
    // What read_event looks at; the rest of every event (an operator's args) is skipped unbuilt.
    sink.fields = {"name", "ts", "args/Addr", "args/Bytes", "args/Device Type", "args/Device Id",
                   "args/Total Allocated", "args/Total Reserved"};
    sink.restart = [&] {
      memory.clear();
      devices_.clear();
      device_index_.clear();
    };
    sink.event = [&](std::size_t index, const json& event) -> std::optional<Error> {
      const auto name = event.find("name");
      if (name == event.end() || !name->is_string() || name->get_ref<const std::string&>() != memory_event_name) return {};
      MemoryEvent kept;
      if (auto error = read_event(event, index, kept)) return error;
      memory.push_back(kept);
      return {};
    };
    if (Result<void> read = trace_detail::read_json_events(text, source_, position_source_, sink); !read) {
      return std::move(read).error();
    }
    if (memory.empty()) {
      return fail("the trace", "has no \"[memory]\" events (record with torch.profiler's profile_memory=True)");
    }
    return build(memory);
  }

 private:
  Error fail(std::string_view where, std::string_view what) const {
    return make_error(Errc::invalid_argument, fmt::format("{}: {} {}", source_, where, what));
  }

  // The place is formatted only for an error: 10^7 events would spend seconds on it.
  Error fail_event(std::size_t index, std::string_view what) const {
    return fail(fmt::format("traceEvents[{}] ([memory])", index), what);
  }

  // An integer field of args; `required` or absent.
  std::optional<Error> integer(const json& args, const char* key, std::size_t index, std::optional<std::int64_t>& out,
                               bool required) const {
    const auto found = args.find(key);
    if (found == args.end()) {
      if (required) return fail_event(index, fmt::format("has no '{}' in its args", key));
      return {};
    }
    if (found->is_number_unsigned()) {
      const auto value = found->get<std::uint64_t>();
      // Addresses can use the top bit; the other fields cannot.
      if (value > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) && std::string_view(key) != "Addr") {
        return fail_event(index, fmt::format("has '{}' {}, out of range", key, value));
      }
      out = static_cast<std::int64_t>(value);
      return {};
    }
    if (found->is_number_integer()) {
      out = found->get<std::int64_t>();
      return {};
    }
    return fail_event(index, fmt::format("has '{}' {}, not an integer", key, found->dump()));
  }

  std::optional<Error> read_event(const json& event, std::size_t index, MemoryEvent& out) {
    out.index = index;
    const auto args = event.find("args");
    if (args == event.end() || !args->is_object()) return fail_event(index, "has no args object");
    std::optional<std::int64_t> address;
    std::optional<std::int64_t> bytes;
    std::optional<std::int64_t> device_type;
    std::optional<std::int64_t> device_id;
    std::optional<std::int64_t> allocated;
    std::optional<std::int64_t> reserved;
    if (auto error = integer(*args, "Addr", index, address, true)) return error;
    if (auto error = integer(*args, "Bytes", index, bytes, true)) return error;
    if (auto error = integer(*args, "Device Type", index, device_type, false)) return error;
    if (auto error = integer(*args, "Device Id", index, device_id, false)) return error;
    if (auto error = integer(*args, "Total Allocated", index, allocated, false)) return error;
    if (auto error = integer(*args, "Total Reserved", index, reserved, false)) return error;
    if (*bytes == 0) return fail_event(index, fmt::format("has Bytes 0: {}", TraceBuilder::zero_size_reason));
    if (*bytes == std::numeric_limits<std::int64_t>::min()) return fail_event(index, "has Bytes out of range");
    if (allocated && *allocated < 0) return fail_event(index, fmt::format("has a negative Total Allocated ({})", *allocated));
    if (reserved && *reserved < 0) return fail_event(index, fmt::format("has a negative Total Reserved ({})", *reserved));
    out.address = static_cast<std::uint64_t>(*address);
    out.bytes = *bytes;
    out.device = device_of(device_type.value_or(0), device_id.value_or(-1));
    out.has_allocated = allocated.has_value();
    out.total_allocated = static_cast<std::uint64_t>(allocated.value_or(0));
    out.has_reserved = reserved.has_value();
    out.total_reserved = static_cast<std::uint64_t>(reserved.value_or(0));
    if (const auto ts = event.find("ts"); ts != event.end()) {
      if (!ts->is_number() || !std::isfinite(ts->get<double>())) return fail_event(index, fmt::format("has ts {}, not a number", ts->dump()));
      out.has_ts = true;
      out.ts = ts->get<double>();
    }
    return {};
  }

  Result<ProfileRecording> build(std::vector<MemoryEvent>& all) {
    // One device per trace: the one asked for, else the one with the most events (the first seen on a tie).
    // devices_ are in the order first seen.
    std::vector<std::size_t> counts(devices_.size());
    for (const MemoryEvent& event : all) ++counts[event.device];
    std::uint32_t chosen = 0;
    if (options_.device) {
      const auto match = std::find_if(devices_.begin(), devices_.end(),
                                      [&](const auto& key) { return device_name(key.first, key.second) == *options_.device; });
      if (match == devices_.end()) {
        std::vector<std::string> names;
        for (const auto& key : devices_) names.push_back(device_name(key.first, key.second));
        return fail("the trace", fmt::format("has no [memory] events of device {} (it has {})", *options_.device,
                                             fmt::join(names, ", ")));
      }
      chosen = static_cast<std::uint32_t>(match - devices_.begin());
    } else {
      for (std::uint32_t d = 0; d < counts.size(); ++d) {
        if (counts[d] > counts[chosen]) chosen = d;
      }
    }
    std::erase_if(all, [&](const MemoryEvent& event) { return event.device != chosen; });
    // Kineto sorts by time, but events of several threads may interleave; ties keep the file's order.
    if (std::all_of(all.begin(), all.end(), [](const MemoryEvent& event) { return event.has_ts; })) {
      std::stable_sort(all.begin(), all.end(), [](const MemoryEvent& a, const MemoryEvent& b) { return a.ts < b.ts; });
    }

    ProfileRecording recording;
    recording.format = TraceFormat::kineto_json;
    RecordedTotals& recorded = recording.recorded;
    const bool has_allocated = std::all_of(all.begin(), all.end(), [](const auto& e) { return e.has_allocated; });
    const bool has_reserved = std::all_of(all.begin(), all.end(), [](const auto& e) { return e.has_reserved; });
    TraceBuilder builder;
    const std::uint32_t stream = builder.stream(default_stream);  // the events name no stream
    std::unordered_map<std::uint64_t, std::uint64_t> live_size;   // of each live address, to check the frees
    std::uint64_t freed_initial = 0;  // bytes of the blocks that frees show were live before the first event
    for (const MemoryEvent& event : all) {
      const std::int64_t time = event.has_ts ? std::llround(event.ts) : no_time;
      if (event.bytes > 0) {
        const auto size = static_cast<std::uint64_t>(event.bytes);
        const TraceBuilder::Status status = builder.alloc(event.address, size, stream, time);
        if (status == TraceBuilder::Status::already_live) {
          return fail_event(event.index, fmt::format("allocates address {:#x}, which holds a live block", event.address));
        }
        if (status != TraceBuilder::Status::ok) return fail_event(event.index, "is one block too many");
        live_size[event.address] = size;
      } else {
        // Kineto's Bytes of a free is the block's size with the sign turned.
        const auto size = static_cast<std::uint64_t>(-event.bytes);
        if (!builder.seen(event.address)) {  // a block live since before the profile began
          if (builder.declare_initial(event.address, size, stream) != TraceBuilder::Status::ok) {
            return fail_event(event.index, "is one block too many");
          }
          live_size[event.address] = size;
          freed_initial += size;
        }
        const auto found = live_size.find(event.address);
        if (found == live_size.end()) {
          return fail_event(event.index, fmt::format("frees address {:#x}, which holds no live block", event.address));
        }
        if (found->second != size) {
          return fail_event(event.index, fmt::format("frees {} bytes at {:#x}, where a block of {} bytes was allocated", size,
                                         event.address, found->second));
        }
        live_size.erase(found);
        builder.free(event.address, time);
      }
      if (has_allocated) recorded.allocated_after.push_back(event.total_allocated);
      if (has_reserved) recorded.reserved_after.push_back(event.total_reserved);
    }

    // Bytes live before the first event that no free names: one initial block (keyed by an address no event
    // used, so that it never meets one).
    if (has_allocated) {
      const MemoryEvent& first = all.front();
      const std::int64_t before = static_cast<std::int64_t>(first.total_allocated) - first.bytes;
      if (before > 0 && static_cast<std::uint64_t>(before) > freed_initial) {
        std::uint64_t key = 0;
        while (builder.seen(key)) --key;
        if (builder.declare_initial(key, static_cast<std::uint64_t>(before) - freed_initial, stream) !=
            TraceBuilder::Status::ok) {
          return fail("the trace", "has one block too many");
        }
      }
    }
    for (const std::uint64_t value : recorded.allocated_after) recorded.peak_allocated = std::max(recorded.peak_allocated, value);
    for (const std::uint64_t value : recorded.reserved_after) recorded.peak_reserved = std::max(recorded.peak_reserved, value);
    const auto [type, id] = devices_[chosen];
    recording.trace = builder.finish(trace_detail::trace_name_from_source(source_), device_name(type, id));
    return recording;
  }

  // The index of a (Device Type, Device Id) in devices_; events of one device mostly come in runs.
  std::uint32_t device_of(std::int64_t type, std::int64_t id) {
    const std::pair key{type, id};
    if (last_device_ < devices_.size() && devices_[last_device_] == key) return last_device_;
    const auto [found, added] = device_index_.try_emplace(key, static_cast<std::uint32_t>(devices_.size()));
    if (added) devices_.push_back(key);
    last_device_ = found->second;
    return last_device_;
  }

  std::string_view source_;
  std::string_view position_source_;  // the source, "(inflated)" when byte offsets are in inflated data
  const KinetoTraceOptions& options_;
  std::vector<std::pair<std::int64_t, std::int64_t>> devices_;  // (Device Type, Device Id), in the order first seen
  std::map<std::pair<std::int64_t, std::int64_t>, std::uint32_t> device_index_;
  std::uint32_t last_device_ = 0;
};

}  // namespace

namespace trace_detail {

Result<ProfileRecording> parse_kineto_inflated(std::string_view text, std::string_view source, bool inflated,
                                               const KinetoTraceOptions& options) {
  const std::string where = inflated ? fmt::format("{} (inflated)", source) : std::string(source);
  return KinetoReader(source, where, options).read(text);
}

}  // namespace trace_detail

Result<ProfileRecording> parse_kineto_recording(std::string_view bytes, std::string_view source,
                                                const KinetoTraceOptions& options) {
  return trace_detail::with_inflated(
      bytes, source,
      [&](std::string_view text, bool inflated) { return trace_detail::parse_kineto_inflated(text, source, inflated, options); },
      trace_detail::trace_start_check(TraceFormat::kineto_json, source));
}

Result<ProfileRecording> read_kineto_recording(const std::filesystem::path& path, const KinetoTraceOptions& options) {
  Result<std::string> bytes =
      trace_detail::read_file_bytes(path, trace_detail::trace_start_check(TraceFormat::kineto_json, path.string()));
  if (!bytes) return std::move(bytes).error();
  return parse_kineto_recording(*bytes, path.string(), options);
}

Result<Trace> parse_kineto_trace(std::string_view bytes, std::string_view source, const KinetoTraceOptions& options) {
  Result<ProfileRecording> recording = parse_kineto_recording(bytes, source, options);
  if (!recording) return std::move(recording).error();
  return std::move(recording->trace);
}

Result<Trace> read_kineto_trace(const std::filesystem::path& path, const KinetoTraceOptions& options) {
  Result<ProfileRecording> recording = read_kineto_recording(path, options);
  if (!recording) return std::move(recording).error();
  return std::move(recording->trace);
}

}  // namespace tessera
