// PyTorch snapshots out: the pickle encoder byte for byte against Python's, written traces read back equal
// through Tessera's reader, the pickles hold only the opcodes PyTorch's viewer (MemoryViz.js) reads, and
// their segments are laid out as the viewer draws them.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tessera/allocator.hpp"
#include "tessera/drivers.hpp"
#include "tessera/snapshot.hpp"
#include "tessera/trace.hpp"
#include "support/must.hpp"
#include "trace/gzip_file.hpp"
#include "trace/pickle_reader.hpp"
#include "trace/pickle_writer.hpp"

namespace tessera {
namespace {

using trace_detail::PickleKind;
using trace_detail::PickleRef;
using trace_detail::PickleTree;
using trace_detail::PickleWriter;

const std::filesystem::path data_dir = std::filesystem::path(TESSERA_TEST_DATA);

std::optional<std::filesystem::path> shared_traces() {
#ifdef TESSERA_SHARED_TRACES
  const std::filesystem::path path = TESSERA_SHARED_TRACES;
  if (std::filesystem::is_directory(path / "pytorch")) return path;
#endif
  return std::nullopt;
}

using test_support::must;

// A scratch folder of this process, removed at the end of the test.
struct ScratchDir {
  std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("tessera_snapshot_writer_test_" + std::to_string(::getpid()) + "_" +
                                                ::testing::UnitTest::GetInstance()->current_test_info()->name());
  ScratchDir() { std::filesystem::create_directories(path); }
  ~ScratchDir() { std::filesystem::remove_all(path); }
};

std::string hex(std::string_view bytes) {
  std::string out;
  for (const char c : bytes) {
    static constexpr char digits[] = "0123456789abcdef";
    out.push_back(digits[(static_cast<unsigned char>(c) >> 4) & 0xf]);
    out.push_back(digits[static_cast<unsigned char>(c) & 0xf]);
  }
  return out;
}

// ---- The opcode scanner: walks the pickle by the opcodes' argument lengths (Lib/pickletools.py).

// Argument of each opcode MemoryViz.js reads: fixed bytes, or a length prefix of 1 or 4 bytes and data.
struct Opcode {
  std::string_view name;
  int fixed = 0;
  int length_prefix = 0;
};

const std::map<unsigned char, Opcode>& viewer_opcodes() {
  static const std::map<unsigned char, Opcode> opcodes = {
      {0x80, {"PROTO", 1}},
      {0x95, {"FRAME", 8}},
      {'.', {"STOP"}},
      {'(', {"MARK"}},
      {'}', {"EMPTY_DICT"}},
      {']', {"EMPTY_LIST"}},
      {')', {"EMPTY_TUPLE"}},
      {'d', {"DICT"}},
      {'l', {"LIST"}},
      {'t', {"TUPLE"}},
      {0x85, {"TUPLE1"}},
      {0x86, {"TUPLE2"}},
      {0x87, {"TUPLE3"}},
      {'s', {"SETITEM"}},
      {'u', {"SETITEMS"}},
      {'a', {"APPEND"}},
      {'e', {"APPENDS"}},
      {'J', {"BININT", 4}},
      {'K', {"BININT1", 1}},
      {'M', {"BININT2", 2}},
      {0x8a, {"LONG1", 0, 1}},
      {'G', {"BINFLOAT", 8}},
      {'N', {"NONE"}},
      {0x88, {"NEWTRUE"}},
      {0x89, {"NEWFALSE"}},
      {0x8c, {"SHORT_BINUNICODE", 0, 1}},
      {'X', {"BINUNICODE", 0, 4}},
      {'q', {"BINPUT", 1}},
      {'r', {"LONG_BINPUT", 4}},
      {'h', {"BINGET", 1}},
      {'j', {"LONG_BINGET", 4}},
      {0x94, {"MEMOIZE"}},
  };
  return opcodes;
}

std::uint64_t little_endian(std::string_view bytes, std::size_t at, std::size_t width) {
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < width; ++i) value |= std::uint64_t{static_cast<unsigned char>(bytes[at + i])} << (8 * i);
  return value;
}

// Counts of each opcode; fails the test on an opcode outside the viewer's set, a PROTO other than 4 at
// the start, an opcode cut by a frame's end, a FRAME inside a frame, or anything but one STOP at the end.
std::map<std::string_view, std::size_t> scan_opcodes(std::string_view pickle) {
  std::map<std::string_view, std::size_t> counts;
  std::size_t at = 0;
  std::optional<std::size_t> frame_end;
  if (pickle.size() < 3 || static_cast<unsigned char>(pickle[0]) != 0x80 || pickle[1] != 4) {
    ADD_FAILURE() << "the pickle does not start with PROTO 4";
    return counts;
  }
  while (at < pickle.size()) {
    const auto code = static_cast<unsigned char>(pickle[at]);
    const auto found = viewer_opcodes().find(code);
    if (found == viewer_opcodes().end()) {
      ADD_FAILURE() << "byte " << at << ": opcode 0x" << hex(pickle.substr(at, 1)) << " is not one MemoryViz reads";
      return counts;
    }
    const Opcode& opcode = found->second;
    std::size_t end = at + 1 + static_cast<std::size_t>(opcode.fixed);
    if (opcode.length_prefix > 0) {
      const auto width = static_cast<std::size_t>(opcode.length_prefix);
      if (at + 1 + width > pickle.size()) {
        ADD_FAILURE() << "byte " << at << ": " << opcode.name << " runs past the end";
        return counts;
      }
      end = at + 1 + width + little_endian(pickle, at + 1, width);
    }
    if (end > pickle.size()) {
      ADD_FAILURE() << "byte " << at << ": " << opcode.name << " runs past the end";
      return counts;
    }
    if (frame_end && at < *frame_end && end > *frame_end) {
      ADD_FAILURE() << "byte " << at << ": " << opcode.name << " crosses the end of its frame";
    }
    if (opcode.name == "FRAME") {
      if (frame_end && at < *frame_end) ADD_FAILURE() << "byte " << at << ": FRAME inside a frame";
      frame_end = end + little_endian(pickle, at + 1, 8);
      if (*frame_end > pickle.size()) ADD_FAILURE() << "byte " << at << ": FRAME longer than the rest";
    }
    if (opcode.name == "PROTO" && at != 0) ADD_FAILURE() << "byte " << at << ": PROTO after the start";
    ++counts[opcode.name];
    if (opcode.name == "STOP" && end != pickle.size()) ADD_FAILURE() << "byte " << at << ": data after STOP";
    at = end;
  }
  EXPECT_EQ(counts["STOP"], 1u);
  // MemoryViz numbers MEMOIZE entries with a counter that BINPUT does not move: never mix them.
  EXPECT_EQ(counts["BINPUT"] + counts["LONG_BINPUT"], 0u);
  return counts;
}

// The scanner itself: it passes what PyTorch wrote and catches what the viewer could not read.
TEST(OpcodeScanner, PassesARealSnapshotAndCatchesWhatMemoryVizCannotRead) {
  if (const auto root = shared_traces()) {
    const std::string gz =
        must(trace_detail::read_file_bytes(*root / "pytorch" / "attention-peak-microbench__silmont2000.pickle.gz"));
    const auto counts = scan_opcodes(must(trace_detail::gunzip(gz, "real")));
    EXPECT_GT(counts.at("MEMOIZE"), 0u);
  }
  EXPECT_NONFATAL_FAILURE(scan_opcodes(std::string("\x80\x05K\x01.", 5)), "does not start with PROTO 4");
  EXPECT_NONFATAL_FAILURE(scan_opcodes(std::string("\x80\x04\x8d\x01\0\0\0\0\0\0\0a.", 14)),
                          "is not one MemoryViz reads");  // BINUNICODE8
  // A frame of 2 bytes that ends inside BININT2.
  EXPECT_NONFATAL_FAILURE(scan_opcodes(std::string("\x80\x04\x95\x02\0\0\0\0\0\0\0M\x01\x01.", 15)),
                          "crosses the end of its frame");
  EXPECT_NONFATAL_FAILURE(scan_opcodes(std::string("\x80\x04K\x01.N", 6)), "data after STOP");
}

// ---- The encoder.

std::string pickled_unsigned(std::uint64_t value) {
  PickleWriter out;
  out.unsigned_integer(value);
  return out.finish();
}

std::string pickled_signed(std::int64_t value) {
  PickleWriter out;
  out.integer(value);
  return out.finish();
}

// Expected bytes from Python 3: pickle.dumps(value, protocol=4).hex(), PROTO included.
TEST(PickleWriter, WritesIntegersAsPython) {
  EXPECT_EQ(hex(pickled_unsigned(0)), "80044b002e");
  EXPECT_EQ(hex(pickled_unsigned(255)), "80044bff2e");
  EXPECT_EQ(hex(pickled_unsigned(256)), "80049504000000000000004d00012e");
  EXPECT_EQ(hex(pickled_unsigned(65535)), "80049504000000000000004dffff2e");
  EXPECT_EQ(hex(pickled_unsigned(65536)), "80049506000000000000004a000001002e");
  EXPECT_EQ(hex(pickled_unsigned(2147483647)), "80049506000000000000004affffff7f2e");
  EXPECT_EQ(hex(pickled_unsigned(2147483648)), "80049508000000000000008a0500000080002e");
  EXPECT_EQ(hex(pickled_unsigned(139777059848192)), "80049509000000000000008a0600000062207f2e");  // an address
  EXPECT_EQ(hex(pickled_unsigned(std::uint64_t{1} << 47)), "8004950a000000000000008a07000000000080002e");
  EXPECT_EQ(hex(pickled_unsigned(INT64_MAX)), "8004950b000000000000008a08ffffffffffffff7f2e");
  EXPECT_EQ(hex(pickled_unsigned(UINT64_MAX)), "8004950c000000000000008a09ffffffffffffffff002e");
  EXPECT_EQ(hex(pickled_signed(128)), "80044b802e");
  EXPECT_EQ(hex(pickled_signed(-1)), "80049506000000000000004affffffff2e");
  EXPECT_EQ(hex(pickled_signed(-129)), "80049506000000000000004a7fffffff2e");
  EXPECT_EQ(hex(pickled_signed(INT32_MIN)), "80049506000000000000004a000000802e");
  EXPECT_EQ(hex(pickled_signed(std::int64_t{INT32_MIN} - 1)), "80049508000000000000008a05ffffff7fff2e");
  EXPECT_EQ(hex(pickled_signed(INT64_MIN)), "8004950b000000000000008a0800000000000000802e");
}

TEST(PickleWriter, WritesFloatsAndLongStringsAsPython) {
  PickleWriter real;
  real.real(0.5);
  EXPECT_EQ(hex(real.finish()), "8004950a00000000000000473fe00000000000002e");
  // Python memoizes every string it writes: memo_string's bytes.
  PickleWriter text;
  text.memo_string(std::string(300, 'a'));
  std::string expected = "8004953301000000000000582c010000";  // FRAME, BINUNICODE of 300 bytes
  for (int i = 0; i < 300; ++i) expected += "61";
  EXPECT_EQ(hex(text.finish()), expected + "942e");  // MEMOIZE, STOP
}

// Everything the encoder writes, read back by Tessera's pickle machine.
TEST(PickleWriter, ReadsBackThroughThePickleMachine) {
  PickleWriter out;
  out.begin_dict();
  out.memo_string("numbers");
  out.begin_list();
  for (std::int64_t i = 0; i < 20500; ++i) out.integer(i * 1000003 - 7000000);  // 21 APPENDS batches
  out.end_list();
  out.memo_string("map");
  out.begin_dict();
  for (int i = 0; i < 1500; ++i) {  // two SETITEMS batches; 1500 memo entries, so LONG_BINGET too
    out.memo_string("key" + std::to_string(i));
    out.memo_string("numbers");
  }
  out.end_dict();
  out.memo_string("tuples");
  out.begin_list();
  for (std::size_t count = 0; count <= 5; ++count) {
    out.begin_tuple(count);
    for (std::size_t i = 0; i < count; ++i) out.unsigned_integer(i);
    out.end_tuple();
  }
  out.end_list();
  out.memo_string("scalars");
  out.begin_list();
  out.none();
  out.boolean(true);
  out.boolean(false);
  out.real(-2.25);
  out.string(std::string(300, 'x'));
  out.unsigned_integer(UINT64_MAX);
  out.integer(INT64_MIN);
  out.memo_string("key1499");  // the last memo entry, by LONG_BINGET
  out.end_list();
  out.end_dict();
  const std::string pickle = out.finish();

  const auto counts = scan_opcodes(pickle);
  EXPECT_EQ(counts.at("APPENDS"), 21u + 1u + 1u);  // numbers in 21 batches, tuples, scalars
  EXPECT_EQ(counts.at("SETITEMS"), 2u + 1u);
  EXPECT_GT(counts.at("LONG_BINGET"), 0u);
  EXPECT_GT(counts.at("FRAME"), 1u) << "over 64 KiB: several frames";
  for (const std::string_view name : {"TUPLE1", "TUPLE2", "TUPLE3", "EMPTY_TUPLE"}) EXPECT_EQ(counts.at(name), 1u);
  EXPECT_EQ(counts.at("TUPLE"), 2u) << "MARK ... TUPLE for four and five";

  const PickleTree tree = must(trace_detail::parse_pickle(pickle, "written"));
  const PickleRef root = tree.root();
  ASSERT_EQ(tree.kind(root), PickleKind::dict);
  const PickleRef numbers = *tree.find(root, "numbers");
  ASSERT_EQ(tree.size(numbers), 20500u);
  for (std::size_t i = 0; i < 20500; ++i) {
    ASSERT_EQ(tree.integer(tree.items(numbers)[i]), static_cast<std::int64_t>(i) * 1000003 - 7000000);
  }
  const PickleRef map = *tree.find(root, "map");
  ASSERT_EQ(tree.size(map), 1500u);
  EXPECT_EQ(tree.string(tree.items(map)[2 * 1499]), "key1499");
  EXPECT_EQ(tree.items(map)[1], tree.items(root)[0]) << "a memoized string is fetched, not written again";
  const PickleRef tuples = *tree.find(root, "tuples");
  for (std::size_t count = 0; count <= 5; ++count) {
    const PickleRef tuple = tree.items(tuples)[count];
    EXPECT_EQ(tree.kind(tuple), PickleKind::tuple);
    EXPECT_EQ(tree.size(tuple), count);
  }
  const auto scalars = tree.items(*tree.find(root, "scalars"));
  ASSERT_EQ(scalars.size(), 8u);
  EXPECT_EQ(tree.kind(scalars[0]), PickleKind::none);
  EXPECT_EQ(tree.boolean(scalars[1]), true);
  EXPECT_EQ(tree.boolean(scalars[2]), false);
  EXPECT_EQ(tree.real(scalars[3]), -2.25);
  EXPECT_EQ(tree.string(scalars[4]), std::string(300, 'x'));
  EXPECT_EQ(tree.kind(scalars[5]), PickleKind::big_integer);
  EXPECT_EQ(tree.integer(scalars[6]), INT64_MIN);
  EXPECT_EQ(tree.string(scalars[7]), "key1499");
}

// ---- Snapshots.

std::string snapshot_of(const Trace& trace, const std::vector<Address>& addresses = {},
                        const SnapshotWriteOptions& options = {}) {
  return must(format_pytorch_snapshot(trace, addresses, options));
}

// What MemoryViz.js assumes of a snapshot beyond the opcodes: the top-level keys, the fields it reads,
// blocks that tile their segment from its address (it computes block addresses that way), every address an
// event names inside a segment of the device (its "Allocator State History" finds each block's segment),
// and each free_requested followed by the free_completed of the same address (shown as one "free").
void expect_viewer_layout(std::string_view pickle, int device) {
  const PickleTree tree = must(trace_detail::parse_pickle(pickle, "written"));
  const PickleRef root = tree.root();
  ASSERT_EQ(tree.kind(root), PickleKind::dict);
  ASSERT_EQ(tree.size(root), 4u) << "segments, device_traces, allocator_settings and external_annotations";
  ASSERT_TRUE(tree.find(root, "allocator_settings"));
  ASSERT_TRUE(tree.find(root, "external_annotations"));
  const PickleRef segments = *tree.find(root, "segments");
  const PickleRef traces = *tree.find(root, "device_traces");
  auto number = [&](PickleRef dict, std::string_view key) -> std::uint64_t {
    const auto value = tree.find(dict, key);
    EXPECT_TRUE(value.has_value()) << "no '" << key << "'";
    return value ? static_cast<std::uint64_t>(tree.integer(*value).value_or(-1)) : 0;
  };
  std::map<Address, Address> extents;  // start -> end
  for (const PickleRef segment : tree.items(segments)) {
    EXPECT_EQ(number(segment, "device"), static_cast<std::uint64_t>(device));
    const Address start = number(segment, "address");
    const Address end = start + number(segment, "total_size");
    number(segment, "stream");
    Address cursor = start;
    Bytes allocated = 0, requested = 0;
    for (const PickleRef block : tree.items(*tree.find(segment, "blocks"))) {
      EXPECT_EQ(number(block, "address"), cursor) << "blocks tile their segment";
      const Bytes size = number(block, "size");
      EXPECT_GT(size, 0u);
      const std::string_view state = tree.string(*tree.find(block, "state")).value_or("");
      EXPECT_TRUE(state == "active_allocated" || state == "active_pending_free" || state == "inactive") << state;
      if (state == "active_allocated") allocated += size;
      if (state != "inactive") requested += number(block, "requested_size");
      EXPECT_EQ(tree.kind(*tree.find(block, "frames")), PickleKind::list);
      cursor += size;
    }
    EXPECT_EQ(cursor, end) << "blocks cover their segment";
    EXPECT_EQ(number(segment, "allocated_size"), allocated);
    EXPECT_EQ(number(segment, "requested_size"), requested);
    const auto [it, inserted] = extents.emplace(start, end);
    EXPECT_TRUE(inserted) << "two segments at one address";
  }
  auto covered = [&](Address address) {
    auto it = extents.upper_bound(address);
    return it != extents.begin() && address < std::prev(it)->second;
  };
  ASSERT_EQ(tree.size(traces), static_cast<std::size_t>(device) + 1);
  for (int d = 0; d < device; ++d) EXPECT_EQ(tree.size(tree.items(traces)[static_cast<std::size_t>(d)]), 0u);
  const auto entries = tree.items(tree.items(traces)[static_cast<std::size_t>(device)]);
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const PickleRef entry = entries[i];
    const std::string_view action = tree.string(*tree.find(entry, "action")).value_or("");
    const Address address = number(entry, "addr");
    number(entry, "size");
    number(entry, "stream");
    EXPECT_EQ(tree.kind(*tree.find(entry, "frames")), PickleKind::list);
    EXPECT_TRUE(covered(address)) << "entry " << i << " at " << address << " is in no segment";
    if (action == "free_requested") {
      ASSERT_LT(i + 1, entries.size());
      EXPECT_EQ(tree.string(*tree.find(entries[i + 1], "action")), "free_completed");
      EXPECT_EQ(number(entries[i + 1], "addr"), address);
    } else {
      EXPECT_TRUE(action == "alloc" || action == "free_completed") << action;
    }
  }
}

