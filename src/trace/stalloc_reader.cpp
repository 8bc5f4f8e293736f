// STAlloc's Megatron traces (infinigence/STAlloc, mem_log_dev<N>.txt). Its pluggable allocator writes
// "1 <ptr> <size> <stream>" for each malloc and "0 <ptr> <size> <stream>" for each free, pointers and
// streams as C++ streams print them ("0x7f1e41329c00", "0" for null); its Megatron hooks write marker lines
// in between. "Iteration Index : <n>" becomes an iteration event; every other line with a colon is a
// marker ("Iteration Index : end", "micro-batch : F", "<module>-><Class> Layer : F-start",
// "token_permutation : F-end", ...) and is skipped.
#include <fmt/format.h>

#include <array>
#include <unordered_map>

#include "tessera/trace.hpp"
#include "trace/gzip_file.hpp"
#include "trace/readers.hpp"
#include "trace/text_lines.hpp"
#include "trace/trace_builder.hpp"

namespace tessera {

namespace {

// "0x..." or "0" as ostream prints a pointer; "(nil)" as printf's %p does.
bool parse_pointer(std::string_view text, std::uint64_t& value) {
  if (text == "(nil)") {
    value = 0;
    return true;
  }
  return trace_detail::parse_unsigned(text, value, /*allow_hex=*/true);
}

}  // namespace

namespace trace_detail {

Result<Trace> parse_stalloc_inflated(std::string_view text, std::string_view source) {
  auto fail = [source](std::size_t line, std::string_view what) {
    return make_error(Errc::invalid_argument, fmt::format("{}:{}: {}", source, line, what));
  };
  constexpr std::string_view iteration_marker = "Iteration Index";
  TraceBuilder builder;
  std::unordered_map<std::uint64_t, std::uint64_t> size_of;  // of each live pointer, to check the frees
  LineScanner lines(text);
  std::string_view raw;
  bool any = false;
  while (lines.next(raw)) {
    const std::size_t number = lines.line_number();
    if (!lines.terminated()) {
      return fail(number, "the last line has no newline: the file looks cut short (add one if it is whole)");
    }
    const std::string_view line = trim(raw);
    if (line.empty()) continue;
    any = true;
    if (line.starts_with(iteration_marker)) {
      const std::size_t colon = line.find(':');
      const std::string_view value = colon == std::string_view::npos ? std::string_view{} : trim(line.substr(colon + 1));
      std::uint64_t index = 0;
      if (parse_unsigned(value, index)) {
        builder.iteration(index, no_time);
      } else if (value != "end") {  // "end" closes the last iteration: nothing to replay
        return fail(number, fmt::format("iteration marker with index '{}', not a number or 'end'", value));
      }
      continue;
    }
    std::array<std::string_view, 4> fields;
    const std::size_t count = split_fields(line, fields.data(), fields.size());
    const bool record = (fields[0] == "0" || fields[0] == "1");
    if (!record) {
      if (line.find(':') != std::string_view::npos) continue;  // a layer or micro-batch marker
      return fail(number, fmt::format("'{}' is neither a malloc/free record nor a marker", line));
    }
    if (count != 4) return fail(number, fmt::format("a record has 4 fields (op ptr size stream), this one {}", count));
    std::uint64_t pointer = 0;
    std::uint64_t size = 0;
    std::uint64_t stream = 0;
    if (!parse_pointer(fields[1], pointer)) return fail(number, fmt::format("pointer '{}' is not a number", fields[1]));
    if (!parse_unsigned(fields[2], size)) return fail(number, fmt::format("size '{}' is not a non-negative integer", fields[2]));
    if (!parse_pointer(fields[3], stream)) return fail(number, fmt::format("stream '{}' is not a number", fields[3]));
    if (pointer == 0) continue;  // a malloc that returned null (size 0) and its free: nothing was handed out
    const std::uint32_t stream_index = builder.stream(StreamId{static_cast<std::uintptr_t>(stream)});
    if (fields[0] == "1") {
      const TraceBuilder::Status status = builder.alloc(pointer, size, stream_index, no_time);
      if (status == TraceBuilder::Status::already_live) {
        return fail(number, fmt::format("malloc returned {:#x}, which is still live", pointer));
      }
      if (status == TraceBuilder::Status::zero_size) {
        return fail(number,
                    fmt::format("malloc of 0 bytes returned {:#x}: {}", pointer, TraceBuilder::zero_size_reason));
      }
      if (status != TraceBuilder::Status::ok) return fail(number, "one block too many");
      size_of[pointer] = size;
      continue;
    }
    // A free of a pointer never seen: a block live before recording began, of the size the free names.
    if (!builder.seen(pointer)) {
      const TraceBuilder::Status status = builder.declare_initial(pointer, size, stream_index);
      if (status == TraceBuilder::Status::zero_size) {
        return fail(number, fmt::format("free of {:#x} with 0 bytes: {}", pointer, TraceBuilder::zero_size_reason));
      }
      if (status != TraceBuilder::Status::ok) return fail(number, "one block too many");
      size_of[pointer] = size;
    }
    if (!builder.is_live(pointer)) return fail(number, fmt::format("free of {:#x}, which is not live", pointer));
    if (size_of[pointer] != size) {
      return fail(number, fmt::format("free of {:#x} with size {}; it was allocated with size {}", pointer, size,
                                      size_of[pointer]));
    }
    (void)builder.free(pointer, no_time);
    size_of.erase(pointer);
  }
  if (!any) return fail(1, "the file is empty");
  return builder.finish(trace_name_from_source(source), "");
}

}  // namespace trace_detail

Result<Trace> parse_stalloc_trace(std::string_view bytes, std::string_view source) {
  return trace_detail::with_inflated(
      bytes, source,
      [source](std::string_view text, bool) { return trace_detail::parse_stalloc_inflated(text, source); },
      trace_detail::trace_start_check(TraceFormat::stalloc, source));
}

Result<Trace> read_stalloc_trace(const std::filesystem::path& path) {
  Result<std::string> bytes =
      trace_detail::read_file_bytes(path, trace_detail::trace_start_check(TraceFormat::stalloc, path.string()));
  if (!bytes) return std::move(bytes).error();
  return parse_stalloc_trace(*bytes, path.string());
}

}  // namespace tessera
