// read_trace: one entry point for every format. The content decides first (a pickle starts with PROTO,
// Tessera's text with its magic, Kineto's JSON with '{' or '[', torch_npu's operator_memory.csv and a
// lifetimes CSV with their headers, STAlloc with a record or marker line),
// the extension only when the content is not telling. Before the whole file is read or inflated, its start
// must be one a trace of that format can have.
#include <fmt/format.h>

#include <algorithm>

#include "tessera/trace.hpp"
#include "trace/gzip_file.hpp"
#include "trace/pickle_reader.hpp"
#include "trace/readers.hpp"
#include "trace/text_lines.hpp"

namespace tessera {

std::string_view to_string(TraceFormat format) noexcept {
  switch (format) {
    case TraceFormat::automatic: return "automatic";
    case TraceFormat::pytorch_snapshot: return "pytorch_snapshot";
    case TraceFormat::lifetimes_csv: return "lifetimes_csv";
    case TraceFormat::stalloc: return "stalloc";
    case TraceFormat::text: return "text";
    case TraceFormat::kineto_json: return "kineto_json";
    case TraceFormat::operator_memory_csv: return "operator_memory_csv";
  }
  return "unknown";
}

namespace trace_detail {

std::string_view without_utf8_bom(std::string_view text) {
  return text.starts_with("\xEF\xBB\xBF") ? text.substr(3) : text;
}

TraceFormat format_by_content(std::string_view bytes) {
  if (!bytes.empty() && static_cast<unsigned char>(bytes[0]) == 0x80) return TraceFormat::pytorch_snapshot;
  bytes = without_utf8_bom(bytes);
  if (bytes.starts_with("tessera-trace")) return TraceFormat::text;
  // JSON: the first character that is not white space opens the traceEvents array or the object holding it.
  const std::size_t first = bytes.find_first_not_of(" \t\r\n");
  if (first != std::string_view::npos && (bytes[first] == '{' || bytes[first] == '[')) return TraceFormat::kineto_json;
  LineScanner lines(bytes);
  std::string_view line;
  while (lines.next(line)) {
    line = trim(line);
    if (line.empty()) continue;
    // Either of its first two required columns: one without the other is operator_memory.csv's error.
    if (line.find("Size(KB)") != std::string_view::npos || line.find("Allocation Time(us)") != std::string_view::npos) {
      return TraceFormat::operator_memory_csv;
    }
    if (line.starts_with("id,") || line.find(",lower,") != std::string_view::npos) return TraceFormat::lifetimes_csv;
    if (std::count(line.begin(), line.end(), ',') >= 3) return TraceFormat::lifetimes_csv;
    if (line.starts_with("0 ") || line.starts_with("1 ") || line.starts_with("Iteration Index")) {
      return TraceFormat::stalloc;
    }
    break;  // only the first non-blank line decides
  }
  return TraceFormat::automatic;
}

TraceFormat format_by_extension(std::string_view source) {
  std::string name = std::filesystem::path(std::string(source)).filename().string();
  if (name.ends_with(".gz")) name.resize(name.size() - 3);
  if (name.ends_with(".pickle") || name.ends_with(".pkl")) return TraceFormat::pytorch_snapshot;
  if (name.ends_with(".json")) return TraceFormat::kineto_json;
  if (name.ends_with(".csv")) return TraceFormat::lifetimes_csv;
  if (name.ends_with(".trace")) return TraceFormat::text;
  if (name.ends_with(".txt") || name.ends_with(".log")) return TraceFormat::stalloc;
  return TraceFormat::automatic;
}

Error unknown_format_error(std::string_view source) {
  return make_error(Errc::invalid_argument,
                    fmt::format("{}: cannot tell the trace format from the content or the name (PyTorch snapshot "
                                "pickle, Kineto JSON, torch_npu operator_memory.csv, lifetimes CSV, STAlloc log or "
                                "tessera-trace text)",
                                source));
}

PrefixCheck trace_start_check(TraceFormat forced, std::string_view source_name) {
  return [forced, source = std::string(source_name)](std::string_view prefix, bool complete,
                                                     bool inflated) -> std::optional<Error> {
    LineScanner lines(prefix);
    std::string_view line;
    bool found = false;  // a non-blank line
    while (!found && lines.next(line)) found = !trim(line).empty();
    // Every text format's first line is text; a NUL byte there is binary data, whatever follows.
    const bool binary = found && line.find('\0') != std::string_view::npos;
    TraceFormat format = forced;
    if (format == TraceFormat::automatic) {
      const TraceFormat content = format_by_content(prefix);
      const bool by_first_bytes = content == TraceFormat::pytorch_snapshot || content == TraceFormat::text ||
                                  content == TraceFormat::kineto_json;
      // Otherwise the first line decides, once it is whole in the prefix.
      if (!by_first_bytes && !binary && !complete && !(found && lines.terminated())) return {};
      format = by_first_bytes || !binary ? content : TraceFormat::automatic;
      if (format == TraceFormat::automatic) format = format_by_extension(source);
      if (format == TraceFormat::automatic) return unknown_format_error(source);
    }
    switch (format) {
      case TraceFormat::pytorch_snapshot:
        return check_pickle_start(prefix, inflated ? fmt::format("{} (inflated)", source) : source);
      case TraceFormat::lifetimes_csv:
      case TraceFormat::stalloc:
      case TraceFormat::text:
      case TraceFormat::kineto_json:
      case TraceFormat::operator_memory_csv:
        if (!binary) return {};
        return make_error(Errc::invalid_argument,
                          fmt::format("{}:{}: a NUL byte in the first line: binary data, not a {} trace", source,
                                      lines.line_number(),
                                      format == TraceFormat::text                  ? "tessera-trace text"
                                      : format == TraceFormat::stalloc             ? "STAlloc log"
                                      : format == TraceFormat::kineto_json         ? "Kineto JSON"
                                      : format == TraceFormat::operator_memory_csv ? "operator_memory.csv"
                                                                                   : "lifetimes CSV"));
      case TraceFormat::automatic: break;
    }
    return {};
  };
}

}  // namespace trace_detail

namespace {

// The recording of a format that carries no allocator totals.
Result<ProfileRecording> trace_only(Result<Trace> trace) {
  if (!trace) return std::move(trace).error();
  ProfileRecording recording;
  recording.trace = std::move(*trace);
  return recording;
}

Result<ProfileRecording> as_format(Result<ProfileRecording> recording, TraceFormat format) {
  if (recording) recording->format = format;
  return recording;
}

// A profile's device: the one named, else the one pytorch.device numbers on `kind`.
std::optional<std::string> profile_device(const TraceReadOptions& options, std::string_view kind) {
  if (options.profile_device) return options.profile_device;
  if (options.pytorch.device) return fmt::format("{}:{}", kind, *options.pytorch.device);
  return std::nullopt;
}

}  // namespace

Result<ProfileRecording> parse_recording(std::string_view bytes, std::string_view source,
                                         const TraceReadOptions& options) {
  return trace_detail::with_inflated(
      bytes, source,
      [&](std::string_view data, bool inflated) -> Result<ProfileRecording> {
        TraceFormat format = options.format;
        if (format == TraceFormat::automatic) format = trace_detail::format_by_content(data);
        if (format == TraceFormat::automatic) format = trace_detail::format_by_extension(source);
        switch (format) {
          case TraceFormat::pytorch_snapshot: {
            Result<PytorchRecording> snapshot =
                trace_detail::parse_pytorch_inflated(data, source, inflated, options.pytorch);
            if (!snapshot) return std::move(snapshot).error();
            ProfileRecording recording;
            recording.format = format;
            recording.trace = std::move(snapshot->trace);
            recording.recorded.reserved_after = std::move(snapshot->reserved_after);
            recording.recorded.peak_reserved = snapshot->initial_reserved;
            for (const std::uint64_t reserved : recording.recorded.reserved_after) {
              recording.recorded.peak_reserved = std::max(recording.recorded.peak_reserved, reserved);
            }
            return recording;
          }
          case TraceFormat::kineto_json:
            return as_format(trace_detail::parse_kineto_inflated(data, source, inflated, {profile_device(options, "cuda")}),
                             format);
          case TraceFormat::operator_memory_csv:
            return as_format(trace_detail::parse_operator_memory_inflated(data, source, {profile_device(options, "npu")}),
                             format);
          case TraceFormat::lifetimes_csv:
            return as_format(trace_only(trace_detail::parse_lifetimes_inflated(data, source)), format);
          case TraceFormat::stalloc:
            return as_format(trace_only(trace_detail::parse_stalloc_inflated(trace_detail::without_utf8_bom(data), source)),
                             format);
          case TraceFormat::text:
            return as_format(trace_only(trace_detail::parse_text_inflated(trace_detail::without_utf8_bom(data), source)),
                             format);
          case TraceFormat::automatic: break;
        }
        return trace_detail::unknown_format_error(source);
      },
      trace_detail::trace_start_check(options.format, source));
}

Result<ProfileRecording> read_recording(const std::filesystem::path& path, const TraceReadOptions& options) {
  Result<std::string> bytes =
      trace_detail::read_file_bytes(path, trace_detail::trace_start_check(options.format, path.string()));
  if (!bytes) return std::move(bytes).error();
  Result<ProfileRecording> recording = parse_recording(*bytes, path.string(), options);
  if (recording && recording->format == TraceFormat::operator_memory_csv) {
    if (auto taken = trace_detail::take_memory_record_beside(path, *recording); !taken) return std::move(taken).error();
  }
  return recording;
}

Result<Trace> parse_trace(std::string_view bytes, std::string_view source, const TraceReadOptions& options) {
  Result<ProfileRecording> recording = parse_recording(bytes, source, options);
  if (!recording) return std::move(recording).error();
  return std::move(recording->trace);
}

Result<Trace> read_trace(const std::filesystem::path& path, const TraceReadOptions& options) {
  // The file alone: what lies beside it changes the recorded totals, never the trace.
  Result<std::string> bytes =
      trace_detail::read_file_bytes(path, trace_detail::trace_start_check(options.format, path.string()));
  if (!bytes) return std::move(bytes).error();
  Result<ProfileRecording> recording = parse_recording(*bytes, path.string(), options);
  if (!recording) return std::move(recording).error();
  return std::move(recording->trace);
}

}  // namespace tessera