// Field by field, so that a difference says where it is.
void expect_same_trace(const Trace& back, const Trace& trace) {
  EXPECT_EQ(back.name, trace.name);
  EXPECT_EQ(back.device, trace.device);
  EXPECT_TRUE(back.streams == trace.streams) << "stream tables differ";
  EXPECT_EQ(back.block_count, trace.block_count);
  ASSERT_EQ(back.initial_blocks.size(), trace.initial_blocks.size());
  for (std::size_t i = 0; i < trace.initial_blocks.size(); ++i) {
    EXPECT_TRUE(back.initial_blocks[i] == trace.initial_blocks[i]) << "initial block " << i;
  }
  ASSERT_EQ(back.events.size(), trace.events.size());
  const auto differs = std::mismatch(back.events.begin(), back.events.end(), trace.events.begin());
  EXPECT_TRUE(differs.first == back.events.end()) << "event " << (differs.first - back.events.begin()) << " differs";
  EXPECT_TRUE(back == trace);
}

Trace without_iterations(Trace trace) {
  std::erase_if(trace.events, [](const TraceEvent& event) { return event.kind == TraceEventKind::iteration; });
  return trace;
}

// Written, checked as the viewer would, and read back by Tessera's reader under the trace's own name.
Trace round_trip(const Trace& trace, const std::vector<Address>& addresses = {},
                 const SnapshotWriteOptions& options = {}) {
  const std::string pickle = snapshot_of(trace, addresses, options);
  scan_opcodes(pickle);
  const std::size_t colon = trace.device.rfind(':');
  const int device =
      options.device.value_or(colon == std::string::npos ? 0 : std::stoi(trace.device.substr(colon + 1)));
  expect_viewer_layout(pickle, device);
  return must(parse_pytorch_snapshot(pickle, trace.name + ".pickle"));
}

