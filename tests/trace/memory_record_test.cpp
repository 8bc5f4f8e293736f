// torch_npu's memory_record.csv: its rows, the real allocator's totals taken from them after each event of
// operator_memory.csv's trace, read_recording taking them when the file lies beside operator_memory.csv, and
// the errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tessera/trace.hpp"

namespace tessera {
namespace {

const std::filesystem::path profile_dir = std::filesystem::path(TESSERA_TEST_DATA) / "npu_profile";
constexpr std::uint64_t MiB = 1 << 20;

TEST(MemoryRecordCsv, RowsAreReadWithTheirComponentTimeTotalsAndDevice) {
  Result<std::vector<MemoryRecord>> records = read_memory_record_csv(profile_dir / "memory_record.csv");
  ASSERT_TRUE(records.ok()) << describe(records.error());
  ASSERT_EQ(records->size(), 9u);
  const MemoryRecord& first = records->front();
  EXPECT_EQ(first.line, 2u);
  EXPECT_EQ(first.component, "PTA");
  EXPECT_EQ(first.time_us, 100);  // "100.0" and a tab
  EXPECT_EQ(first.allocated, std::optional<std::uint64_t>(MiB));
  EXPECT_EQ(first.reserved, 2 * MiB);
  EXPECT_EQ(first.device, "npu:0");
  EXPECT_EQ((*records)[4].device, "npu:1");
  EXPECT_EQ(records->back().component, "APP");
}

// After each event, the PTA rows of NPU:0 at or before its time; the GE, PTA+GE, APP and NPU:1 rows are not
// the real allocator's.
TEST(MemoryRecordCsv, ThePtaRowsOfTheTracesDeviceGiveTheTotalsAfterEachEvent) {
  Result<Trace> trace = read_operator_memory_csv(profile_dir / "operator_memory.csv");
  ASSERT_TRUE(trace.ok()) << describe(trace.error());
  Result<std::vector<MemoryRecord>> records = read_memory_record_csv(profile_dir / "memory_record.csv");
  ASSERT_TRUE(records.ok()) << describe(records.error());
  // Events: alloc at 100, alloc at 150, free at 250, free at 300, alloc at 320.
  ASSERT_EQ(trace->events.size(), 5u);
  const std::optional<RecordedTotals> totals = totals_from_memory_record(*trace, *records);
  ASSERT_TRUE(totals.has_value());
  EXPECT_EQ(totals->reserved_after, (std::vector<std::uint64_t>{2 * MiB, 3 * MiB, 3 * MiB, 3 * MiB, 5 * MiB}));
  EXPECT_EQ(totals->allocated_after, (std::vector<std::uint64_t>{MiB, 3 * MiB / 2, MiB, 0, 2 * MiB}));
  EXPECT_EQ(totals->peak_reserved, 5 * MiB);
  EXPECT_EQ(totals->peak_allocated, 2 * MiB);
  EXPECT_FALSE(totals_from_memory_record(*trace, *records, "WORKSPACE").has_value());
}

TEST(MemoryRecordCsv, ReadRecordingTakesTheTotalsFromTheFileBesideOperatorMemory) {
  const TraceReadOptions options;
  Result<ProfileRecording> beside = read_recording(profile_dir / "operator_memory.csv", options);
  ASSERT_TRUE(beside.ok()) << describe(beside.error());
  EXPECT_EQ(beside->format, TraceFormat::operator_memory_csv);
  EXPECT_EQ(beside->recorded_from, profile_dir / "memory_record.csv");
  EXPECT_EQ(beside->recorded.peak_reserved, 5 * MiB);  // operator_memory.csv's own says 4 MiB
  // The same rows alone, from memory: operator_memory.csv's own totals, and the same trace.
  std::ifstream in(profile_dir / "operator_memory.csv", std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  Result<ProfileRecording> alone = parse_recording(text.str(), "operator_memory.csv", options);
  ASSERT_TRUE(alone.ok()) << describe(alone.error());
  EXPECT_TRUE(alone->recorded_from.empty());
  EXPECT_EQ(alone->recorded.peak_reserved, 4 * MiB);
  EXPECT_EQ(alone->trace.events, beside->trace.events);
}

TEST(MemoryRecordCsv, ErrorsNameTheFileAndTheLine) {
  const auto error_of = [](const std::string& text) {
    Result<std::vector<MemoryRecord>> read = parse_memory_record_csv(text, "memory_record.csv");
    EXPECT_FALSE(read.ok());
    return read.ok() ? std::string() : read.error().message;
  };
  const std::string header = "Component,Timestamp(us),Total Allocated(MB),Total Reserved(MB),Device Type\n";
  EXPECT_EQ(error_of("Component,Timestamp(us),Total Allocated(MB),Device Type\n"),
            "memory_record.csv:1: the header has no 'Total Reserved(MB)' column (torch_npu's memory_record.csv has it)");
  EXPECT_EQ(error_of(header + "PTA,10,1,2,NPU:0\nPTA,soon,1,2,NPU:0\n"),
            "memory_record.csv:3: Timestamp(us) 'soon' is not a number");
  EXPECT_EQ(error_of(header + "PTA,10,1,-2,NPU:0\n"), "memory_record.csv:2: Total Reserved(MB) is negative (-2)");
  EXPECT_EQ(error_of(header + "PTA,10,1,2\n"), "memory_record.csv:2: 4 fields where the header has 5");
  EXPECT_EQ(error_of(header + "PTA,10,1,1e300,NPU:0\n"), "memory_record.csv:2: Total Reserved(MB) '1e300' is out of range");
  EXPECT_EQ(error_of(""), "memory_record.csv:1: the file is empty: no header and no rows");
}

// A bad memory_record.csv beside operator_memory.csv is an error naming it, not a trace without its line.
TEST(MemoryRecordCsv, ABadFileBesideOperatorMemoryIsAnErrorNamingIt) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("tessera_memory_record_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(profile_dir / "operator_memory.csv", dir / "operator_memory.csv",
                             std::filesystem::copy_options::overwrite_existing);
  std::ofstream(dir / "memory_record.csv") << "Component,Timestamp(us),Total Reserved(MB),Device Type\nPTA,1,x,NPU:0\n";
  Result<ProfileRecording> read = read_recording(dir / "operator_memory.csv");
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.error().message, (dir / "memory_record.csv").string() + ":2: Total Reserved(MB) 'x' is not a number");
  // The trace alone does not need it.
  EXPECT_TRUE(read_trace(dir / "operator_memory.csv").ok());
  std::filesystem::remove_all(dir);
}

// A memory_record.csv that cannot be read as a file (here a folder) is an error naming it too, not ignored.
TEST(MemoryRecordCsv, AFolderBesideOperatorMemoryIsAnErrorNamingIt) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("tessera_memory_record_folder_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "memory_record.csv");
  std::filesystem::copy_file(profile_dir / "operator_memory.csv", dir / "operator_memory.csv",
                             std::filesystem::copy_options::overwrite_existing);
  Result<ProfileRecording> read = read_recording(dir / "operator_memory.csv");
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.error().message, (dir / "memory_record.csv").string() + ": is a folder, not a trace file");
  std::filesystem::remove_all(dir);
}

// A UTF-8 byte order mark (Excel writes one) is no part of the first column's name.
TEST(MemoryRecordCsv, AByteOrderMarkBeforeTheHeaderIsSkipped) {
  const std::string rows = "Component,Timestamp(us),Total Allocated(MB),Total Reserved(MB),Device Type\nPTA,10,1,2,NPU:0\n";
  Result<std::vector<MemoryRecord>> plain = parse_memory_record_csv(rows, "memory_record.csv");
  Result<std::vector<MemoryRecord>> marked = parse_memory_record_csv("\xEF\xBB\xBF" + rows, "memory_record.csv");
  ASSERT_TRUE(plain.ok()) << describe(plain.error());
  ASSERT_TRUE(marked.ok()) << describe(marked.error());
  ASSERT_EQ(marked->size(), 1u);
  EXPECT_EQ((*marked)[0].component, "PTA");
  EXPECT_EQ((*marked)[0].line, 2u);
  EXPECT_EQ((*marked)[0].reserved, (*plain)[0].reserved);
}

}  // namespace
}  // namespace tessera
