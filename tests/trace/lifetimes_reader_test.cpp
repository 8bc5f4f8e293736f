// Lifetimes CSV: the event order, the columns, the errors, and the shared files.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "tessera/trace.hpp"

namespace tessera {
namespace {

const std::filesystem::path data_dir = std::filesystem::path(TESSERA_TEST_DATA);

std::optional<std::filesystem::path> shared_traces() {
#ifdef TESSERA_SHARED_TRACES
  const std::filesystem::path path = TESSERA_SHARED_TRACES;
  if (std::filesystem::is_directory(path / "lifetimes")) return path;
#endif
  return std::nullopt;
}

// Rows out of order; at step 2 one tensor dies and two are born, at step 3 two die.
const std::vector<TraceEvent> small_events{
    TraceEvent::alloc(0, 10, 0), TraceEvent::alloc(1, 20, 0), TraceEvent::free(0, 10, 0), TraceEvent::alloc(2, 30, 0),
    TraceEvent::alloc(3, 5, 0),  TraceEvent::free(1, 20, 0),  TraceEvent::free(3, 5, 0),  TraceEvent::free(2, 30, 0),
};

TEST(LifetimesCsv, FreesComeBeforeAllocsAtAStepEachInOrderOfId) {
  Result<Trace> read = read_trace(data_dir / "lifetimes_small.csv");
  ASSERT_TRUE(read.ok()) << describe(read.error());
  EXPECT_EQ(read->name, "lifetimes_small");
  EXPECT_EQ(read->events, small_events);
  EXPECT_TRUE(read->initial_blocks.empty());
  ASSERT_TRUE(validate(*read).ok());
  EXPECT_EQ(summarize(*read).peak_live_bytes, 55u);  // not 65: tensor 0 is gone before 1 and 3 arrive
}

TEST(LifetimesCsv, FindsColumnsByNameAndReadsFilesWithoutHeader) {
  Result<Trace> reordered = parse_lifetimes_csv(
      "size, id ,upper,lower,offset\n20,2,3,0,0\n10,0,2,0,64\n30,1,4,2,0\n5,3,3,2,0\n", "reordered.csv");
  ASSERT_TRUE(reordered.ok()) << describe(reordered.error());
  EXPECT_EQ(reordered->events, small_events);
  Result<Trace> bare = parse_lifetimes_csv("2,0,3,20\n0,0,2,10\n1,2,4,30\n3,2,3,5", "bare.csv");  // no final newline
  ASSERT_TRUE(bare.ok()) << describe(bare.error());
  EXPECT_EQ(bare->events, small_events);
  Result<Trace> negative_step = parse_lifetimes_csv("id,lower,upper,size\n0,-1,5,4\n", "n.csv");
  ASSERT_TRUE(negative_step.ok()) << describe(negative_step.error());
  EXPECT_EQ(negative_step->events.size(), 2u);
}

void expect_error(std::string_view text, std::string_view where, std::string_view words) {
  Result<Trace> read = parse_lifetimes_csv(text, "l.csv");
  ASSERT_FALSE(read.ok()) << "expected an error at " << where << " mentioning '" << words << "'";
  EXPECT_EQ(read.error().code, Errc::invalid_argument);
  EXPECT_NE(read.error().message.find(where), std::string::npos) << read.error().message;
  EXPECT_NE(read.error().message.find(words), std::string::npos) << read.error().message;
}

TEST(LifetimesCsv, BadLinesAreErrorsThatNameTheLine) {
  expect_error("", "l.csv:1:", "empty");
  expect_error("id,lower,size\n", "l.csv:1:", "no 'upper' column");
  expect_error("id,lower,upper,size\n0,0,2,10\n1,1,2\n", "l.csv:3:", "3 fields where the file has 4");
  expect_error("id,lower,upper,size\n0,0,2,10\n1,1,2,10,7\n", "l.csv:3:", "5 fields");
  expect_error("id,lower,upper,size\nx,0,2,10\n", "l.csv:2:", "id 'x'");
  expect_error("id,lower,upper,size\n0,a,2,10\n", "l.csv:2:", "lower 'a'");
  expect_error("id,lower,upper,size\n0,0,2.5,10\n", "l.csv:2:", "upper '2.5'");
  expect_error("id,lower,upper,size\n0,0,2,-10\n", "l.csv:2:", "size '-10'");
  expect_error("id,lower,upper,size\n0,3,3,10\n", "l.csv:2:", "ends at step 3, not after it starts at 3");
  expect_error("id,lower,upper,size\n0,0,2,10\n\n0,1,3,10\n", "l.csv:4:", "listed again (first on line 2)");
  expect_error("id,lower,upper,size\n0,0,2,10\n1,1,3,0\n", "l.csv:3:",
               "tensor 1 of 0 bytes: allocators hand out no block");
  Result<Trace> file = read_trace(data_dir / "bad_lifetimes.csv");
  ASSERT_FALSE(file.ok());
  EXPECT_NE(file.error().message.find("bad_lifetimes.csv:3: upper 'x'"), std::string::npos) << file.error().message;
}

// Peaks computed independently (Python, SOURCES.md's rule: alloc at lower, free at upper, frees first).
TEST(LifetimesCsv, ReadsEverySharedFile) {
  const auto root = shared_traces();
  if (!root) GTEST_SKIP() << "the shared traces folder (TESSERA_SHARED_TRACES) is not here";
  const std::map<std::string, std::pair<std::size_t, Bytes>> expected{
      {"iree_mobilebert.csv.gz", {316, 1674240}},       {"somas_bert_base.csv.gz", {5620, 15734934689}},
      {"somas_bert_large.csv.gz", {10744, 4310278401}}, {"somas_bert_nezha.csv.gz", {12062, 16986728161}},
      {"somas_resnet50.csv.gz", {1042, 1515472556}},    {"somas_tiny_bert.csv.gz", {1821, 758936113}},
  };
  std::size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(*root / "lifetimes")) {
    const std::string file = entry.path().filename().string();
    SCOPED_TRACE(file);
    Result<Trace> read = read_trace(entry.path());
    ASSERT_TRUE(read.ok()) << describe(read.error());
    ASSERT_TRUE(validate(*read).ok()) << describe(validate(*read).error());
    const TraceSummary summary = summarize(*read);
    EXPECT_EQ(summary.allocs, summary.frees);
    ++files;
    const auto it = expected.find(file);
    if (it == expected.end()) continue;  // a file added since: read and valid is all we know
    EXPECT_EQ(summary.allocs, it->second.first);
    EXPECT_EQ(summary.peak_live_bytes, it->second.second);
  }
  EXPECT_GE(files, expected.size());
}

}  // namespace
}  // namespace tessera