// Initial blocks freed by events come first in the order of their frees, then the others: the order the
// reader gives them, so the round trip is exact. Three streams, times on most events, an iteration marker.
Trace hand_made_trace() {
  Trace trace;
  trace.name = "hand-made";
  trace.device = "cuda:1";
  trace.streams = {StreamId{0}, StreamId{0x5581c0a3e2f0}, StreamId{7}};
  trace.initial_blocks = {{0, 4096, 1}, {1, 3 * MiB, 0}, {2, 100, 0}, {3, 1, 2}, {4, 20 * MiB, 1}};
  trace.events = {
      TraceEvent::alloc(5, 1000, 0, 1000),
      TraceEvent::free(1, 3 * MiB, 0, 1001),  // an initial block, freed
      TraceEvent::alloc(6, 2 * MiB, 1, 1002),
      TraceEvent::iteration(0, 1003),
      TraceEvent::free(0, 4096, 1, 1004),      // an initial block on stream 1, freed
      TraceEvent::alloc(7, 3 * MiB, 0, 1005),  // may take the freed initial block's place
      TraceEvent::alloc(8, 1, 2),              // no time; one byte, the least a block has
      TraceEvent::free(5, 1000, 0, -5),        // a time before the epoch
      TraceEvent::alloc(9, 512, 2, 1006),
      TraceEvent::free(8, 1, 2, 1007),
      TraceEvent::alloc(10, 1000, 0, 1008),
      TraceEvent::free(7, 3 * MiB, 0, 1009),
  };
  trace.block_count = 11;
  // The reader numbers initial blocks 0.. in the order it finds them: 1 (freed first), 0, then 2, 3, 4.
  std::swap(trace.initial_blocks[0], trace.initial_blocks[1]);
  for (TraceEvent& event : trace.events) {
    if (event.kind == TraceEventKind::iteration) continue;
    if (event.block == 0) {
      event.block = 1;
    } else if (event.block == 1) {
      event.block = 0;
    }
  }
  trace.initial_blocks[0].id = 0;
  trace.initial_blocks[1].id = 1;
  must(validate(trace));
  return trace;
}

