// The terminal table and the byte sizes every report prints.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "report_fixtures.hpp"
#include "tessera/report.hpp"

namespace tessera {
namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(TextTable, HeaderTraceLineAndOneRowPerAllocator) {
  const auto results = test::small_results();
  const auto lines = lines_of(format_table(results));
  ASSERT_EQ(lines.size(), 4U);
  EXPECT_NE(lines[0].find("peak alloc"), std::string::npos);
  EXPECT_NE(lines[0].find("min cap"), std::string::npos);
  EXPECT_EQ(lines[1], "small  (14 events)");
  EXPECT_TRUE(lines[2].starts_with("  tessera ")) << lines[2];
  EXPECT_NE(lines[2].find(format_bytes(results[0].peak_allocated)), std::string::npos);
  EXPECT_NE(lines[2].find(format_bytes(*results[0].min_capacity)), std::string::npos);
  EXPECT_NE(lines[2].find(" no "), std::string::npos);
  // The reference line's driver figures are not computed.
  EXPECT_TRUE(lines[3].starts_with("  ideal ")) << lines[3];
  EXPECT_TRUE(lines[3].ends_with("-          -       -")) << lines[3];
  // Columns line up: every row as wide as the header.
  EXPECT_EQ(lines[2].size(), lines[0].size());
  EXPECT_EQ(lines[3].size(), lines[0].size());
}

TEST(TextTable, OutOfMemoryAndMissingMinCapacity) {
  ReplayOptions options;
  options.capacity = 6 * MiB;
  auto replayed = replay(test::small_trace(), options);
  ASSERT_TRUE(replayed.ok());
  const std::vector<ReplayResult> results{*replayed};
  const auto lines = lines_of(format_table(results));
  ASSERT_EQ(lines.size(), 3U);
  EXPECT_NE(lines[2].find("OOM"), std::string::npos);
  // min cap and overhead were not computed
  EXPECT_NE(lines[2].find("          - "), std::string::npos) << lines[2];
}

TEST(TextTable, AFailedReplayIsARowThatSaysWhy) {
  std::vector<ReplayResult> results = test::small_results();
  const ReplayResult failed = test::failed_result(
      results[0].trace, "gmlake", "event 3 (alloc of 4096 bytes): the host ran out of memory (std::bad_alloc)");
  results.insert(results.begin() + 1, failed);
  const auto lines = lines_of(format_table(results));
  ASSERT_EQ(lines.size(), 5U);
  EXPECT_TRUE(lines[2].starts_with("  tessera ")) << lines[2];
  EXPECT_EQ(lines[3], "  gmlake       failed: " + failed.failure);
  EXPECT_TRUE(lines[4].starts_with("  ideal ")) << lines[4];
}

TEST(FormatBytes, BinaryUnitsTwoDecimals) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1024), "1.00 KiB");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(612 * MiB), "612.00 MiB");
  EXPECT_EQ(format_bytes(MiB - 1), "1.00 MiB");  // not "1024.00 KiB"
  EXPECT_EQ(format_bytes(80 * GiB), "80.00 GiB");
  EXPECT_EQ(format_bytes(3 * (Bytes{1} << 40)), "3.00 TiB");
}

TEST(WriteReportFile, WritesAndNamesTheFileOnError) {
  const auto path = std::filesystem::temp_directory_path() / "tessera_report_test.txt";
  ASSERT_TRUE(write_report_file(path, "content").ok());
  std::ifstream in(path);
  std::string back;
  std::getline(in, back);
  EXPECT_EQ(back, "content");
  std::filesystem::remove(path);

  auto failed = write_report_file("/nonexistent/dir/report.json", "x");
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.error().message.find("/nonexistent/dir/report.json"), std::string::npos);
}

}  // namespace
}  // namespace tessera
