// The profile readers: Kineto's Chrome trace JSON and torch_npu's operator_memory.csv. Events, the blocks
// live before profiling, the device chosen, the recorded totals, the errors, and choice by content.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tessera/trace.hpp"
#include "trace/gzip_file.hpp"

namespace tessera {
namespace {

const std::filesystem::path data_dir = std::filesystem::path(TESSERA_TEST_DATA);

std::string file_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

constexpr std::uint64_t MiB = 1 << 20;

// A "[memory]" event as Kineto writes it.
std::string memory(double ts, std::uint64_t addr, std::int64_t bytes, std::uint64_t allocated, std::uint64_t reserved,
                   int type = 1, int id = 0) {
  std::ostringstream out;
  out << R"({"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": )" << ts
      << R"(, "args": {"Total Reserved": )" << reserved << R"(, "Total Allocated": )" << allocated
      << R"(, "Bytes": )" << bytes << R"(, "Addr": )" << addr << R"(, "Device Id": )" << id
      << R"(, "Device Type": )" << type << "}}";
  return out.str();
}

std::string kineto(const std::vector<std::string>& events) {
  std::string text = R"({"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "GPU"}], "traceEvents": [)";
  text += R"({"ph": "X", "name": "aten::empty", "ts": 1, "dur": 2, "args": {"Bytes": "not memory"}})";
  for (const std::string& event : events) text += ",\n" + event;
  return text + "]}\n";
}

// ---- Kineto

TEST(KinetoJson, TheCpuProfileReachesItsOwnPeakOfTotalAllocated) {
  const std::filesystem::path path = data_dir / "kineto_cpu.json";
  // The most Total Allocated, found in the file's text, apart from the reader.
  const std::string text = file_text(path);
  const std::string key = "\"Total Allocated\": ";
  std::uint64_t most = 0;
  std::size_t events = 0;
  for (std::size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + 1)) {
    most = std::max<std::uint64_t>(most, std::strtoull(text.c_str() + at + key.size(), nullptr, 10));
    ++events;
  }
  ASSERT_GT(events, 100u);
  Result<ProfileRecording> read = read_recording(path);
  ASSERT_TRUE(read.ok()) << describe(read.error());
  ASSERT_TRUE(validate(read->trace).ok());
  EXPECT_EQ(read->trace.device, "cpu");
  EXPECT_EQ(read->trace.name, "kineto_cpu");
  EXPECT_EQ(read->trace.events.size(), events);
  const double peak = static_cast<double>(summarize(read->trace).peak_live_bytes);
  EXPECT_NEAR(peak, static_cast<double>(most), 0.01 * static_cast<double>(most));
  EXPECT_EQ(read->recorded.peak_allocated, most);
  EXPECT_EQ(read->recorded.allocated_after.size(), events);
}

TEST(KinetoJson, FreesAndTotalsBeforeTheProfileBecomeInitialBlocks) {
  // 3 MiB live before: a 1 MiB block freed at 30 and 2 MiB that no free names.
  const std::string text = kineto({
      memory(10, 0x1000, 4 * MiB, 7 * MiB, 20 * MiB),
      memory(20, 0x1000, -4 * static_cast<std::int64_t>(MiB), 3 * MiB, 20 * MiB),
      memory(30, 0x9000, -1 * static_cast<std::int64_t>(MiB), 2 * MiB, 20 * MiB),
      memory(40, 0x1000, 1 * MiB, 3 * MiB, 22 * MiB),
  });
  Result<ProfileRecording> read = parse_kineto_recording(text, "dir/run.json");
  ASSERT_TRUE(read.ok()) << describe(read.error());
  const Trace& trace = read->trace;
  EXPECT_EQ(trace.name, "run");
  EXPECT_EQ(trace.device, "cuda:0");
  const std::vector<InitialBlock> initial{{0, 1 * MiB, 0}, {1, 2 * MiB, 0}};
  EXPECT_EQ(trace.initial_blocks, initial);
  const std::vector<TraceEvent> events{
      TraceEvent::alloc(2, 4 * MiB, 0, 10), TraceEvent::free(2, 4 * MiB, 0, 20), TraceEvent::free(0, 1 * MiB, 0, 30),
      TraceEvent::alloc(3, 1 * MiB, 0, 40)};
  EXPECT_EQ(trace.events, events);
  EXPECT_EQ(summarize(trace).peak_live_bytes, 7 * MiB);
  const std::vector<std::uint64_t> reserved{20 * MiB, 20 * MiB, 20 * MiB, 22 * MiB};
  EXPECT_EQ(read->recorded.reserved_after, reserved);
  EXPECT_EQ(read->recorded.peak_reserved, 22 * MiB);
  EXPECT_EQ(read->recorded.peak_allocated, 7 * MiB);
}