TEST(SnapshotWriter, HandMadeTraceRoundTripsExactly) {
  const Trace trace = hand_made_trace();
  const Trace back = round_trip(trace);
  expect_same_trace(back, without_iterations(trace));
  EXPECT_EQ(back.device, "cuda:1") << "written under the trace's device";
}

TEST(SnapshotWriter, TextExampleRoundTripsExactly) {
  const Trace trace = must(read_text_trace(data_dir / "example.trace"));
  ASSERT_FALSE(trace.initial_blocks.empty());
  expect_same_trace(round_trip(trace), without_iterations(trace));
}

// In any order of ids and streams the trace reads back the same but for numbering.
TEST(SnapshotWriter, OtherOrdersReadBackTheSameButForNumbering) {
  Trace trace;
  trace.name = "reordered";
  trace.device = "cuda:0";
  trace.streams = {StreamId{9}, StreamId{0}};  // not the order of first use
  trace.initial_blocks = {{2, 111, 1}, {0, 222, 0}, {1, 333, 0}};
  trace.events = {TraceEvent::alloc(3, 50, 1, 1), TraceEvent::free(0, 222, 0, 2), TraceEvent::free(3, 50, 1, 3)};
  trace.block_count = 4;
  must(validate(trace));
  const Trace back = round_trip(trace);
  must(validate(back));

  // Events with stream values and blocks named by first appearance; initial blocks as (size, stream).
  auto shape = [](const Trace& t) {
    std::map<BlockId, std::size_t> label;
    std::vector<std::tuple<int, std::uint64_t, std::uintptr_t, std::int64_t, std::size_t>> events;
    for (const TraceEvent& e : t.events) {
      const std::size_t name = label.try_emplace(e.block, label.size()).first->second;
      events.emplace_back(static_cast<int>(e.kind), e.size, static_cast<std::uintptr_t>(t.streams[e.stream]), e.time_us,
                          name);
    }
    std::multiset<std::pair<std::uint64_t, std::uintptr_t>> initial;
    for (const InitialBlock& b : t.initial_blocks)
      initial.emplace(b.size, static_cast<std::uintptr_t>(t.streams[b.stream]));
    return std::make_pair(events, initial);
  };
  EXPECT_TRUE(shape(back) == shape(trace));
  EXPECT_EQ(back.block_count, trace.block_count);
}

