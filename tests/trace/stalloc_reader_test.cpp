// STAlloc's Megatron traces: records, markers, pre-existing blocks, and errors by line.
#include <gtest/gtest.h>

#include <filesystem>

#include "tessera/trace.hpp"

namespace tessera {
namespace {

const std::filesystem::path data_dir = std::filesystem::path(TESSERA_TEST_DATA);

TEST(StallocTrace, ReadsRecordsAndIterationMarkersAndSkipsTheOtherMarkers) {
  Result<Trace> read = read_trace(data_dir / "stalloc_mem_log_dev0.txt");
  ASSERT_TRUE(read.ok()) << describe(read.error());
  const Trace& trace = *read;
  EXPECT_EQ(trace.name, "stalloc_mem_log_dev0");
  EXPECT_EQ(trace.streams, (std::vector<StreamId>{StreamId{0}, StreamId{0x55d0c0de0000}}));
  // The free of a pointer never allocated: live before recording, with the size the free names.
  EXPECT_EQ(trace.initial_blocks, (std::vector<InitialBlock>{{0, 4096, 0}}));
  const std::vector<TraceEvent> events{
      TraceEvent::alloc(1, 1048576, 0), TraceEvent::alloc(2, 512, 1), TraceEvent::iteration(0),
      TraceEvent::alloc(3, 2048, 0),    TraceEvent::free(2, 512, 1),  TraceEvent::free(0, 4096, 0),
      TraceEvent::alloc(4, 256, 0),     TraceEvent::iteration(1),     TraceEvent::free(3, 2048, 0),
      TraceEvent::free(4, 256, 0),
  };
  EXPECT_EQ(trace.events, events);
  ASSERT_TRUE(validate(trace).ok());
  const TraceSummary summary = summarize(trace);
  EXPECT_EQ(summary.peak_live_bytes, 4096u + 1048576u + 512u + 2048u);
  EXPECT_EQ(summary.peak_event, 3u);
  EXPECT_EQ(summary.live_blocks_at_end, 1u);
}

void expect_error(std::string_view text, std::string_view where, std::string_view words) {
  Result<Trace> read = parse_stalloc_trace(text, "mem_log_dev0.txt");
  ASSERT_FALSE(read.ok()) << "expected an error at " << where << " mentioning '" << words << "'";
  EXPECT_EQ(read.error().code, Errc::invalid_argument);
  EXPECT_NE(read.error().message.find(where), std::string::npos) << read.error().message;
  EXPECT_NE(read.error().message.find(words), std::string::npos) << read.error().message;
}

TEST(StallocTrace, BadLinesAreErrorsThatNameTheLine) {
  expect_error("", "mem_log_dev0.txt:1:", "empty");
  expect_error("1 0x10 8 0\n1 0x20 8\n", "mem_log_dev0.txt:2:", "4 fields");
  expect_error("1 0x10 8 0\nhello\n", "mem_log_dev0.txt:2:", "neither a malloc/free record nor a marker");
  expect_error("1 0xzz 8 0\n", "mem_log_dev0.txt:1:", "pointer '0xzz'");
  expect_error("1 0x10 -8 0\n", "mem_log_dev0.txt:1:", "size '-8'");
  expect_error("1 0x10 8 stream\n", "mem_log_dev0.txt:1:", "stream 'stream'");
  expect_error("1 0x10 8 0\n1 0x10 8 0\n", "mem_log_dev0.txt:2:", "still live");
  expect_error("1 0x10 8 0\n0 0x10 8 0\n0 0x10 8 0\n", "mem_log_dev0.txt:3:", "not live");
  expect_error("1 0x10 8 0\n0 0x10 16 0\n", "mem_log_dev0.txt:2:", "allocated with size 8");
  expect_error("Iteration Index : soon\n", "mem_log_dev0.txt:1:", "'soon'");
  // A malloc of 0 bytes returns null and is skipped; one that returned a pointer cannot be replayed.
  expect_error("1 0x10 8 0\n1 0x20 0 0\n", "mem_log_dev0.txt:2:", "malloc of 0 bytes returned 0x20");
  expect_error("0 0x30 0 0\n", "mem_log_dev0.txt:1:", "free of 0x30 with 0 bytes");
  // A log cut inside its last record: the line has no newline.
  expect_error("1 0x10 8 0\n1 0x20 8", "mem_log_dev0.txt:2:", "cut short");
}

}  // namespace
}  // namespace tessera
