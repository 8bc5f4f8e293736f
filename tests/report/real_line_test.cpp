// The real allocator's line: where a profile recorded the allocator's reserved bytes, the text, JSON and HTML
// reports show them beside the replays, with the profile's own peaks; where it did not, no such line. The
// expected peaks are found in the fixtures' text here, apart from the readers.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tessera/replay.hpp"
#include "tessera/report.hpp"
#include "tessera/trace.hpp"

namespace tessera {
namespace {

namespace fs = std::filesystem;
const fs::path data_dir = fs::path(TESSERA_TEST_DATA);

std::string file_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

struct Peaks {
  std::uint64_t allocated = 0;
  std::uint64_t reserved = 0;
};

// The most Total Allocated and Total Reserved of the CUDA device 0's "[memory]" events.
Peaks kineto_peaks(const fs::path& path) {
  Peaks peaks;
  const nlohmann::json trace = nlohmann::json::parse(file_text(path));
  for (const auto& event : trace.at("traceEvents")) {
    if (event.at("name") != "[memory]" || event.at("args").at("Device Type") != 1) continue;
    peaks.allocated = std::max(peaks.allocated, event.at("args").at("Total Allocated").get<std::uint64_t>());
    peaks.reserved = std::max(peaks.reserved, event.at("args").at("Total Reserved").get<std::uint64_t>());
  }
  return peaks;
}

// The most of memory_record.csv's PTA rows of NPU:0 up to `last_us` (the trace's last event), in bytes.
Peaks memory_record_peaks(const fs::path& path, double last_us) {
  Peaks peaks;
  std::istringstream lines(file_text(path));
  std::string line;
  std::getline(lines, line);  // the header: Component,Timestamp(us),Total Allocated(MB),Total Reserved(MB),...
  while (std::getline(lines, line)) {
    std::vector<std::string> cells;
    std::istringstream fields(line);
    for (std::string cell; std::getline(fields, cell, ',');) cells.push_back(cell);
    if (cells.size() < 7 || cells[0] != "PTA" || cells[6] != "NPU:0" || std::stod(cells[1]) > last_us) continue;
    peaks.allocated = std::max(peaks.allocated, static_cast<std::uint64_t>(std::stod(cells[2]) * MiB));
    peaks.reserved = std::max(peaks.reserved, static_cast<std::uint64_t>(std::stod(cells[3]) * MiB));
  }
  return peaks;
}

// The recorded line (where there is one) and Tessera's replay, as `tessera replay` lists them.
std::vector<ReplayResult> results_for(const fs::path& path) {
  Result<ProfileRecording> recording = read_recording(path);
  EXPECT_TRUE(recording.ok()) << describe(recording.error());
  if (!recording) return {};
  std::vector<ReplayResult> results;
  if (auto line = recorded_result(recording->trace, recording->recorded, 50)) results.push_back(std::move(*line));
  ReplayOptions options;
  options.series_points = 50;
  Result<ReplayResult> replayed = replay(recording->trace, options);
  EXPECT_TRUE(replayed.ok()) << describe(replayed.error());
  if (replayed) results.push_back(std::move(*replayed));
  return results;
}

void expect_real_line(const std::vector<ReplayResult>& results, const Peaks& peaks) {
  ASSERT_GT(peaks.reserved, 0u);
  // JSON: a result named "recorded", the profile's peaks, frag at peak against its own Total Allocated.
  const nlohmann::json document = nlohmann::json::parse(format_json_report(results));
  const auto& rows = document.at("results");
  const auto recorded =
      std::find_if(rows.begin(), rows.end(), [](const auto& row) { return row.at("allocator") == "recorded"; });
  ASSERT_NE(recorded, rows.end());
  EXPECT_EQ(recorded->at("peak_reserved").get<std::uint64_t>(), peaks.reserved);
  EXPECT_EQ(recorded->at("peak_allocated").get<std::uint64_t>(), peaks.allocated);
  EXPECT_DOUBLE_EQ(recorded->at("frag_at_peak").get<double>(),
                   1.0 - static_cast<double>(peaks.allocated) / static_cast<double>(peaks.reserved));
  EXPECT_TRUE(recorded->at("driver").is_null());
  EXPECT_TRUE(recorded->at("min_capacity").is_null());
  // Text: its row, with the peak reserved, and what it is.
  const std::string table = format_table(results);
  const std::size_t row = table.find("\n  recorded ");
  ASSERT_NE(row, std::string::npos) << table;
  const std::string row_text = table.substr(row + 1, table.find('\n', row + 1) - row - 1);
  EXPECT_NE(row_text.find(format_bytes(peaks.reserved)), std::string::npos) << row_text;
  EXPECT_NE(table.find("(recorded: the real allocator"), std::string::npos) << table;
  // HTML: its row, and its reserved bytes as a line of the trace's chart, ending at the recorded reserved.
  const std::string html = format_html_report(results);
  EXPECT_NE(html.find("<td class=\"name\">recorded (real allocator)</td><td>" + format_bytes(peaks.allocated)),
            std::string::npos);
  const std::size_t title = html.find("<title>reserved: recorded (real allocator)</title></polyline>");
  ASSERT_NE(title, std::string::npos);
  const std::size_t polyline = html.rfind("<polyline", title);
  EXPECT_NE(html.substr(polyline, title - polyline).find("stroke=\"#b8860b\""), std::string::npos);
}

void expect_no_real_line(const std::vector<ReplayResult>& results) {
  ASSERT_FALSE(results.empty());
  const nlohmann::json document = nlohmann::json::parse(format_json_report(results));
  for (const auto& row : document.at("results")) EXPECT_NE(row.at("allocator"), "recorded");
  EXPECT_EQ(format_table(results).find("  recorded "), std::string::npos);
  const std::string html = format_html_report(results);
  EXPECT_EQ(html.find("reserved: recorded (real allocator)"), std::string::npos);
  EXPECT_EQ(html.find("<td class=\"name\">recorded"), std::string::npos);
}

TEST(RealLine, AKinetoProfileOfAGpuShowsItsTotalReservedInEveryReport) {
  const fs::path path = data_dir / "kineto_cuda_hand.json";
  expect_real_line(results_for(path), kineto_peaks(path));
}

TEST(RealLine, MemoryRecordBesideOperatorMemoryGivesTheLine) {
  const fs::path path = data_dir / "npu_profile" / "operator_memory.csv";
  // The trace's last event: the latest time the operator_memory rows name (allocation or release).
  double last_us = 0;
  std::istringstream lines(file_text(path));
  std::string line;
  std::getline(lines, line);
  while (std::getline(lines, line)) {
    std::vector<std::string> cells;
    std::istringstream fields(line);
    for (std::string cell; std::getline(fields, cell, ',');) cells.push_back(cell);
    for (const std::size_t column : {2u, 3u}) {
      if (!cells[column].empty()) last_us = std::max(last_us, std::stod(cells[column]));
    }
  }
  expect_real_line(results_for(path), memory_record_peaks(path.parent_path() / "memory_record.csv", last_us));
}

// The CPU allocator caches nothing: Kineto records its Total Reserved as 0, and there is no line to draw.
TEST(RealLine, NoneForACpuProfileOrATraceWithoutTheAllocatorsTotals) {
  expect_no_real_line(results_for(data_dir / "kineto_cpu.json"));
  expect_no_real_line(results_for(data_dir / "example.trace"));
}

TEST(RealLine, NoneWhereTheTotalsDoNotCoverEveryEvent) {
  Trace trace;
  trace.name = "short";
  trace.streams = {StreamId{0}};
  trace.block_count = 1;
  trace.events = {TraceEvent::alloc(0, MiB, 0), TraceEvent::free(0, MiB, 0)};
  RecordedTotals recorded;
  recorded.reserved_after = {2 * MiB};
  recorded.peak_reserved = 2 * MiB;
  EXPECT_FALSE(recorded_result(trace, recorded).has_value());
  recorded.reserved_after = {2 * MiB, 2 * MiB};
  const std::optional<ReplayResult> line = recorded_result(trace, recorded);
  ASSERT_TRUE(line.has_value());
  EXPECT_EQ(line->peak_allocated, MiB);  // no recorded Total Allocated: the trace's live bytes
  EXPECT_DOUBLE_EQ(line->frag_at_peak, 0.5);
  EXPECT_DOUBLE_EQ(line->avg_frag, 0.75);  // (2 - 1) / 2 after the alloc, (2 - 0) / 2 after the free
}

}  // namespace
}  // namespace tessera