// Read from PyTorch, written, read again: the same trace, name included.
void expect_real_round_trip(const std::string& file) {
  const auto root = shared_traces();
  if (!root) GTEST_SKIP() << "the shared traces folder (TESSERA_SHARED_TRACES) is not here";
  const Trace trace = must(read_pytorch_snapshot(*root / "pytorch" / file));
  ASSERT_FALSE(trace.initial_blocks.empty());
  expect_same_trace(round_trip(trace), trace);
}

TEST(SnapshotWriter, RealSnapshotRoundTripsExactly) {
  expect_real_round_trip("cs336-gpt2small_compiled_b1s64_adamw-step__bcrafton.pickle.gz");
}

TEST(SnapshotWriter, AnotherRealSnapshotRoundTripsExactly) {
  expect_real_round_trip("cs336-small_b32s256_fp32_fwdbwd__MAGMA27.pickle.gz");
}

TEST(SnapshotWriter, WritesPlainAndGzippedFiles) {
  ScratchDir scratch;
  const Trace trace = without_iterations(hand_made_trace());
  for (const std::string name : {"hand-made.pickle", "hand-made.pickle.gz"}) {
    const std::filesystem::path path = scratch.path / name;
    must(write_pytorch_snapshot(trace, {}, path));
    const std::string bytes = must(trace_detail::read_file_bytes(path));
    EXPECT_EQ(trace_detail::is_gzip(bytes), name.ends_with(".gz")) << name;
    expect_same_trace(must(read_pytorch_snapshot(path)), trace);
  }
  EXPECT_EQ(must(trace_detail::gunzip(must(trace_detail::read_file_bytes(scratch.path / "hand-made.pickle.gz")), "gz")),
            snapshot_of(trace));
}

