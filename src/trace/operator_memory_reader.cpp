// torch_npu's profiler output operator_memory.csv (ASCEND_PROFILER_OUTPUT): one row per tensor lifetime,
// with its size in KB, its allocation and release times in microseconds, and the allocator's totals in MB
// at both ends (docs/trace-format.md). Columns are found by name in the header; the others are ignored.
//
// A row becomes an alloc at its allocation time and a free at its release time: the Active Release Time
// where the file has that column and the row a value (when the allocator may reuse the block, as the
// snapshot reader's free_completed), else the Release Time. An empty release time: live at the end. At one
// time, frees come before allocs (the allocator may reuse what was freed), and a row released at the time
// it was allocated is freed after the allocs; each group in row order.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <optional>

#include "tessera/trace.hpp"
#include "trace/csv_fields.hpp"
#include "trace/gzip_file.hpp"
#include "trace/readers.hpp"
#include "trace/text_lines.hpp"
#include "trace/trace_builder.hpp"

namespace tessera {

namespace {

using trace_detail::TraceBuilder;

using trace_detail::parse_decimal;
using trace_detail::split_quoted_csv;

enum Column : std::size_t {
  name,
  size_kb,
  allocation_time,
  release_time,
  active_release_time,
  allocation_allocated_mb,
  allocation_reserved_mb,
  release_allocated_mb,
  release_reserved_mb,
  stream_ptr,
  device_type,
  column_count,
};

constexpr std::array<trace_detail::CsvColumn, column_count> columns{{
    {"Name", false},
    {"Size(KB)", true},
    {"Allocation Time(us)", true},
    {"Release Time(us)", true},
    {"Active Release Time(us)", false},
    {"Allocation Total Allocated(MB)", false},
    {"Allocation Total Reserved(MB)", false},
    {"Release Total Allocated(MB)", false},
    {"Release Total Reserved(MB)", false},
    {"Stream Ptr", false},
    {"Device Type", false},
}};

constexpr double kb = 1024.0;
constexpr double mb = 1024.0 * 1024.0;

struct Row {
  std::size_t line = 0;
  std::uint64_t size = 0;
  double allocated_at = 0;
  std::optional<double> released_at;
  std::uint64_t stream = 0;
  std::string device;
  std::optional<std::uint64_t> totals[4];  // allocated, reserved at allocation; allocated, reserved at release
};

}  // namespace

namespace trace_detail {

Result<ProfileRecording> parse_operator_memory_inflated(std::string_view text, std::string_view source,
                                                        const OperatorMemoryOptions& options) {
  auto fail = [source](std::size_t line, std::string_view what) {
    return make_error(Errc::invalid_argument, fmt::format("{}:{}: {}", source, line, what));
  };
  std::array<std::optional<std::size_t>, column_count> index;
  std::size_t width = 0;
  std::vector<Row> rows;
  std::vector<std::string> fields;
  LineScanner lines(trace_detail::without_utf8_bom(text));
  std::string_view line;
  bool header = true;
  while (lines.next(line)) {
    const std::size_t number = lines.line_number();
    if (trim(line).empty()) continue;
    if (!split_quoted_csv(line, fields)) return fail(number, "a quoted field has no closing quote");
    if (header) {
      header = false;
      width = fields.size();
      if (const auto missing = trace_detail::locate_columns(fields, columns, index); !missing.empty()) {
        return fail(number, fmt::format("the header has no '{}' column (torch_npu's operator_memory.csv has it)", missing));
      }
      continue;
    }
    if (fields.size() != width) return fail(number, fmt::format("{} fields where the header has {}", fields.size(), width));
    const auto cell = [&](Column c) -> std::string_view { return index[c] ? std::string_view(fields[*index[c]]) : ""; };
    const auto number_of = [&](Column c, double& value) -> std::optional<Error> {
      if (!parse_decimal(cell(c), value)) {
        return fail(number, fmt::format("{} '{}' is not a number", columns[c].header, cell(c)));
      }
      if (value < 0) return fail(number, fmt::format("{} is negative ({})", columns[c].header, cell(c)));
      return {};
    };
    Row row;
    row.line = number;
    double size = 0;
    if (auto error = number_of(size_kb, size)) return std::move(*error);
    // Sizes are whole bytes printed in KB: round back to the byte.
    const double bytes = std::round(size * kb);
    if (bytes >= 0x1p63) return fail(number, fmt::format("Size(KB) '{}' is out of range", cell(size_kb)));
    row.size = static_cast<std::uint64_t>(bytes);
    if (row.size == 0) return fail(number, fmt::format("a tensor of 0 bytes: {}", TraceBuilder::zero_size_reason));
    if (auto error = number_of(allocation_time, row.allocated_at)) return std::move(*error);
    const Column release = index[active_release_time] && !cell(active_release_time).empty() ? active_release_time
                                                                                              : release_time;
    if (!cell(release).empty()) {
      double released = 0;
      if (auto error = number_of(release, released)) return std::move(*error);
      if (released < row.allocated_at) {
        return fail(number, fmt::format("{} {} is before the Allocation Time {}", columns[release].header,
                                        cell(release), cell(allocation_time)));
      }
      row.released_at = released;
    }
    if (!cell(stream_ptr).empty() && !parse_unsigned(cell(stream_ptr), row.stream, /*allow_hex=*/true)) {
      return fail(number, fmt::format("Stream Ptr '{}' is not a number", cell(stream_ptr)));
    }
    if (!trace_detail::device_from_cell(cell(device_type), row.device)) {
      return fail(number, "Device Type holds a control character");
    }
    const std::array<Column, 4> totals{allocation_allocated_mb, allocation_reserved_mb, release_allocated_mb,
                                       release_reserved_mb};
    for (std::size_t t = 0; t < totals.size(); ++t) {
      if (cell(totals[t]).empty()) continue;  // a release total of a row never released
      double value = 0;
      if (auto error = number_of(totals[t], value)) return std::move(*error);
      if (value * mb >= 0x1p63) return fail(number, fmt::format("{} is out of range", columns[totals[t]].header));
      row.totals[t] = static_cast<std::uint64_t>(std::llround(value * mb));
    }
    rows.push_back(std::move(row));
  }
  if (header) return fail(1, "the file is empty: no header and no rows");
  if (rows.empty()) return fail(lines.line_number(), "the file has a header and no rows");

  // One device per trace, as with the other profiles.
  std::map<std::string, std::size_t> counts;
  std::string chosen = rows.front().device;
  for (const Row& row : rows) ++counts[row.device];
  if (options.device) {
    if (!counts.contains(*options.device)) {
      return fail(1, fmt::format("no row is of device '{}'", *options.device));
    }
    chosen = *options.device;
  } else {
    for (const auto& [device, count] : counts) {
      if (count > counts[chosen]) chosen = device;
    }
  }
  std::erase_if(rows, [&](const Row& row) { return row.device != chosen; });

  enum Phase : std::uint8_t { free_earlier, alloc, free_same_time };
  struct Step {
    double time;
    Phase phase;
    std::size_t row;
    auto operator<=>(const Step&) const = default;
  };
  std::vector<Step> steps;
  steps.reserve(2 * rows.size());
  for (std::size_t r = 0; r < rows.size(); ++r) {
    steps.push_back(Step{rows[r].allocated_at, alloc, r});
    if (rows[r].released_at) {
      steps.push_back(Step{*rows[r].released_at, *rows[r].released_at == rows[r].allocated_at ? free_same_time : free_earlier, r});
    }
  }
  std::sort(steps.begin(), steps.end());

  ProfileRecording recording;
  recording.format = TraceFormat::operator_memory_csv;
  RecordedTotals& recorded = recording.recorded;
  TraceBuilder builder;
  bool has_allocated = true;
  bool has_reserved = true;
  for (const Step& step : steps) {
    const Row& row = rows[step.row];
    const std::uint32_t stream = builder.stream(StreamId{static_cast<std::uintptr_t>(row.stream)});
    const auto time = static_cast<std::int64_t>(std::llround(step.time));
    // Rows are the keys: every row is its own block, so only the number of blocks can fail.
    const TraceBuilder::Status status =
        step.phase == alloc ? builder.alloc(step.row, row.size, stream, time) : builder.free(step.row, time);
    if (status != TraceBuilder::Status::ok) return fail(row.line, "is one block too many");
    const std::size_t offset = step.phase == alloc ? 0 : 2;
    has_allocated = has_allocated && row.totals[offset].has_value();
    has_reserved = has_reserved && row.totals[offset + 1].has_value();
    if (has_allocated) recorded.allocated_after.push_back(*row.totals[offset]);
    if (has_reserved) recorded.reserved_after.push_back(*row.totals[offset + 1]);
  }
  if (!has_allocated) recorded.allocated_after.clear();
  if (!has_reserved) recorded.reserved_after.clear();
  for (const std::uint64_t value : recorded.allocated_after) recorded.peak_allocated = std::max(recorded.peak_allocated, value);
  for (const std::uint64_t value : recorded.reserved_after) recorded.peak_reserved = std::max(recorded.peak_reserved, value);
  recording.trace = builder.finish(trace_name_from_source(source), chosen);
  return recording;
}

}  // namespace trace_detail

Result<ProfileRecording> parse_operator_memory_recording(std::string_view bytes, std::string_view source,
                                                         const OperatorMemoryOptions& options) {
  return trace_detail::with_inflated(
      bytes, source,
      [&](std::string_view text, bool) { return trace_detail::parse_operator_memory_inflated(text, source, options); },
      trace_detail::trace_start_check(TraceFormat::operator_memory_csv, source));
}

Result<ProfileRecording> read_operator_memory_recording(const std::filesystem::path& path,
                                                        const OperatorMemoryOptions& options) {
  Result<std::string> bytes = trace_detail::read_file_bytes(
      path, trace_detail::trace_start_check(TraceFormat::operator_memory_csv, path.string()));
  if (!bytes) return std::move(bytes).error();
  Result<ProfileRecording> recording = parse_operator_memory_recording(*bytes, path.string(), options);
  if (recording) {
    if (auto taken = trace_detail::take_memory_record_beside(path, *recording); !taken) return std::move(taken).error();
  }
  return recording;
}

Result<Trace> parse_operator_memory_csv(std::string_view bytes, std::string_view source,
                                        const OperatorMemoryOptions& options) {
  Result<ProfileRecording> recording = parse_operator_memory_recording(bytes, source, options);
  if (!recording) return std::move(recording).error();
  return std::move(recording->trace);
}

Result<Trace> read_operator_memory_csv(const std::filesystem::path& path, const OperatorMemoryOptions& options) {
  // The file alone: memory_record.csv beside it changes the recorded totals, never the trace.
  Result<std::string> bytes = trace_detail::read_file_bytes(
      path, trace_detail::trace_start_check(TraceFormat::operator_memory_csv, path.string()));
  if (!bytes) return std::move(bytes).error();
  Result<ProfileRecording> recording = parse_operator_memory_recording(*bytes, path.string(), options);
  if (!recording) return std::move(recording).error();
  return std::move(recording->trace);
}

}  // namespace tessera