TEST(KinetoJson, ReadsOneDeviceTheBusiestOrTheOneNamed) {
  const std::string text = kineto({
      memory(1, 0x10, 512, 512, 2 * MiB, 1, 0),
      memory(2, 0x20, 512, 512, 2 * MiB, 1, 1),
      memory(3, 0x30, 1024, 1536, 2 * MiB, 1, 1),
      memory(4, 0x40, 64, 64, 0, 0, -1),
  });
  Result<Trace> busiest = parse_kineto_trace(text, "two.json");
  ASSERT_TRUE(busiest.ok()) << describe(busiest.error());
  EXPECT_EQ(busiest->device, "cuda:1");
  EXPECT_EQ(busiest->events.size(), 2u);
  Result<Trace> cpu = parse_kineto_trace(text, "two.json", {.device = "cpu"});
  ASSERT_TRUE(cpu.ok()) << describe(cpu.error());
  EXPECT_EQ(cpu->events, std::vector<TraceEvent>{TraceEvent::alloc(0, 64, 0, 4)});
  // read_trace's --device number picks the CUDA device.
  TraceReadOptions options;
  options.pytorch.device = 0;
  Result<Trace> first = parse_trace(text, "two.json", options);
  ASSERT_TRUE(first.ok()) << describe(first.error());
  EXPECT_EQ(first->device, "cuda:0");
  Result<Trace> missing = parse_kineto_trace(text, "two.json", {.device = "cuda:7"});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("cuda:7"), std::string::npos) << missing.error().message;
}

TEST(KinetoJson, ErrorsNameTheFileAndTheEventOrByte) {
  const auto error_of = [](const std::string& text) {
    Result<Trace> read = parse_kineto_trace(text, "bad.json");
    EXPECT_FALSE(read.ok());
    if (read.ok()) return std::string();
    EXPECT_EQ(read.error().code, Errc::invalid_argument);
    return read.error().message;
  };
  const std::string no_addr = R"({"ph": "i", "name": "[memory]", "ts": 2, "args": {"Bytes": 8, "Device Type": 1}})";
  EXPECT_EQ(error_of(kineto({memory(1, 0x10, 8, 8, 0), no_addr})),
            "bad.json: traceEvents[2] ([memory]) has no 'Addr' in its args");
  const std::string text_bytes = R"({"name": "[memory]", "ts": 2, "args": {"Addr": 16, "Bytes": "8"}})";
  EXPECT_EQ(error_of(kineto({text_bytes})), "bad.json: traceEvents[1] ([memory]) has 'Bytes' \"8\", not an integer");
  EXPECT_EQ(error_of(kineto({memory(1, 0x10, 8, 8, 0), memory(2, 0x10, 8, 16, 0)})),
            "bad.json: traceEvents[2] ([memory]) allocates address 0x10, which holds a live block");
  EXPECT_EQ(error_of(kineto({memory(1, 0x10, 8, 8, 0), memory(2, 0x10, -4, 4, 0)})),
            "bad.json: traceEvents[2] ([memory]) frees 4 bytes at 0x10, where a block of 8 bytes was allocated");
  EXPECT_NE(error_of(kineto({memory(1, 0x10, 0, 8, 0)})).find("traceEvents[1] ([memory]) has Bytes 0"), std::string::npos);
  // The '}' is the 18th byte.
  EXPECT_EQ(error_of("{\"traceEvents\": [}"), "bad.json: byte 18: not JSON: syntax error while parsing value - "
                                                "unexpected '}'; expected '[', '{', or a literal");
  EXPECT_NE(error_of(kineto({})).find("has no \"[memory]\" events"), std::string::npos);
  EXPECT_EQ(error_of("{\"schemaVersion\": 1}"), "bad.json: the top-level object has no traceEvents array");
}