TEST(SnapshotWriter, EmptyTraceIsAnEmptySnapshot) {
  Trace trace;
  trace.name = "empty";
  const std::string pickle = snapshot_of(trace);
  scan_opcodes(pickle);
  expect_viewer_layout(pickle, 0);
  const Trace back = must(parse_pytorch_snapshot(pickle, "empty.pickle"));
  EXPECT_TRUE(back.events.empty());
  EXPECT_TRUE(back.initial_blocks.empty());
}

// Synthesized addresses are reused after a free, as an allocator would: the segments stay near the peak.
TEST(SnapshotWriter, SynthesizedAddressesAreReused) {
  Trace trace;
  trace.name = "reuse";
  trace.streams = {StreamId{0}};
  for (BlockId id = 0; id < 1000; ++id) {
    trace.events.push_back(TraceEvent::alloc(id, 1 * MiB, 0));
    trace.events.push_back(TraceEvent::free(id, 1 * MiB, 0));
  }
  trace.block_count = 1000;
  const PickleTree tree = must(trace_detail::parse_pickle(snapshot_of(trace), "reuse"));
  const auto segments = tree.items(*tree.find(tree.root(), "segments"));
  ASSERT_EQ(segments.size(), 1u);
  EXPECT_EQ(tree.integer(*tree.find(segments[0], "total_size")), static_cast<std::int64_t>(1 * MiB));
  EXPECT_EQ(round_trip(trace).events, trace.events);
}

