// Kineto's Chrome trace JSON, as torch.profiler's export_chrome_trace writes it with profile_memory=True
// (docs/trace-format.md). Every allocation and free the profiled allocator reported is an instant event
// named "[memory]" whose args hold Addr, Bytes (negative for a free), Device Type, Device Id and the
// allocator's Total Allocated and Total Reserved after it. The other events (operators, kernels) are not
// the allocator's and are dropped as they are parsed, so that a large profile is never held whole.
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

#include "tessera/trace.hpp"
#include "trace/gzip_file.hpp"
#include "trace/readers.hpp"
#include "trace/trace_builder.hpp"

namespace tessera {

namespace {

using nlohmann::json;
using trace_detail::TraceBuilder;

constexpr std::string_view memory_event_name = "[memory]";

struct MemoryEvent {
  std::size_t index = 0;  // in traceEvents
  std::uint64_t address = 0;
  std::int64_t bytes = 0;
  std::int64_t device_type = 0;
  std::int64_t device_id = -1;
  std::optional<double> ts;
  std::optional<std::uint64_t> total_allocated;
  std::optional<std::uint64_t> total_reserved;
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
    json root;
    try {
      root = json::parse(text.begin(), text.end(),
                         [this](int depth, json::parse_event_t event, json& parsed) { return keep(depth, event, parsed); });
    } catch (const json::parse_error& error) {
      return make_error(Errc::invalid_argument,
                        fmt::format("{}: byte {}: not JSON: {}", position_source_, error.byte, reason(error.what())));
    } catch (const json::exception& error) {
      return make_error(Errc::invalid_argument, fmt::format("{}: not a Chrome trace: {}", source_, reason(error.what())));
    }
    const json* events = &root;
    if (root.is_object()) {
      const auto found = root.find("traceEvents");
      if (found == root.end() || !found->is_array()) return fail("the top-level object", "has no traceEvents array");
      events = &*found;
    } else if (!root.is_array()) {
      return fail("the top-level value", "is neither a traceEvents array nor an object holding one");
    }
    // Only the "[memory]" events are left in the array, in order; kept_index_ says where each stood.
    std::vector<MemoryEvent> memory;
    memory.reserve(events->size());
    for (std::size_t i = 0; i < events->size() && i < kept_index_.size(); ++i) {
      MemoryEvent event;
      if (auto error = read_event((*events)[i], kept_index_[i], event)) return std::move(*error);
      memory.push_back(event);
    }
    if (memory.empty()) {
      return fail("the trace", "has no \"[memory]\" events (record with torch.profiler's profile_memory=True)");
    }
    return build(memory);
  }

 private:
  // nlohmann's messages start with "[json.exception.parse_error.101] parse error at line 1, column 2: ".
  static std::string_view reason(std::string_view what) {
    const std::size_t colon = what.find(": ");
    return colon == std::string_view::npos ? what : what.substr(colon + 2);
  }

  Error fail(std::string_view where, std::string_view what) const {
    return make_error(Errc::invalid_argument, fmt::format("{}: {} {}", source_, where, what));
  }

  // The parser's callback: keeps the "[memory]" events of traceEvents and drops every other event.
  bool keep(int depth, json::parse_event_t event, json& parsed) {
    if (depth == 0 && (event == json::parse_event_t::object_start || event == json::parse_event_t::array_start)) {
      root_is_array_ = event == json::parse_event_t::array_start;
      return true;
    }
    const int event_depth = root_is_array_ ? 1 : 2;
    if (!root_is_array_ && depth == 1 && event == json::parse_event_t::key) {
      in_events_ = parsed.is_string() && parsed.get_ref<const std::string&>() == "traceEvents";
      if (in_events_) {  // a repeated key replaces the array before it
        kept_index_.clear();
        next_index_ = 0;
      }
      return true;
    }
    if (depth != event_depth || !(root_is_array_ || in_events_)) return true;
    if (event == json::parse_event_t::value || event == json::parse_event_t::array_end) {
      ++next_index_;  // an element that is no object: no event, but it has a place
      return false;
    }
    if (event != json::parse_event_t::object_end) return true;
    const std::size_t index = next_index_++;
    const auto name = parsed.find("name");
    if (name == parsed.end() || !name->is_string() || name->get_ref<const std::string&>() != memory_event_name) {
      return false;
    }
    kept_index_.push_back(index);
    return true;
  }

