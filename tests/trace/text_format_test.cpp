// Tessera's text format: a hand-written file, the round trip through the writer, and errors by line.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "tessera/trace.hpp"

namespace tessera {
namespace {

const std::filesystem::path data_dir = std::filesystem::path(TESSERA_TEST_DATA);

std::optional<std::filesystem::path> shared_traces() {
#ifdef TESSERA_SHARED_TRACES
  const std::filesystem::path path = TESSERA_SHARED_TRACES;
  if (std::filesystem::is_directory(path / "pytorch")) return path;
#endif
  return std::nullopt;
}

// A scratch folder of this process, removed at the end of the test.
struct ScratchDir {
  std::filesystem::path path = std::filesystem::temp_directory_path() /
                               ("tessera_trace_test_" + std::to_string(::getpid()) + "_" +
                                ::testing::UnitTest::GetInstance()->current_test_info()->name());
  ScratchDir() { std::filesystem::create_directories(path); }
  ~ScratchDir() { std::filesystem::remove_all(path); }
};

TEST(TextTrace, ReadsAHandWrittenFile) {
  Result<Trace> read = read_trace(data_dir / "example.trace");
  ASSERT_TRUE(read.ok()) << describe(read.error());
  const Trace& trace = *read;
  EXPECT_EQ(trace.name, "example");
  EXPECT_EQ(trace.device, "cuda:0");
  EXPECT_EQ(trace.streams, (std::vector<StreamId>{StreamId{0}, StreamId{7}}));
  EXPECT_EQ(trace.initial_blocks, (std::vector<InitialBlock>{{0, 4096, 0}, {1, 512, 1}}));
  const std::vector<TraceEvent> events{
      TraceEvent::alloc(2, 1000, 0),        TraceEvent::alloc(3, 2000, 1, 10), TraceEvent::iteration(0, 11),
      TraceEvent::free(2, 1000, 0, 12),     TraceEvent::alloc(4, 300, 0, 13),  TraceEvent::free(0, 4096, 0),
      TraceEvent::free(3, 2000, 1),         TraceEvent::iteration(1),
  };
  EXPECT_EQ(trace.events, events);
  EXPECT_EQ(trace.block_count, 5u);
  ASSERT_TRUE(validate(trace).ok());

  const TraceSummary summary = summarize(trace);
  EXPECT_EQ(summary.allocs, 3u);
  EXPECT_EQ(summary.frees, 3u);
  EXPECT_EQ(summary.iterations, 2u);
  EXPECT_EQ(summary.initial_bytes, 4608u);
  EXPECT_EQ(summary.peak_live_bytes, 7608u);
  EXPECT_EQ(summary.peak_event, 1u);
  EXPECT_EQ(summary.live_bytes_at_end, 812u);
  EXPECT_EQ(summary.live_blocks_at_end, 2u);
  EXPECT_EQ(summary.streams, 2u);
  EXPECT_EQ(summary.first_time_us, 10);
  EXPECT_EQ(summary.last_time_us, 13);
}

Trace sample_trace() {
  Trace trace;
  trace.name = "sample run";
  trace.device = "npu:3";
  trace.streams = {StreamId{0}, StreamId{0x7f00deadbeef}, StreamId{5}};
  trace.initial_blocks = {{0, 1, 2}, {1, 1ull << 40, 0}};
  trace.events = {TraceEvent::iteration(0),       TraceEvent::alloc(2, 64, 1, -5),   TraceEvent::alloc(3, 3, 0),
                  TraceEvent::free(0, 1, 2, 1),   TraceEvent::alloc(4, 7, 2),        TraceEvent::iteration(1, 99),
                  TraceEvent::free(2, 64, 1),     TraceEvent::free(4, 7, 2, 100)};
  trace.block_count = 5;
  return trace;
}

TEST(TextTrace, RoundTripsThroughTheWriter) {
  const Trace trace = sample_trace();
  ASSERT_TRUE(validate(trace).ok()) << describe(validate(trace).error());
  const std::string text = format_text_trace(trace);
  Result<Trace> back = parse_text_trace(text, "memory");
  ASSERT_TRUE(back.ok()) << describe(back.error()) << "\n" << text;
  EXPECT_EQ(*back, trace) << text;
  EXPECT_EQ(format_text_trace(*back), text);
}

TEST(TextTrace, RoundTripsThroughFilesPlainAndGzipped) {
  ScratchDir dir;
  const Trace trace = sample_trace();
  for (const char* file : {"sample.trace", "sample.trace.gz"}) {
    ASSERT_TRUE(write_text_trace(trace, dir.path / file).ok());
    Result<Trace> back = read_trace(dir.path / file);
    ASSERT_TRUE(back.ok()) << describe(back.error());
    EXPECT_EQ(*back, trace) << file;
  }
  // The gzipped file really is compressed: it starts with the gzip magic.
  std::FILE* gz = std::fopen((dir.path / "sample.trace.gz").c_str(), "rb");
  ASSERT_NE(gz, nullptr);
  EXPECT_EQ(std::fgetc(gz), 0x1f);
  std::fclose(gz);
}

TEST(TextTrace, RoundTripsARealSnapshot) {
  const auto root = shared_traces();
  if (!root) GTEST_SKIP() << "the shared traces folder (TESSERA_SHARED_TRACES) is not here";
  Result<Trace> trace = read_trace(*root / "pytorch" / "cs336-small_b4_ctx128_fwd_fp32__silmont2000.pickle.gz");
  ASSERT_TRUE(trace.ok()) << describe(trace.error());
  Result<Trace> back = parse_text_trace(format_text_trace(*trace), "memory");
  ASSERT_TRUE(back.ok()) << describe(back.error());
  // Everything but the recording's stacks, which the text format does not carry.
  Trace without_stacks = *trace;
  EXPECT_FALSE(without_stacks.stacks.empty()) << "this recording has frames";
  without_stacks.stacks.clear();
  without_stacks.event_stacks.clear();
  without_stacks.initial_stacks.clear();
  EXPECT_EQ(*back, without_stacks);
}

TEST(TextTrace, WithoutANameTheFileNamesTheTrace) {
  Result<Trace> read = parse_text_trace("tessera-trace 1\na 5 10\nend\n", "some/dir/run42.trace");
  ASSERT_TRUE(read.ok()) << describe(read.error());
  EXPECT_EQ(read->name, "run42");
  EXPECT_EQ(read->streams, std::vector<StreamId>{default_stream});
}

// Every error names the source and the line.
void expect_error(std::string_view text, std::string_view where, std::string_view words) {
  Result<Trace> read = parse_text_trace(text, "t.trace");
  ASSERT_FALSE(read.ok()) << "expected an error at " << where << " mentioning '" << words << "'";
  EXPECT_EQ(read.error().code, Errc::invalid_argument);
  EXPECT_NE(read.error().message.find(where), std::string::npos) << read.error().message;
  EXPECT_NE(read.error().message.find(words), std::string::npos) << read.error().message;
}

TEST(TextTrace, BadLinesAreErrorsThatNameTheLine) {
  expect_error("", "t.trace:1:", "empty");
  expect_error("a 1 2\nend\n", "t.trace:1:", "first line must be 'tessera-trace 1'");
  expect_error("tessera-trace 2\nend\n", "t.trace:1:", "version 2");
  expect_error("tessera-trace 1\n# c\nx 1\nend\n", "t.trace:3:", "unknown record 'x'");
  expect_error("tessera-trace 1\na 1\nend\n", "t.trace:2:", "'a' takes 2 to 4 fields, not 1");
  expect_error("tessera-trace 1\na 1 2 0 5 6\nend\n", "t.trace:2:", "'a' takes 2 to 4 fields, not 5");
  expect_error("tessera-trace 1\na 1 -2\nend\n", "t.trace:2:", "size '-2'");
  expect_error("tessera-trace 1\na 1 2 0 1.5\nend\n", "t.trace:2:", "time '1.5'");
  expect_error("tessera-trace 1\na 1 2\na 1 3\nend\n", "t.trace:3:", "block 1 is allocated while live");
  expect_error("tessera-trace 1\na 1 2\nf 1\nf 1\nend\n", "t.trace:4:", "block 1 is freed but not live");
  expect_error("tessera-trace 1\na 1 2\np 2 3\nend\n", "t.trace:3:", "'p' after the first event");
  expect_error("tessera-trace 1\np 2 3\np 2 3\nend\n", "t.trace:3:", "declared twice");
  expect_error("tessera-trace 1\na 1 2\nend\na 2 3\n", "t.trace:4:", "after 'end'");
  expect_error("tessera-trace 1\nend 5\n", "t.trace:2:", "'end' takes no fields");
  expect_error("tessera-trace 1\na 1 2\n", "t.trace:2:", "ends without 'end'");
  expect_error("tessera-trace 1\na 1 2\ne", "t.trace:3:", "unknown record 'e'");  // cut inside the last line
  // No allocator hands out a block of 0 bytes: refused where it is, not left to fail a replay.
  expect_error("tessera-trace 1\na 1 8\na 2 0\nend\n", "t.trace:3:",
               "block 2 of 0 bytes: allocators hand out no block");
  expect_error("tessera-trace 1\np 1 0\nend\n", "t.trace:2:", "block 1 of 0 bytes");
  Result<Trace> file = read_trace(data_dir / "bad_free.trace");
  ASSERT_FALSE(file.ok());
  EXPECT_NE(file.error().message.find("bad_free.trace:4: block 3 is freed but not live"), std::string::npos)
      << file.error().message;
}

}  // namespace
}  // namespace tessera