// ---- With the addresses and the state of a real replay: Tessera's allocator on the sim driver.

struct Replayed {
  std::vector<Address> addresses;
  AllocatorSnapshot state;
};

Replayed replay_on_tessera(const Trace& trace) {
  SimDriverHandle sim = must(make_sim_driver({.capacity = 4 * GiB}));
  std::unique_ptr<TesseraAllocator> allocator = must(make_tessera_allocator(*sim.driver));
  Replayed replayed;
  replayed.addresses.resize(trace.block_count);
  for (const InitialBlock& block : trace.initial_blocks) {
    replayed.addresses[block.id] =
        must(allocator->allocate(std::max<Bytes>(block.size, 1), trace.streams[block.stream]));
  }
  for (const TraceEvent& event : trace.events) {
    if (event.kind == TraceEventKind::alloc) {
      replayed.addresses[event.block] =
          must(allocator->allocate(std::max<Bytes>(event.size, 1), trace.streams[event.stream]));
    } else if (event.kind == TraceEventKind::free) {
      must(allocator->deallocate(replayed.addresses[event.block]));
    }
  }
  replayed.state = allocator->snapshot();
  return replayed;
}

std::vector<Address> written_addresses(std::string_view pickle, int device) {
  const PickleTree tree = must(trace_detail::parse_pickle(pickle, "written"));
  std::vector<Address> addresses;
  const PickleRef traces = *tree.find(tree.root(), "device_traces");
  for (const PickleRef entry : tree.items(tree.items(traces)[static_cast<std::size_t>(device)])) {
    addresses.push_back(static_cast<Address>(*tree.integer(*tree.find(entry, "addr"))));
  }
  return addresses;
}

