// Per-tensor lifetimes as static memory planners dump them (MindSpore SOMAS, IREE): "id,lower,upper,size",
// live from step lower up to step upper, exclusive. An online allocator sees an alloc at lower and a free
// at upper; at one step the frees come first (the planner may reuse their memory there), each group in
// order of id so that the trace does not depend on the file's row order.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <optional>
#include <unordered_map>

#include "tessera/trace.hpp"
#include "trace/gzip_file.hpp"
#include "trace/readers.hpp"
#include "trace/text_lines.hpp"
#include "trace/trace_builder.hpp"

namespace tessera {

namespace {

struct Lifetime {
  std::uint64_t id = 0;
  std::int64_t lower = 0;
  std::int64_t upper = 0;
  std::uint64_t size = 0;
};

// Comma-separated fields, each trimmed of spaces.
std::vector<std::string_view> split_csv(std::string_view line) {
  std::vector<std::string_view> fields;
  std::size_t position = 0;
  while (true) {
    const std::size_t comma = line.find(',', position);
    fields.push_back(trace_detail::trim(line.substr(position, comma - position)));
    if (comma == std::string_view::npos) break;
    position = comma + 1;
  }
  return fields;
}

}  // namespace

namespace trace_detail {

Result<Trace> parse_lifetimes_inflated(std::string_view text, std::string_view source) {
  auto fail = [source](std::size_t line, std::string_view what) {
    return make_error(Errc::invalid_argument, fmt::format("{}:{}: {}", source, line, what));
  };
  constexpr std::array<std::string_view, 4> names{"id", "lower", "upper", "size"};
  std::array<std::size_t, 4> column{0, 1, 2, 3};  // without a header, the columns come in this order
  std::size_t width = 0;                          // fields per row: the header's, or the first row's

  std::vector<Lifetime> lifetimes;
  std::unordered_map<std::uint64_t, std::size_t> line_of_id;
  LineScanner lines(without_utf8_bom(text));
  std::string_view line;
  bool first = true;
  while (lines.next(line)) {
    const std::size_t number = lines.line_number();
    if (trim(line).empty()) continue;
    const std::vector<std::string_view> fields = split_csv(line);
    std::uint64_t ignored = 0;
    if (first && !parse_unsigned(fields[0], ignored)) {  // a header: find the columns by name
      first = false;
      width = fields.size();
      for (std::size_t c = 0; c < names.size(); ++c) {
        const auto found = std::find(fields.begin(), fields.end(), names[c]);
        if (found == fields.end()) {
          return fail(number, fmt::format("the header has no '{}' column (expected id,lower,upper,size)", names[c]));
        }
        column[c] = static_cast<std::size_t>(found - fields.begin());
      }
      continue;
    }
    first = false;
    if (width == 0) width = std::max<std::size_t>(fields.size(), 4);
    if (fields.size() != width) {
      return fail(number, fmt::format("{} fields where the file has {}", fields.size(), width));
    }
    Lifetime lifetime;
    if (!parse_unsigned(fields[column[0]], lifetime.id)) {
      return fail(number, fmt::format("id '{}' is not a non-negative integer", fields[column[0]]));
    }
    if (!parse_signed(fields[column[1]], lifetime.lower)) {
      return fail(number, fmt::format("lower '{}' is not an integer", fields[column[1]]));
    }
    if (!parse_signed(fields[column[2]], lifetime.upper)) {
      return fail(number, fmt::format("upper '{}' is not an integer", fields[column[2]]));
    }
    if (!parse_unsigned(fields[column[3]], lifetime.size)) {
      return fail(number, fmt::format("size '{}' is not a non-negative integer", fields[column[3]]));
    }
    if (lifetime.upper <= lifetime.lower) {
      return fail(number, fmt::format("tensor {} ends at step {}, not after it starts at {}", lifetime.id,
                                      lifetime.upper, lifetime.lower));
    }
    const auto [it, inserted] = line_of_id.try_emplace(lifetime.id, number);
    if (!inserted) return fail(number, fmt::format("tensor {} is listed again (first on line {})", lifetime.id, it->second));
    lifetimes.push_back(lifetime);
  }

  if (first) return fail(1, "the file is empty: no header and no lifetimes");

  struct Step {
    std::int64_t step;
    bool alloc;  // false sorts first: frees before allocs
    std::uint64_t id;
    std::uint64_t size;
    auto operator<=>(const Step&) const = default;
  };
  std::vector<Step> steps;
  steps.reserve(2 * lifetimes.size());
  for (const Lifetime& lifetime : lifetimes) {
    steps.push_back(Step{lifetime.lower, true, lifetime.id, lifetime.size});
    steps.push_back(Step{lifetime.upper, false, lifetime.id, lifetime.size});
  }
  std::sort(steps.begin(), steps.end());
  TraceBuilder builder;
  const std::uint32_t stream = builder.stream(default_stream);
  for (const Step& step : steps) {
    // Ids are unique and every lifetime is non-empty: only a size of 0 and the number of blocks can fail.
    const TraceBuilder::Status status =
        step.alloc ? builder.alloc(step.id, step.size, stream, no_time) : builder.free(step.id, no_time);
    if (status == TraceBuilder::Status::zero_size) {
      return fail(line_of_id[step.id],
                  fmt::format("tensor {} of 0 bytes: {}", step.id, TraceBuilder::zero_size_reason));
    }
    if (status != TraceBuilder::Status::ok) {
      return fail(line_of_id[step.id], fmt::format("tensor {} is one block too many", step.id));
    }
  }
  return builder.finish(trace_name_from_source(source), "");
}

}  // namespace trace_detail

Result<Trace> parse_lifetimes_csv(std::string_view bytes, std::string_view source) {
  return trace_detail::with_inflated(
      bytes, source,
      [source](std::string_view text, bool) { return trace_detail::parse_lifetimes_inflated(text, source); },
      trace_detail::trace_start_check(TraceFormat::lifetimes_csv, source));
}

Result<Trace> read_lifetimes_csv(const std::filesystem::path& path) {
  Result<std::string> bytes =
      trace_detail::read_file_bytes(path, trace_detail::trace_start_check(TraceFormat::lifetimes_csv, path.string()));
  if (!bytes) return std::move(bytes).error();
  return parse_lifetimes_csv(*bytes, path.string());
}

}  // namespace tessera