  // An integer field of args; `required` or absent.
  std::optional<Error> integer(const json& args, const char* key, std::string_view where, std::optional<std::int64_t>& out,
                               bool required) const {
    const auto found = args.find(key);
    if (found == args.end()) {
      if (required) return fail(where, fmt::format("has no '{}' in its args", key));
      return {};
    }
    if (found->is_number_unsigned()) {
      const auto value = found->get<std::uint64_t>();
      // Addresses can use the top bit; the other fields cannot.
      if (value > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) && std::string_view(key) != "Addr") {
        return fail(where, fmt::format("has '{}' {}, out of range", key, value));
      }
      out = static_cast<std::int64_t>(value);
      return {};
    }
    if (found->is_number_integer()) {
      out = found->get<std::int64_t>();
      return {};
    }
    return fail(where, fmt::format("has '{}' {}, not an integer", key, found->dump()));
  }

  std::optional<Error> read_event(const json& event, std::size_t index, MemoryEvent& out) const {
    const std::string where = fmt::format("traceEvents[{}] ([memory])", index);
    out.index = index;
    const auto args = event.find("args");
    if (args == event.end() || !args->is_object()) return fail(where, "has no args object");
    std::optional<std::int64_t> address;
    std::optional<std::int64_t> bytes;
    std::optional<std::int64_t> device_type;
    std::optional<std::int64_t> device_id;
    std::optional<std::int64_t> allocated;
    std::optional<std::int64_t> reserved;
    if (auto error = integer(*args, "Addr", where, address, true)) return error;
    if (auto error = integer(*args, "Bytes", where, bytes, true)) return error;
    if (auto error = integer(*args, "Device Type", where, device_type, false)) return error;
    if (auto error = integer(*args, "Device Id", where, device_id, false)) return error;
    if (auto error = integer(*args, "Total Allocated", where, allocated, false)) return error;
    if (auto error = integer(*args, "Total Reserved", where, reserved, false)) return error;
    if (*bytes == 0) return fail(where, fmt::format("has Bytes 0: {}", TraceBuilder::zero_size_reason));
    if (*bytes == std::numeric_limits<std::int64_t>::min()) return fail(where, "has Bytes out of range");
    if (allocated && *allocated < 0) return fail(where, fmt::format("has a negative Total Allocated ({})", *allocated));
    if (reserved && *reserved < 0) return fail(where, fmt::format("has a negative Total Reserved ({})", *reserved));
    out.address = static_cast<std::uint64_t>(*address);
    out.bytes = *bytes;
    out.device_type = device_type.value_or(0);
    out.device_id = device_id.value_or(-1);
    if (allocated) out.total_allocated = static_cast<std::uint64_t>(*allocated);
    if (reserved) out.total_reserved = static_cast<std::uint64_t>(*reserved);
    if (const auto ts = event.find("ts"); ts != event.end()) {
      if (!ts->is_number() || !std::isfinite(ts->get<double>())) return fail(where, fmt::format("has ts {}, not a number", ts->dump()));
      out.ts = ts->get<double>();
    }
    return {};
  }