TEST(KinetoJson, ABareEventArrayAndGzipReadTheSame) {
  const std::string events = memory(1, 0x10, 8, 8, 0) + ",\n" + memory(2, 0x10, -8, 0, 0);
  Result<Trace> object = parse_trace(kineto({memory(1, 0x10, 8, 8, 0), memory(2, 0x10, -8, 0, 0)}), "a.json");
  Result<Trace> array = parse_trace("[" + events + "]", "a.json");
  ASSERT_TRUE(object.ok()) << describe(object.error());
  ASSERT_TRUE(array.ok()) << describe(array.error());
  EXPECT_EQ(*object, *array);
  Result<Trace> gzipped = read_trace(data_dir / "kineto_cpu.json.gz");
  Result<Trace> plain = read_trace(data_dir / "kineto_cpu.json");
  ASSERT_TRUE(gzipped.ok()) << describe(gzipped.error());
  ASSERT_TRUE(plain.ok()) << describe(plain.error());
  EXPECT_EQ(gzipped->events, plain->events);
}

// The reader keeps only the [memory] events' fields as it parses: time linear in the events (the DOM
// callback parser it used before rescanned the kept events after each one: 200 000 took 14 s, 400 000 61 s).
// Linear, not quadratic: four times the events take about four times as long (the DOM-callback reader took
// sixteen: 10^5 events 13 s, 2·10^5 55 s). A ratio of two reads in one process, not a time, so that a slower
// or loaded machine, or a sanitizer, moves both alike.
TEST(KinetoJson, ReadsInTimeLinearInTheEvents) {
  auto trace_of = [](std::size_t pairs) {  // 2 [memory] events and 2 operators a pair, ~190 bytes each
    std::string text = R"({"traceEvents": [)";
    text.reserve(pairs * 400);
    for (std::size_t i = 0; i < pairs; ++i) {
      const std::uint64_t addr = 0x10000 + 0x100 * (i % 64);
      if (i > 0) text += ",\n";
      text += R"({"ph": "X", "name": "aten::empty", "ts": 1, "dur": 2, "args": {"Input Dims": [[4, 4], []]}},)";
      text += memory(static_cast<double>(2 * i), addr, 64, 64, 0) + ",\n";
      text += R"({"ph": "X", "name": "aten::add", "ts": 1, "dur": 2, "args": {"Input Dims": [[4, 4], []]}},)";
      text += memory(static_cast<double>(2 * i + 1), addr, -64, 0, 0);
    }
    return text + "]}";
  };
  auto seconds_to_read = [](const std::string& text, std::size_t events) {
    const auto start = std::chrono::steady_clock::now();
    Result<Trace> read = parse_kineto_trace(text, "long.json");
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    EXPECT_TRUE(read.ok()) << describe(read.error());
    if (read.ok()) {
      EXPECT_EQ(read->events.size(), events);
    }
    return took.count();
  };
  constexpr std::size_t small = 5'000;
  const std::string small_text = trace_of(small);
  const std::string large_text = trace_of(4 * small);  // 40 000 [memory] events, 7.6 MB
  const double small_seconds = std::min(seconds_to_read(small_text, 2 * small), seconds_to_read(small_text, 2 * small));
  const double large_seconds = seconds_to_read(large_text, 8 * small);
  EXPECT_LT(large_seconds, 9 * small_seconds) << "4x the events: " << small_seconds << " s then " << large_seconds
                                               << " s (linear: ~4x, quadratic: ~16x)";
}