TEST(SnapshotWriter, WritesTheAddressesAndStateOfAReplay) {
  const Trace trace = without_iterations(hand_made_trace());
  const Replayed replayed = replay_on_tessera(trace);
  for (const bool with_state : {false, true}) {
    SCOPED_TRACE(with_state ? "with the allocator's state" : "with addresses only");
    SnapshotWriteOptions options;
    if (with_state) options.state = &replayed.state;
    const std::string pickle = snapshot_of(trace, replayed.addresses, options);
    // Each event at the address the replay gave its block (a free twice: requested, completed).
    std::vector<Address> expected;
    for (const TraceEvent& event : trace.events) {
      expected.push_back(replayed.addresses[event.block]);
      if (event.kind == TraceEventKind::free) expected.push_back(replayed.addresses[event.block]);
    }
    EXPECT_EQ(written_addresses(pickle, 1), expected);
    const Trace back = round_trip(trace, replayed.addresses, options);
    if (!with_state) {
      expect_same_trace(back, trace);  // the never-freed initial blocks' segments come in trace order
      continue;
    }
    // Tessera reserves twice the device's 4 GiB per (stream, pool); the untouched tails are left out.
    const PickleTree tree = must(trace_detail::parse_pickle(pickle, "written"));
    for (const PickleRef segment : tree.items(*tree.find(tree.root(), "segments"))) {
      EXPECT_LE(*tree.integer(*tree.find(segment, "total_size")), static_cast<std::int64_t>(64 * MiB));
    }
    // The state lists segments in its own order, which the reader numbers the never-freed initial blocks
    // by; the rest is unchanged.
    must(validate(back));
    auto initial = [](const Trace& t) {
      std::multiset<std::pair<std::uint64_t, StreamId>> blocks;
      for (const InitialBlock& block : t.initial_blocks) blocks.emplace(block.size, t.streams[block.stream]);
      return blocks;
    };
    EXPECT_TRUE(initial(back) == initial(trace));
    EXPECT_EQ(summarize(back).peak_live_bytes, summarize(trace).peak_live_bytes);
    ASSERT_EQ(back.events.size(), trace.events.size());
    for (std::size_t i = 0; i < trace.events.size(); ++i) {
      EXPECT_EQ(back.events[i].kind, trace.events[i].kind) << i;
      EXPECT_EQ(back.events[i].size, trace.events[i].size) << i;
      EXPECT_EQ(back.events[i].time_us, trace.events[i].time_us) << i;
      EXPECT_TRUE(back.streams[back.events[i].stream] == trace.streams[trace.events[i].stream]) << i;
    }
  }
}

TEST(SnapshotWriter, RefusesWhatCannotBeReadBack) {
  const Trace trace = without_iterations(hand_made_trace());
  auto expect_error = [](const Result<std::string>& result, std::string_view what) {
    ASSERT_FALSE(result.ok()) << what;
    EXPECT_EQ(result.error().code, Errc::invalid_argument);
    EXPECT_NE(result.error().message.find(what), std::string::npos) << result.error().message;
  };
  expect_error(format_pytorch_snapshot(trace, {1, 2, 3}), "3 addresses for 11 blocks");

  std::vector<Address> clash(trace.block_count);
  for (BlockId id = 0; id < trace.block_count; ++id) clash[id] = 0x10000 + id * 0x1000;
  clash[5] = clash[6];  // blocks 5 and 6 are live together
  expect_error(format_pytorch_snapshot(trace, clash), "is at 0x16000, where block 5 is still live");

  const AllocatorSnapshot empty_state;
  SnapshotWriteOptions with_empty_state;
  with_empty_state.state = &empty_state;
  expect_error(format_pytorch_snapshot(trace, {}, with_empty_state), "needs the addresses");
  const Replayed replayed = replay_on_tessera(trace);
  expect_error(format_pytorch_snapshot(trace, replayed.addresses, with_empty_state),
               "of the trace's 3 initial blocks never freed");
  AllocatorSnapshot extra = replayed.state;  // an allocated block the trace knows nothing of
  Address stray = 0;                         // past every segment of the replay
  for (const SnapshotSegment& segment : extra.segments)
    stray = std::max(stray, segment.address + 4 * segment.total_size);
  extra.segments.push_back({stray,
                            2 * MiB,
                            2 * MiB,
                            StreamId{0},
                            SizePool::large,
                            {{stray, 4096, 4096, SnapshotBlock::State::active_allocated, 4096}}});
  SnapshotWriteOptions with_extra;
  with_extra.state = &extra;
  expect_error(format_pytorch_snapshot(trace, replayed.addresses, with_extra),
               "is allocated, but the trace neither touches it nor has it as an initial block");
  SnapshotWriteOptions negative_device;
  negative_device.device = -1;
  expect_error(format_pytorch_snapshot(trace, replayed.addresses, negative_device), "device -1");

  Trace broken = trace;
  broken.events.push_back(TraceEvent::free(5, 1000, 0));  // freed twice
  EXPECT_FALSE(format_pytorch_snapshot(broken).ok());
}

}  // namespace
}  // namespace tessera