  Result<ProfileRecording> build(std::vector<MemoryEvent>& all) {
    // One device per trace: the one asked for, else the one with the most events (the first seen on a tie).
    std::map<std::pair<std::int64_t, std::int64_t>, std::size_t> counts;
    std::vector<std::pair<std::int64_t, std::int64_t>> order;
    for (const MemoryEvent& event : all) {
      const auto key = std::pair{event.device_type, event.device_id};
      if (counts[key]++ == 0) order.push_back(key);
    }
    std::pair<std::int64_t, std::int64_t> chosen = order.front();
    if (options_.device) {
      const auto match = std::find_if(order.begin(), order.end(),
                                      [&](const auto& key) { return device_name(key.first, key.second) == *options_.device; });
      if (match == order.end()) {
        std::vector<std::string> names;
        for (const auto& key : order) names.push_back(device_name(key.first, key.second));
        return fail("the trace", fmt::format("has no [memory] events of device {} (it has {})", *options_.device,
                                             fmt::join(names, ", ")));
      }
      chosen = *match;
    } else {
      for (const auto& key : order) {
        if (counts[key] > counts[chosen]) chosen = key;
      }
    }
    std::erase_if(all, [&](const MemoryEvent& event) { return std::pair{event.device_type, event.device_id} != chosen; });
    // Kineto sorts by time, but events of several threads may interleave; ties keep the file's order.
    if (std::all_of(all.begin(), all.end(), [](const MemoryEvent& event) { return event.ts.has_value(); })) {
      std::stable_sort(all.begin(), all.end(), [](const MemoryEvent& a, const MemoryEvent& b) { return *a.ts < *b.ts; });
    }

    ProfileRecording recording;
    recording.format = TraceFormat::kineto_json;
    RecordedTotals& recorded = recording.recorded;
    const bool has_allocated = std::all_of(all.begin(), all.end(), [](const auto& e) { return e.total_allocated.has_value(); });
    const bool has_reserved = std::all_of(all.begin(), all.end(), [](const auto& e) { return e.total_reserved.has_value(); });
    TraceBuilder builder;
    const std::uint32_t stream = builder.stream(default_stream);  // the events name no stream
    std::unordered_map<std::uint64_t, std::uint64_t> live_size;   // of each live address, to check the frees
    std::uint64_t freed_initial = 0;  // bytes of the blocks that frees show were live before the first event
    for (const MemoryEvent& event : all) {
      const std::string where = fmt::format("traceEvents[{}] ([memory])", event.index);
      const std::int64_t time = event.ts ? std::llround(*event.ts) : no_time;
      if (event.bytes > 0) {
        const auto size = static_cast<std::uint64_t>(event.bytes);
        const TraceBuilder::Status status = builder.alloc(event.address, size, stream, time);
        if (status == TraceBuilder::Status::already_live) {
          return fail(where, fmt::format("allocates address {:#x}, which holds a live block", event.address));
        }
        if (status != TraceBuilder::Status::ok) return fail(where, "is one block too many");
        live_size[event.address] = size;
      } else {
        // Kineto's Bytes of a free is the block's size with the sign turned.
        const auto size = static_cast<std::uint64_t>(-event.bytes);
        if (!builder.seen(event.address)) {  // a block live since before the profile began
          if (builder.declare_initial(event.address, size, stream) != TraceBuilder::Status::ok) {
            return fail(where, "is one block too many");
          }
          live_size[event.address] = size;
          freed_initial += size;
        }
        const auto found = live_size.find(event.address);
        if (found == live_size.end()) {
          return fail(where, fmt::format("frees address {:#x}, which holds no live block", event.address));
        }
        if (found->second != size) {
          return fail(where, fmt::format("frees {} bytes at {:#x}, where a block of {} bytes was allocated", size,
                                         event.address, found->second));
        }
        live_size.erase(found);
        builder.free(event.address, time);
      }
      if (has_allocated) recorded.allocated_after.push_back(*event.total_allocated);
      if (has_reserved) recorded.reserved_after.push_back(*event.total_reserved);
    }

    // Bytes live before the first event that no free names: one initial block (keyed by an address no event
    // used, so that it never meets one).
    if (has_allocated) {
      const MemoryEvent& first = all.front();
      const std::int64_t before = static_cast<std::int64_t>(*first.total_allocated) - first.bytes;
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
    recording.trace = builder.finish(trace_detail::trace_name_from_source(source_), device_name(chosen.first, chosen.second));
    return recording;
  }

  std::string_view source_;
  std::string_view position_source_;  // the source, "(inflated)" when byte offsets are in inflated data
  const KinetoTraceOptions& options_;
  bool root_is_array_ = false;
  bool in_events_ = false;
  std::size_t next_index_ = 0;
  std::vector<std::size_t> kept_index_;
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