// Every level of nesting costs the parser memory; past max_json_depth (256) levels, anywhere in the file,
// the trace is refused at the byte that opens one level too many.
TEST(KinetoJson, NestingDeeperThanTheLimitIsRefusedAtItsByte) {
  const std::string limit_message = "nesting deeper than 256 levels, the most a JSON trace may have";
  Result<Trace> bomb = parse_trace(std::string(100'000, '['), "bomb.json");
  ASSERT_FALSE(bomb.ok());
  EXPECT_EQ(bomb.error().message, "bomb.json: byte 257: " + limit_message);
  // Deep inside one event's args, after strings that hold brackets, which open nothing.
  const std::string deep = std::string(300, '[') + std::string(300, ']');
  Result<Trace> in_args = parse_kineto_trace(
      kineto({R"({"name": "[memory]", "cat": "[[{{", "args": {"Addr": 16, "Bytes": 8, "Deep": )" + deep + "}}"}),
      "deep.json");
  ASSERT_FALSE(in_args.ok());
  EXPECT_NE(in_args.error().message.find("deep.json: byte "), std::string::npos) << in_args.error().message;
  EXPECT_NE(in_args.error().message.find(limit_message), std::string::npos) << in_args.error().message;
  // 256 levels are read.
  const std::string most = std::string(252, '[') + std::string(252, ']');
  Result<Trace> at_limit = parse_kineto_trace(
      kineto({R"({"name": "[memory]", "args": {"Addr": 16, "Bytes": 8, "Deep": )" + most + "}}"}), "most.json");
  EXPECT_TRUE(at_limit.ok()) << describe(at_limit.error());
  // Gzipped, the offset is in the inflated data.
  Result<Trace> gzipped = parse_trace(trace_detail::gzip(std::string(1'000'000, '[')), "bomb.json.gz");
  ASSERT_FALSE(gzipped.ok());
  EXPECT_EQ(gzipped.error().message, "bomb.json.gz (inflated): byte 257: " + limit_message);
}

// Of each event only the fields the reader reads are built (the rest is skipped as it is parsed), and those
// whole: an error shows them as the file has them.
TEST(KinetoJson, OnlyTheFieldsReadAreBuiltAndThoseWhole) {
  const std::string skipped = R"("cat": {"deep": [[1], {"Addr": "x"}]}, "args": {"Addr": 16, "Bytes": 8, "Input Dims": [[1, 2]], )"
                              R"("Total Allocated": 8, "Device Type": 1, "Device Id": 0, "Callstack": {"name": "[memory]"}})";
  Result<Trace> read = parse_kineto_trace(kineto({R"({"name": "[memory]", )" + skipped + ", \"ts\": 5}"}), "a.json");
  ASSERT_TRUE(read.ok()) << describe(read.error());
  EXPECT_EQ(read->device, "cuda:0");
  ASSERT_EQ(read->events.size(), 1u);
  EXPECT_EQ(read->events[0].size, 8u);
  EXPECT_EQ(read->events[0].time_us, 5);
  Result<Trace> bad_ts = parse_kineto_trace(
      kineto({R"({"name": "[memory]", "ts": {"at": [1, {"b": null}]}, "args": {"Addr": 16, "Bytes": 8}})"}), "a.json");
  ASSERT_FALSE(bad_ts.ok());
  EXPECT_EQ(bad_ts.error().message, R"(a.json: traceEvents[1] ([memory]) has ts {"at":[1,{"b":null}]}, not a number)");
  Result<Trace> bad_bytes = parse_kineto_trace(
      kineto({R"({"name": "[memory]", "args": {"Addr": 16, "Bytes": {"of": [8]}}})"}), "a.json");
  ASSERT_FALSE(bad_bytes.ok());
  EXPECT_EQ(bad_bytes.error().message, R"(a.json: traceEvents[1] ([memory]) has 'Bytes' {"of":[8]}, not an integer)");
}

TEST(KinetoJson, ANumberOutOfRangeNamesTheEventAndTheByte) {
  const std::string text = R"({"traceEvents": [{"name": "a"}, {"name": "[memory]", "ts": 1e309}]})";
  Result<Trace> read = parse_kineto_trace(text, "big.json");
  ASSERT_FALSE(read.ok());
  // The byte is the number's last.
  const std::size_t last = text.find("1e309") + 5;
  EXPECT_EQ(read.error().message, fmt::format("big.json: byte {}: traceEvents[1]: the number 1e309 is out of range", last));
}

// A UTF-8 byte order mark before the JSON is skipped; byte offsets still count it, as the file's bytes.
TEST(KinetoJson, AByteOrderMarkBeforeTheJsonIsSkipped) {
  const std::string bom = "\xEF\xBB\xBF";
  const std::string text = kineto({memory(1, 0x10, 8, 8, 0), memory(2, 0x10, -8, 0, 0)});
  Result<Trace> plain = parse_trace(text, "a.json");
  Result<Trace> marked = parse_trace(bom + text, "a.json");
  ASSERT_TRUE(plain.ok()) << describe(plain.error());
  ASSERT_TRUE(marked.ok()) << describe(marked.error());
  EXPECT_EQ(marked->events, plain->events);
  Result<Trace> bad = parse_trace(bom + "{\"traceEvents\": [}", "bad.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("bad.json: byte 21: not JSON"), std::string::npos) << bad.error().message;
}

// ---- operator_memory.csv

TEST(OperatorMemoryCsv, RowsBecomeEventsFreesFirstAtOneTime) {
  Result<ProfileRecording> read = read_recording(data_dir / "operator_memory.csv");
  ASSERT_TRUE(read.ok()) << describe(read.error());
  const Trace& trace = read->trace;
  EXPECT_EQ(trace.device, "npu:0");
  ASSERT_EQ(trace.streams.size(), 2u);
  EXPECT_EQ(static_cast<std::uintptr_t>(trace.streams[1]), 187650125153u);
  // Rows 0 and 1 are released at 300 when row 2 is allocated: the frees come first. Row 1 has no Active
  // Release Time: its Release Time counts. Row 2 is never released.
  const std::vector<TraceEvent> events{
      TraceEvent::alloc(0, 1 * MiB, 0, 100),    TraceEvent::alloc(1, MiB / 2, 0, 150),
      TraceEvent::free(0, 1 * MiB, 0, 300),     TraceEvent::free(1, MiB / 2, 0, 300),
      TraceEvent::alloc(2, 2 * MiB, 0, 300),    TraceEvent::alloc(3, 4096, 1, 350),
      TraceEvent::free(3, 4096, 1, 360)};
  EXPECT_EQ(trace.events, events);
  EXPECT_TRUE(trace.initial_blocks.empty());
  const std::vector<std::uint64_t> allocated{MiB, 3 * MiB / 2, MiB / 2, 0, 2 * MiB, 2 * MiB + 4096, 2 * MiB};
  EXPECT_EQ(read->recorded.allocated_after, allocated);
  const std::vector<std::uint64_t> reserved{2 * MiB, 2 * MiB, 2 * MiB, 2 * MiB, 4 * MiB, 4 * MiB, 4 * MiB};
  EXPECT_EQ(read->recorded.reserved_after, reserved);
  EXPECT_EQ(read->recorded.peak_reserved, 4 * MiB);
  EXPECT_EQ(summarize(trace).peak_live_bytes, read->recorded.peak_allocated);
}

constexpr std::string_view header = "Name,Size(KB),Allocation Time(us),Release Time(us),Stream Ptr,Device Type\n";

TEST(OperatorMemoryCsv, ARowReleasedWhenItIsAllocatedIsFreedAfterTheAllocsThere) {
  const std::string text = std::string(header) + "a,1,10,20,0,NPU:0\nb,2,20,20,0,NPU:0\nc,3,20,30,0,NPU:0\n";
  Result<Trace> read = parse_operator_memory_csv(text, "same.csv");
  ASSERT_TRUE(read.ok()) << describe(read.error());
  const std::vector<TraceEvent> events{TraceEvent::alloc(0, 1024, 0, 10), TraceEvent::free(0, 1024, 0, 20),
                                       TraceEvent::alloc(1, 2048, 0, 20), TraceEvent::alloc(2, 3072, 0, 20),
                                       TraceEvent::free(1, 2048, 0, 20), TraceEvent::free(2, 3072, 0, 30)};
  EXPECT_EQ(read->events, events);
}

// A Device Type that line ends padded, or none at all, still names a device: the trace's, in lower case.
TEST(OperatorMemoryCsv, TheDeviceIsTrimmedAndAnNpuWhereTheColumnIsMissing) {
  Result<Trace> padded = parse_operator_memory_csv(std::string(header) + "a,1,10,20,0, NPU:1\r\r\n", "padded.csv");
  ASSERT_TRUE(padded.ok()) << describe(padded.error());
  EXPECT_EQ(padded->device, "npu:1");
  Result<Trace> none = parse_operator_memory_csv("Name,Size(KB),Allocation Time(us),Release Time(us)\na,1,10,20\n",
                                                 "none.csv");
  ASSERT_TRUE(none.ok()) << describe(none.error());
  EXPECT_EQ(none->device, "npu");
}

TEST(OperatorMemoryCsv, ErrorsNameTheFileAndTheLine) {
  const auto error_of = [](const std::string& text) {
    Result<Trace> read = parse_operator_memory_csv(text, "op.csv");
    EXPECT_FALSE(read.ok());
    return read.ok() ? std::string() : read.error().message;
  };
  EXPECT_EQ(error_of("Name,Allocation Time(us),Release Time(us)\na,1,2\n"),
            "op.csv:1: the header has no 'Size(KB)' column (torch_npu's operator_memory.csv has it)");
  EXPECT_EQ(error_of(std::string(header) + "a,1,10,20,0,NPU:0\n\nb,1,ten,20,0,NPU:0\n"),
            "op.csv:4: Allocation Time(us) 'ten' is not a number");
  EXPECT_EQ(error_of(std::string(header) + "a,1,30,20,0,NPU:0\n"),
            "op.csv:2: Release Time(us) 20 is before the Allocation Time 30");
  EXPECT_EQ(error_of(std::string(header) + "a,1,10,20,0\n"), "op.csv:2: 5 fields where the header has 6");
  EXPECT_EQ(error_of(std::string(header) + "a,1,10,20,0,NPU\x01:0\n"), "op.csv:2: Device Type holds a control character");
  Result<Trace> bad = read_trace(data_dir / "bad_operator_memory.csv");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message, (data_dir / "bad_operator_memory.csv").string() + ":3: Size(KB) is negative (-512.0)");
}

// An operator_memory.csv that lacks one of its columns is still one: the error is its own, not a lifetimes
// CSV's; with a byte order mark it is read as without.
TEST(OperatorMemoryCsv, IsRecognisedWithoutSizeOrWithAByteOrderMark) {
  Result<Trace> no_size = parse_trace("Name,Allocation Time(us),Release Time(us),Device Type\na,1,2,NPU:0\n", "op.csv");
  ASSERT_FALSE(no_size.ok());
  EXPECT_EQ(no_size.error().message,
            "op.csv:1: the header has no 'Size(KB)' column (torch_npu's operator_memory.csv has it)");
  Result<Trace> no_time = parse_trace("Name,Size(KB),Release Time(us),Device Type\na,1,2,NPU:0\n", "op.csv");
  ASSERT_FALSE(no_time.ok());
  EXPECT_EQ(no_time.error().message,
            "op.csv:1: the header has no 'Allocation Time(us)' column (torch_npu's operator_memory.csv has it)");
  const std::string csv = file_text(data_dir / "operator_memory.csv");
  Result<Trace> plain = parse_trace(csv, "op.csv");
  Result<Trace> marked = parse_trace("\xEF\xBB\xBF" + csv, "op.csv");
  ASSERT_TRUE(plain.ok()) << describe(plain.error());
  ASSERT_TRUE(marked.ok()) << describe(marked.error());
  EXPECT_EQ(*marked, *plain);
}

// ---- Choice by content

TEST(ProfileFormats, AreChosenByContentNotByName) {
  const std::string csv = file_text(data_dir / "operator_memory.csv");
  const std::string json = file_text(data_dir / "kineto_cpu.json");
  Result<Trace> csv_as_txt = parse_trace(csv, "profile.txt");
  ASSERT_TRUE(csv_as_txt.ok()) << describe(csv_as_txt.error());
  EXPECT_EQ(csv_as_txt->device, "npu:0");  // not read as an STAlloc log or a lifetimes CSV
  Result<Trace> json_as_csv = parse_trace(json, "profile.csv");
  ASSERT_TRUE(json_as_csv.ok()) << describe(json_as_csv.error());
  EXPECT_EQ(json_as_csv->device, "cpu");
  // And a lifetimes CSV named .json is still a lifetimes CSV.
  Result<Trace> lifetimes = parse_trace("id,lower,upper,size\n0,0,1,8\n", "tensors.json");
  ASSERT_TRUE(lifetimes.ok()) << describe(lifetimes.error());
  EXPECT_EQ(lifetimes->events.size(), 2u);
}

}  // namespace
}  // namespace tessera
