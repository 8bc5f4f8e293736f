// The fuzz targets (fuzz/targets.cpp) in the normal suite: every input kept under fuzz/regressions/<target>/
// (each once broke its target, and the bug is fixed) must pass again, the tests' own trace files must pass
// every target, and a few handwritten inputs per target check what the targets promise. A target reports a
// broken promise by throwing fuzz::Failure; here that is a test failure with the target's message, and so
// is any other exception, rather than a crash of the test binary.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "targets.hpp"
#include "tessera/allocator.hpp"
#include "tessera/trace.hpp"
#include "trace/gzip_file.hpp"

namespace tessera::fuzz {
namespace {

namespace fs = std::filesystem;

const fs::path regressions = TESSERA_FUZZ_REGRESSIONS;
const fs::path test_data = TESSERA_TEST_DATA;

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<fs::path> files_in(const fs::path& directory) {
  std::vector<fs::path> files;
  if (!fs::is_directory(directory)) return files;
  for (const auto& entry : fs::directory_iterator(directory)) {
    if (entry.is_regular_file()) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

const Target& target(std::string_view name) {
  for (const Target& candidate : targets()) {
    if (candidate.name == name) return candidate;
  }
  throw std::runtime_error("no fuzz target " + std::string(name));
}

// Runs a target on bytes; a failure of any kind is a test failure that names the target's complaint.
void expect_passes(std::string_view name, std::string_view bytes) {
  try {
    target(name).run(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  } catch (const Failure& failure) {
    ADD_FAILURE() << failure.what();
  } catch (const std::exception& error) {
    ADD_FAILURE() << name << ": uncaught exception: " << error.what();
  }
}

// ---- The kept inputs.

TEST(FuzzRegressions, EveryKeptInputPassesItsTarget) {
  std::size_t inputs = 0;
  for (const Target& each : targets()) {
    for (const fs::path& file : files_in(regressions / std::string(each.name))) {
      SCOPED_TRACE(file.string());
      expect_passes(each.name, read_bytes(file));
      ++inputs;
    }
  }
  RecordProperty("inputs", static_cast<int>(inputs));
  EXPECT_GT(inputs, 0u) << "no inputs under " << regressions;
}

TEST(FuzzRegressions, EveryDirectoryNamesATarget) {
  std::set<std::string> names;
  for (const Target& each : targets()) names.insert(std::string(each.name));
  for (const auto& entry : fs::directory_iterator(regressions)) {
    if (entry.is_directory()) {
      EXPECT_EQ(names.count(entry.path().filename().string()), 1u) << entry.path() << " is no fuzz target's";
    }
  }
}

// The tests' trace files are valid inputs of their readers and corrupt inputs of the others: every target
// must take every one of them without complaint.
TEST(FuzzRegressions, TheTestsTraceFilesPassEveryTarget) {
  std::vector<fs::path> files = files_in(test_data / "trace" / "data");
  for (const fs::path& file : files_in(test_data / "cli" / "data")) files.push_back(file);
  ASSERT_FALSE(files.empty());
  for (const fs::path& file : files) {
    const std::string bytes = read_bytes(file);
    for (const Target& each : targets()) {
      SCOPED_TRACE(std::string(each.name) + " on " + file.string());
      expect_passes(each.name, bytes);
    }
  }
}

TEST(FuzzRegressions, EmptyInputPassesEveryTarget) {
  for (const Target& each : targets()) {
    SCOPED_TRACE(std::string(each.name));
    expect_passes(each.name, "");
  }
}

// ---- Handwritten inputs: what each target checks, on inputs whose answer is known.

constexpr std::string_view text_trace =
    "tessera-trace 1\n"
    "name hand\n"
    "s 0\n"
    "p 7 4096\n"
    "a 1 1000 0 5\n"
    "a 2 3000 3\n"
    "i 0\n"
    "f 1 9\n"
    "f 7\n"
    "end\n";

TEST(FuzzTextTrace, AValidTraceIsReadAndRoundTrips) {
  Result<Trace> trace = parse_text_trace(text_trace, fuzz_source);
  ASSERT_TRUE(trace.ok()) << trace.error().message;
  EXPECT_EQ(trace->name, "hand");
  EXPECT_EQ(trace->events.size(), 5u);
  expect_passes("text_trace", text_trace);
}

TEST(FuzzTextTrace, ATruncatedTraceIsAnErrorNamingTheSource) {
  const std::string_view cut = text_trace.substr(0, text_trace.size() - 4);  // without "end\n"
  Result<Trace> trace = parse_text_trace(cut, fuzz_source);
  ASSERT_FALSE(trace.ok());
  EXPECT_EQ(trace.error().code, Errc::invalid_argument);
  EXPECT_TRUE(trace.error().message.starts_with("fuzz-input:")) << trace.error().message;
  EXPECT_NE(trace.error().message.find("cut short"), std::string::npos) << trace.error().message;
  expect_passes("text_trace", cut);
}

// Found by fuzzing: a carriage return inside a name or device, and an empty name line, did not survive
// format_text_trace (fixed in text_format.cpp: the reader reads them as the writer writes them).
TEST(FuzzTextTrace, NamesAndDevicesReadAsTheWriterWritesThem) {
  Result<Trace> trace = parse_text_trace("tessera-trace 1\nname a\rb\r \ndevice \r x\nend\n", fuzz_source);
  ASSERT_TRUE(trace.ok()) << trace.error().message;
  EXPECT_EQ(trace->name, "a b");
  EXPECT_EQ(trace->device, "x");
  Result<Trace> unnamed = parse_text_trace("tessera-trace 1\nname \nend\n", "dir/run.trace");
  ASSERT_TRUE(unnamed.ok()) << unnamed.error().message;
  EXPECT_EQ(unnamed->name, "run") << "an empty name line is no name: the file's stem names the trace";
}

TEST(FuzzLifetimes, AValidFileIsReadAndABackwardLifetimeIsRefusedWithItsLine) {
  constexpr std::string_view good = "id,lower,upper,size\n0,0,2,100\n1,1,3,200\n";
  Result<Trace> trace = parse_lifetimes_csv(good, fuzz_source);
  ASSERT_TRUE(trace.ok()) << trace.error().message;
  EXPECT_EQ(trace->events.size(), 4u);
  expect_passes("lifetimes_csv", good);
  constexpr std::string_view bad = "id,lower,upper,size\n0,2,1,100\n";
  Result<Trace> refused = parse_lifetimes_csv(bad, fuzz_source);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(refused.error().message.starts_with("fuzz-input:2:")) << refused.error().message;
  expect_passes("lifetimes_csv", bad);
}

TEST(FuzzMemoryRecord, TheFixtureAndRowsOfOneTimePassAndABadNumberIsRefusedWithItsLine) {
  const std::string fixture = read_bytes(test_data / "trace" / "data" / "npu_profile" / "memory_record.csv");
  ASSERT_FALSE(fixture.empty());
  expect_passes("memory_record_csv", fixture);
  // Two rows at the last time: the totals after the last event are the later row's.
  constexpr std::string_view same_time =
      "Component,Timestamp(us),Total Reserved(MB),Device Type\nPTA,5,1,NPU:0\nPTA,9,4,NPU:0\nPTA,9,2,NPU:0\n";
  Result<std::vector<MemoryRecord>> records = parse_memory_record_csv(same_time, fuzz_source);
  ASSERT_TRUE(records.ok()) << records.error().message;
  EXPECT_EQ(records->size(), 3u);
  expect_passes("memory_record_csv", same_time);
  constexpr std::string_view bad = "Component,Timestamp(us),Total Reserved(MB),Device Type\nPTA,5,lots,NPU:0\n";
  Result<std::vector<MemoryRecord>> refused = parse_memory_record_csv(bad, fuzz_source);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(refused.error().message.starts_with("fuzz-input:2:")) << refused.error().message;
  expect_passes("memory_record_csv", bad);
}

TEST(FuzzStalloc, AValidLogIsReadAndACutOneIsRefused) {
  constexpr std::string_view good = "1 0x10 100 0\nIteration Index : 0\n0 0x10 100 0\n";
  Result<Trace> trace = parse_stalloc_trace(good, fuzz_source);
  ASSERT_TRUE(trace.ok()) << trace.error().message;
  EXPECT_EQ(trace->events.size(), 3u);
  expect_passes("stalloc_trace", good);
  const std::string_view cut = good.substr(0, good.size() - 1);
  Result<Trace> refused = parse_stalloc_trace(cut, fuzz_source);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(refused.error().message.starts_with("fuzz-input:3:")) << refused.error().message;
  expect_passes("stalloc_trace", cut);
}

TEST(FuzzPytorchSnapshot, AWrittenSnapshotIsReadBackAndATruncatedOneIsRefused) {
  Result<Trace> trace = parse_text_trace(text_trace, fuzz_source);
  ASSERT_TRUE(trace.ok());
  Result<std::string> pickle = format_pytorch_snapshot(*trace);
  ASSERT_TRUE(pickle.ok()) << pickle.error().message;
  expect_passes("pytorch_snapshot", *pickle);
  const std::string_view cut = std::string_view(*pickle).substr(0, pickle->size() / 2);
  Result<Trace> refused = parse_pytorch_snapshot(cut, fuzz_source);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(refused.error().message.starts_with("fuzz-input: byte ")) << refused.error().message;
  expect_passes("pytorch_snapshot", cut);
}

// Found by fuzzing: a pickle that pops below its MARK and then builds a container from the mark threw
// std::length_error out of the reader (fixed in pickle_reader.cpp: a MARK fences the stack, as in Python).
TEST(FuzzPytorchSnapshot, OpcodesCannotReachBelowTheirMark) {
  // EMPTY_LIST, MARK, POP, LIST: the POP right at the mark pops the mark (as Python's does), so LIST finds
  // no mark. Before the fix, POP took the list from under the mark and LIST read past the stack's top.
  Result<Trace> refused = parse_pytorch_snapshot(std::string_view("](0l.", 5), fuzz_source);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, Errc::invalid_argument);
  EXPECT_NE(refused.error().message.find("no MARK"), std::string::npos) << refused.error().message;
  // MARK, EMPTY_LIST, APPEND: the list is below the mark, out of APPEND's reach.
  Result<Trace> fenced = parse_pytorch_snapshot(std::string_view("(]N(a.", 6), fuzz_source);
  ASSERT_FALSE(fenced.ok());
  EXPECT_NE(fenced.error().message.find("APPEND needs"), std::string::npos) << fenced.error().message;
  expect_passes("pytorch_snapshot", "](0l.");
  expect_passes("pytorch_snapshot", "(]N(a.");
}

// Found by fuzzing: the writer wrote a stream handle with the top bit set as a long integer beyond int64,
// which the reader took for stream 0 (fixed in pytorch_snapshot_writer.cpp: written as PyTorch writes it,
// an int64).
TEST(FuzzPytorchSnapshot, AStreamWithTheTopBitSurvivesTheWriter) {
  Result<Trace> trace = parse_text_trace("tessera-trace 1\na 1 100 0x8000000000000001\nf 1\nend\n", fuzz_source);
  ASSERT_TRUE(trace.ok()) << trace.error().message;
  Result<std::string> pickle = format_pytorch_snapshot(*trace);
  ASSERT_TRUE(pickle.ok()) << pickle.error().message;
  Result<Trace> back = parse_pytorch_snapshot(*pickle, fuzz_source);
  ASSERT_TRUE(back.ok()) << back.error().message;
  ASSERT_EQ(back->streams.size(), 1u);
  EXPECT_EQ(static_cast<std::uintptr_t>(back->streams[0]), (std::uintptr_t{1} << 63) | 1);
}

// A block of 0 bytes, which the readers used to accept and every replay then failed on: each reader refuses
// it with its position, and every target passes it.
TEST(FuzzRegressions, ABlockOfZeroBytesIsRefusedWithItsPosition) {
  const std::pair<std::string_view, std::string_view> inputs[] = {
      {"text_trace", "tessera-trace 1\na 1 0\nend\n"},
      {"lifetimes_csv", "id,lower,upper,size\n0,0,1,0\n"},
      {"stalloc_trace", "1 0x10 0 0\n"},
  };
  for (const auto& [name, input] : inputs) {
    Result<Trace> refused = parse_trace(input, fuzz_source);
    ASSERT_FALSE(refused.ok()) << name;
    EXPECT_NE(refused.error().message.find(name == "text_trace" ? "fuzz-input:2: " : "fuzz-input:"), std::string::npos)
        << refused.error().message;
    EXPECT_NE(refused.error().message.find("of 0 bytes"), std::string::npos) << refused.error().message;
    for (const Target& each : targets()) expect_passes(each.name, input);
  }
}

// Zeros that gzip shrinks a thousandfold: refused from their first bytes by every reader, not inflated whole.
TEST(FuzzRegressions, AGzipBombPassesEveryReader) {
  const std::string bomb = trace_detail::gzip(std::string(std::size_t{64} << 20, '\0'));
  for (const char* reader : {"pytorch_snapshot", "lifetimes_csv", "stalloc_trace", "text_trace"}) {
    expect_passes(reader, bomb);
  }
}

TEST(FuzzAllocatorConfig, AValidConfigurationPassesAndAnUnknownKeyIsNamed) {
  expect_passes("allocator_config", " small_max_kb : 64 , reclaim:first,");
  Result<AllocatorConfig> refused = parse_allocator_config("small_max_kb:64,bogus:1");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("unknown key 'bogus'"), std::string::npos) << refused.error().message;
  expect_passes("allocator_config", "small_max_kb:64,bogus:1");
  expect_passes("allocator_config", "garbage_collection_threshold:nan");
}

// Operation bytes (the format is in targets.cpp): a header, then opcodes with their operands.
std::string ops(std::initializer_list<int> bytes) {
  std::string out;
  for (int byte : bytes) out.push_back(static_cast<char>(byte));
  return out;
}

// Runs a handwritten sequence; a broken check is a test failure.
OpsReport replay(const std::string& bytes) {
  try {
    return replay_allocator_ops(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  } catch (const Failure& failure) {
    ADD_FAILURE() << failure.what();
  }
  return {};
}

TEST(FuzzAllocatorOps, StreamsPendingFreesAndFractionsPass) {
  const OpsReport report = replay(ops({
      0x00, 0x01,                   // 64 KiB granules, 8 MiB, small_max 64 KiB
      0, 0x80 | 3, 0x10, 0x00, 0,   // allocate 260 B (medium class: 16 << 4 | 3, + 1) on stream 0
      0, 0, 0xff, 0x01, 1,          // allocate 512 B on stream 1
      5, 0, 2,                      // record_stream(first, stream 2)
      7, 2,                         // hold stream 2
      6, 0, 1,                      // work on stream 2 uses the first block
      3, 0,                         // free it: pending on stream 2
      0, 208, 0x00, 0x00, 0x08, 0,  // allocate 4 MiB + 1 on stream 0
      9, 96,                        // memory fraction one half
      8,                            // empty_cache
      7, 0x80 | 2,                  // complete stream 2
      14, 15, 8}));                 // check the data, free the newest, empty_cache
  EXPECT_EQ(report.operations, 13u);
  EXPECT_EQ(report.allocations, 3u);
  EXPECT_EQ(report.refused_allocations, 0u);
  EXPECT_EQ(report.frees, 3u);  // two in the sequence, one in the drain
  EXPECT_EQ(report.failed_calls, 0u);
}

TEST(FuzzAllocatorOps, FailedDriverCallsLeaveEverythingConsistent) {
  const OpsReport report = replay(ops({
      0x01, 0x00,           // 2 MiB granules, 8 MiB
      10, 1, 0, 1,          // create_chunk fails from its first call on
      0, 208, 0, 0, 1, 0,   // allocate 512 KiB + 1: refused (injected)
      12,                   // clear the faults
      0, 208, 0, 0, 1, 0,   // allocate again: fine
      10, 3, 1, 0,          // map fails at its second call
      0, 208, 0, 0, 4, 3,   // allocate 2 MiB + 1 (two pages) on the top-bit stream: refused
      10, 5, 0, 1,          // unmap fails from then on
      3, 0,                 // free the block: its page stays mapped, cached
      9, 1,                 // memory fraction 1/192 (one granule): the pooled pages go back
      8}));                 // empty_cache: the cached page's unmap fails; the drain clears the faults
  EXPECT_EQ(report.allocations, 1u);
  EXPECT_EQ(report.refused_allocations, 2u);
  EXPECT_EQ(report.injected_faults, 3u);
  EXPECT_EQ(report.failed_calls, 1u);
  EXPECT_EQ(report.frees, 1u);
}

TEST(FuzzAllocatorOps, EdgeSizesAreAnsweredNotCrashedOn) {
  std::string bytes = ops({0x02, 0x03});  // 64 KiB granules, 64 MiB, small_max 64 KiB, virtual_factor 1
  for (int edge = 0; edge < 16; ++edge) bytes += ops({0, 240 + edge, edge % 4});
  bytes += ops({13, 7});  // free and record_stream of an address that is no block: not_found
  const OpsReport report = replay(bytes);
  EXPECT_EQ(report.operations, 17u);
  // 0 is refused; capacity + 1 and beyond, at least 5 sizes, are out of memory.
  EXPECT_GE(report.refused_allocations, 6u);
  EXPECT_EQ(report.allocations + report.refused_allocations, 16u);
  EXPECT_EQ(report.failed_calls, 0u);
}

TEST(FuzzAllocatorOps, PrivatePoolsKeepTheirBlocksAndTheirRefusals) {
  const OpsReport report = replay(ops({
      0x00, 0x01,                 // 64 KiB granules, 8 MiB, small_max 64 KiB
      16, 0, 0,                   // begin graph pool (1, 0) on stream 0
      0, 208, 0x00, 0x00, 0x04, 0,  // allocate 2 MiB + 1 on stream 0: into the pool
      17, 0,                      // end it
      3, 0,                       // free the block: the pool's
      0, 208, 0x00, 0x00, 0x04, 0,  // allocate 2 MiB + 1 again: the shared cache, not on the pool's range
      19,                         // the graph pool's range is still mapped
      9, 1,                       // memory fraction 1/192: what may go back goes
      19,                         // not the graph pool's pages
      9, 192,                     // fraction 1 again
      18, 0,                      // release the pool
      16, 5, 1,                   // begin plain pool (1, 1) on stream 1
      0, 0, 0x00, 0x10, 1,        // allocate 4097 B on stream 1: into it
      18, 1,                      // release while it is active: refused
      17, 1,                      // end it
      16, 1, 0,                   // begin (1, 1) as a graph pool: refused, it is plain
      17, 3,                      // end a pool never begun: not found
      18, 2,                      // release a pool that does not exist: not found
      16, 255, 0}));              // pool (0, 0): refused
  EXPECT_EQ(report.operations, 18u);
  EXPECT_EQ(report.allocations, 3u);
  EXPECT_EQ(report.refused_allocations, 0u);
  EXPECT_EQ(report.failed_calls, 0u);
  EXPECT_EQ(report.frees, 3u);  // one in the sequence, two in the drain
}

}  // namespace
}  // namespace tessera::fuzz
