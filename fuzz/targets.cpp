// The fuzz targets (targets.hpp): decoding and checks, shared by the libFuzzer binaries and the regression
// test.
#include "targets.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tessera/allocator.hpp"
#include "tessera/driver_decorators.hpp"
#include "tessera/drivers.hpp"
#include "tessera/snapshot.hpp"
#include "tessera/trace.hpp"
#include "support/stream_witness.hpp"
#include "core/export_handle.hpp"
#include "support/export_liveness.hpp"

namespace tessera::fuzz {

namespace {

[[noreturn]] void fail(std::string_view target, std::string_view what) {
  throw Failure(fmt::format("{}: {}", target, what));
}

std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return size == 0 ? std::string_view{} : std::string_view(reinterpret_cast<const char*>(data), size);
}

// ---------------------------------------------------------------------------------------------------------
// The trace readers.

// Where two traces first differ, for the failure message; empty when equal.
std::string first_difference(const Trace& a, const Trace& b) {
  if (a.name != b.name) return fmt::format("name '{}' became '{}'", a.name, b.name);
  if (a.device != b.device) return fmt::format("device '{}' became '{}'", a.device, b.device);
  if (a.streams != b.streams) {
    return fmt::format("the stream table of {} streams became one of {}", a.streams.size(), b.streams.size());
  }
  if (a.block_count != b.block_count) return fmt::format("{} blocks became {}", a.block_count, b.block_count);
  if (a.initial_blocks.size() != b.initial_blocks.size()) {
    return fmt::format("{} initial blocks became {}", a.initial_blocks.size(), b.initial_blocks.size());
  }
  for (std::size_t i = 0; i < a.initial_blocks.size(); ++i) {
    const InitialBlock& x = a.initial_blocks[i];
    const InitialBlock& y = b.initial_blocks[i];
    if (x != y) {
      return fmt::format("initial block {} (id {} size {} stream {}) became id {} size {} stream {}", i, x.id, x.size,
                         x.stream, y.id, y.size, y.stream);
    }
  }
  if (a.events.size() != b.events.size()) return fmt::format("{} events became {}", a.events.size(), b.events.size());
  for (std::size_t i = 0; i < a.events.size(); ++i) {
    const TraceEvent& x = a.events[i];
    const TraceEvent& y = b.events[i];
    if (x != y) {
      return fmt::format("event {} ({} block {} size {} stream {} time {}) became {} block {} size {} stream {} time {}",
                         i, to_string(x.kind), x.block, x.size, x.stream, x.time_us, to_string(y.kind), y.block,
                         y.size, y.stream, y.time_us);
    }
  }
  return {};
}

// A reader's error: invalid_argument, naming the source.
void check_reader_error(std::string_view target, const Error& error) {
  if (error.code != Errc::invalid_argument) {
    fail(target, fmt::format("an error of category {}, not invalid_argument: {}", to_string(error.code), error.message));
  }
  if (!std::string_view(error.message).starts_with(fuzz_source)) {
    fail(target, fmt::format("the error does not start with the source's name '{}': {}", fuzz_source, error.message));
  }
}

// A reader's trace: valid, summarizable, and unchanged through Tessera's text format.
void check_reader_trace(std::string_view target, const Trace& trace) {
  if (auto valid = validate(trace); !valid) {
    fail(target, fmt::format("the reader answered a trace that validate() refuses: {}", valid.error().message));
  }
  const TraceSummary summary = summarize(trace);
  if (summary.initial_blocks != trace.initial_blocks.size()) fail(target, "summarize() miscounts the initial blocks");
  const auto pool_ends = static_cast<std::size_t>(std::count_if(trace.events.begin(), trace.events.end(), [](const TraceEvent& e) {
    return e.kind == TraceEventKind::end_pool || e.kind == TraceEventKind::release_pool;
  }));
  if (summary.allocs + summary.frees + summary.iterations + summary.pauses + summary.resumes + summary.record_streams +
          summary.pool_begins + pool_ends !=
      trace.events.size()) {
    fail(target, "summarize() miscounts the events");
  }
  const std::string text = format_text_trace(trace);
  Result<Trace> back = parse_text_trace(text, "round-trip.trace");
  if (!back) fail(target, fmt::format("the text format refuses its own output: {}", back.error().message));
  // Everything but a recording's stacks, which the text format does not carry.
  Trace without_stacks = trace;
  without_stacks.stacks.clear();
  without_stacks.event_stacks.clear();
  without_stacks.initial_stacks.clear();
  if (*back != without_stacks) {
    fail(target, fmt::format("the trace changed through the text format: {}", first_difference(without_stacks, *back)));
  }
}

// The trace as the snapshot writer promises to give it back: without iteration markers and pool events,
// which PyTorch snapshots have no place for (the writer puts every segment in the shared cache), and with its
// streams numbered in order of first use by a block, streams that
// no block uses left out. (The reader also numbers the streams of segment events, which are not the
// caller's and which the writer does not write; real recordings allocate a segment on the stream of the
// block that needed it, so there the orders agree.)
Trace as_written(Trace trace) {
  // Each event's stack goes with it.
  std::vector<TraceEvent> kept;
  std::vector<std::uint32_t> kept_stacks;
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    const TraceEvent& event = trace.events[i];
    if (event.kind == TraceEventKind::iteration || event.is_pool_event()) continue;
    kept.push_back(event);
    if (!trace.event_stacks.empty()) kept_stacks.push_back(trace.event_stacks[i]);
  }
  trace.events = std::move(kept);
  trace.event_stacks = std::move(kept_stacks);
  trace.pools.clear();
  constexpr std::uint32_t unused = std::numeric_limits<std::uint32_t>::max();
  std::vector<std::uint32_t> renumbered(trace.streams.size(), unused);
  std::vector<StreamId> streams;
  const auto renumber = [&](std::uint32_t& stream) {
    if (renumbered[stream] == unused) {
      renumbered[stream] = static_cast<std::uint32_t>(streams.size());
      streams.push_back(trace.streams[stream]);
    }
    stream = renumbered[stream];
  };
  for (InitialBlock& block : trace.initial_blocks) renumber(block.stream);
  for (TraceEvent& event : trace.events) renumber(event.stream);
  trace.streams = std::move(streams);
  return trace;
}

}  // namespace

int run_pytorch_snapshot(const std::uint8_t* data, std::size_t size) {
  constexpr std::string_view target = "pytorch_snapshot";
  Result<PytorchRecording> recording = parse_pytorch_recording(as_text(data, size), fuzz_source);
  if (!recording) {
    check_reader_error(target, recording.error());
    return 0;
  }
  const Trace& trace = recording->trace;
  check_reader_trace(target, trace);
  // The side record agrees with the trace.
  if (recording->reserved_after.size() != trace.events.size()) {
    fail(target, fmt::format("{} reserved_after entries for {} events", recording->reserved_after.size(),
                             trace.events.size()));
  }
  std::size_t previous = 0;
  for (const RecordedSegmentAlloc& segment : recording->segment_allocs) {
    if (segment.before_event > trace.events.size() || segment.before_event < previous) {
      fail(target, fmt::format("a segment_alloc before event {} of {}, after one before event {}", segment.before_event,
                               trace.events.size(), previous));
    }
    if (segment.stream >= trace.streams.size()) fail(target, "a segment_alloc on a stream beyond the stream table");
    previous = segment.before_event;
  }
  // Pool events are the reader's own (from the segments' pool ids), not entries of the recording.
  const auto entries_read = static_cast<std::size_t>(std::count_if(
      trace.events.begin(), trace.events.end(), [](const TraceEvent& event) { return !event.is_pool_event(); }));
  if (recording->recorded_events < entries_read + recording->ignored_events) {
    fail(target, fmt::format("{} recorded events, fewer than {} read and {} ignored", recording->recorded_events,
                             entries_read, recording->ignored_events));
  }
  // The snapshot writer: what the reader produced, written and read again, is the same trace.
  Result<std::string> pickle = format_pytorch_snapshot(trace);
  if (!pickle) fail(target, fmt::format("the snapshot writer refuses the trace: {}", pickle.error().message));
  Result<Trace> back = parse_pytorch_snapshot(*pickle, fuzz_source);
  if (!back) fail(target, fmt::format("the reader refuses the writer's snapshot: {}", back.error().message));
  const Trace expected = as_written(trace);
  if (as_written(*back) != expected) {
    fail(target, fmt::format("the trace changed through the snapshot writer: {}", first_difference(expected, *back)));
  }
  return 0;
}

int run_lifetimes_csv(const std::uint8_t* data, std::size_t size) {
  constexpr std::string_view target = "lifetimes_csv";
  Result<Trace> trace = parse_lifetimes_csv(as_text(data, size), fuzz_source);
  if (!trace) {
    check_reader_error(target, trace.error());
    return 0;
  }
  check_reader_trace(target, *trace);
  if (!trace->initial_blocks.empty()) fail(target, "a lifetimes file has no blocks live before it");
  if (trace->events.size() != 2 * trace->block_count) fail(target, "every tensor is allocated and freed once");
  return 0;
}

namespace {

// A profile's recording: the trace as every reader's, and one recorded total per event where there are any.
void check_profile_recording(std::string_view target, const ProfileRecording& recording) {
  check_reader_trace(target, recording.trace);
  const std::size_t events = recording.trace.events.size();
  const RecordedTotals& recorded = recording.recorded;
  for (const auto* totals : {&recorded.allocated_after, &recorded.reserved_after}) {
    if (!totals->empty() && totals->size() != events) {
      fail(target, fmt::format("{} recorded totals for {} events", totals->size(), events));
    }
  }
  const auto most = [](const std::vector<std::uint64_t>& values) {
    return values.empty() ? std::uint64_t{0} : *std::max_element(values.begin(), values.end());
  };
  if (most(recorded.allocated_after) != recorded.peak_allocated || most(recorded.reserved_after) != recorded.peak_reserved) {
    fail(target, "a recorded peak is not the most of its totals");
  }
  if (recording.trace.device.empty()) fail(target, "a profile's trace names no device");
}

}  // namespace

int run_kineto_json(const std::uint8_t* data, std::size_t size) {
  constexpr std::string_view target = "kineto_json";
  Result<ProfileRecording> recording = parse_kineto_recording(as_text(data, size), fuzz_source);
  if (!recording) {
    check_reader_error(target, recording.error());
    return 0;
  }
  check_profile_recording(target, *recording);
  if (recording->trace.events.empty()) fail(target, "a profile read without a [memory] event");
  return 0;
}

int run_operator_memory_csv(const std::uint8_t* data, std::size_t size) {
  constexpr std::string_view target = "operator_memory_csv";
  Result<ProfileRecording> recording = parse_operator_memory_recording(as_text(data, size), fuzz_source);
  if (!recording) {
    check_reader_error(target, recording.error());
    return 0;
  }
  check_profile_recording(target, *recording);
  if (!recording->trace.initial_blocks.empty()) fail(target, "operator_memory.csv has no blocks live before it");
  return 0;
}

int run_memory_record_csv(const std::uint8_t* data, std::size_t size) {
  constexpr std::string_view target = "memory_record_csv";
  Result<std::vector<MemoryRecord>> records = parse_memory_record_csv(as_text(data, size), fuzz_source);
  if (!records) {
    check_reader_error(target, records.error());
    return 0;
  }
  for (const MemoryRecord& record : *records) {
    if (record.line < 2) fail(target, fmt::format("a record on line {}, where the header is", record.line));
    if (record.device.empty()) fail(target, "a record names no device");
    if (record.time_us < 0) fail(target, fmt::format("a record at {} us, before time began", record.time_us));
  }
  if (records->empty()) return 0;
  // One block live from the first record's time to the last's, on the first record's device: every record of
  // its component and device is taken, the peak is their most, and the totals after the free are the last
  // record's of the latest time (rows of one time in the file's order).
  const MemoryRecord& first = records->front();
  Trace trace;
  trace.name = "fuzz";
  trace.device = first.device;
  trace.streams = {StreamId{0}};
  trace.block_count = 1;
  std::int64_t begin = first.time_us;
  std::int64_t end = first.time_us;
  std::uint64_t most = 0;
  const MemoryRecord* last = nullptr;
  for (const MemoryRecord& record : *records) {
    if (record.component != first.component || record.device != first.device) continue;
    begin = std::min(begin, record.time_us);
    if (last == nullptr || record.time_us >= last->time_us) last = &record;
    end = std::max(end, record.time_us);
    most = std::max(most, record.reserved);
  }
  trace.events = {TraceEvent::alloc(0, 1, 0, begin), TraceEvent::free(0, 1, 0, end)};
  const std::optional<RecordedTotals> totals = totals_from_memory_record(trace, *records, first.component);
  if (!totals) fail(target, "the first record's own component and device give no totals");
  if (totals->reserved_after.size() != 2) fail(target, fmt::format("{} totals for 2 events", totals->reserved_after.size()));
  if (totals->peak_reserved != most) fail(target, fmt::format("peak reserved {} where the most is {}", totals->peak_reserved, most));
  if (totals->reserved_after.back() != last->reserved) {
    fail(target, fmt::format("{} reserved after the last event, where the last record (line {}) has {}",
                             totals->reserved_after.back(), last->line, last->reserved));
  }
  return 0;
}

int run_stalloc_trace(const std::uint8_t* data, std::size_t size) {
  constexpr std::string_view target = "stalloc_trace";
  Result<Trace> trace = parse_stalloc_trace(as_text(data, size), fuzz_source);
  if (!trace) {
    check_reader_error(target, trace.error());
    return 0;
  }
  check_reader_trace(target, *trace);
  return 0;
}

int run_text_trace(const std::uint8_t* data, std::size_t size) {
  constexpr std::string_view target = "text_trace";
  Result<Trace> trace = parse_text_trace(as_text(data, size), fuzz_source);
  if (!trace) {
    check_reader_error(target, trace.error());
    return 0;
  }
  check_reader_trace(target, *trace);
  // Formatting is stable: the text of what was read back is the text it was read from.
  const std::string text = format_text_trace(*trace);
  Result<Trace> back = parse_text_trace(text, fuzz_source);
  if (!back || format_text_trace(*back) != text) fail(target, "format_text_trace is not stable through a round trip");
  return 0;
}

// ---------------------------------------------------------------------------------------------------------
// The configuration parser.

namespace {

std::string_view reclaim_name(AllocatorConfig::Reclaim reclaim) {
  switch (reclaim) {
    case AllocatorConfig::Reclaim::never: return "never";
    case AllocatorConfig::Reclaim::when_full: return "when_full";
    case AllocatorConfig::Reclaim::first: return "first";
  }
  return "?";
}

// The fields this target knows, as the parser reads them back. (A key added later keeps its default here:
// known_fields_equal compares only these.)
std::string canonical(const AllocatorConfig& config) {
  std::string text;
  if (config.garbage_collection_threshold != 0.0) {
    text += fmt::format("garbage_collection_threshold:{},", config.garbage_collection_threshold);
  }
  text += fmt::format("roundup_power2_divisions:{},small_max_kb:{},page_max_mb:{},reclaim:{},virtual_factor:{}",
                      config.roundup_power2_divisions, config.small_max / KiB, config.page_max / MiB,
                      reclaim_name(config.reclaim), config.virtual_factor);
  return text;
}

bool known_fields_equal(const AllocatorConfig& a, const AllocatorConfig& b) {
  return a.garbage_collection_threshold == b.garbage_collection_threshold &&
         a.roundup_power2_divisions == b.roundup_power2_divisions && a.small_max == b.small_max &&
         a.page_max == b.page_max && a.reclaim == b.reclaim && a.virtual_factor == b.virtual_factor;
}

std::string_view trim_blanks(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

// The entries of an accepted text, each as key:value without blanks, in reverse order.
std::string reversed_entries(std::string_view text) {
  std::vector<std::string> entries;
  while (!text.empty()) {
    const std::size_t comma = text.find(',');
    const std::string_view item = trim_blanks(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    if (item.empty()) continue;
    const std::size_t colon = item.find(':');
    entries.push_back(fmt::format("{}:{}", trim_blanks(item.substr(0, colon)), trim_blanks(item.substr(colon + 1))));
  }
  std::string out;
  for (auto entry = entries.rbegin(); entry != entries.rend(); ++entry) {
    if (!out.empty()) out += ',';
    out += *entry;
  }
  return out;
}

}  // namespace

int run_allocator_config(const std::uint8_t* data, std::size_t size) {
  constexpr std::string_view target = "allocator_config";
  const std::string_view text = as_text(data, size);
  Result<AllocatorConfig> config = parse_allocator_config(text);
  if (!config) {
    if (config.error().code != Errc::invalid_argument) fail(target, "an error that is not invalid_argument");
    if (!config.error().message.starts_with("allocator configuration: ")) {
      fail(target, fmt::format("the error does not say it is about the configuration: {}", config.error().message));
    }
    return 0;
  }
  if (config->small_max % KiB != 0 || config->page_max % MiB != 0) fail(target, "sizes are not whole KiB and MiB");
  const std::string again = canonical(*config);
  Result<AllocatorConfig> back = parse_allocator_config(again);
  if (!back) fail(target, fmt::format("the canonical form '{}' is refused: {}", again, back.error().message));
  if (!known_fields_equal(*back, *config)) {
    fail(target, fmt::format("the canonical form '{}' reads back differently", again));
  }
  // Neither the order of the entries nor the blanks around keys and values matter.
  const std::string reversed = reversed_entries(text);
  Result<AllocatorConfig> turned = parse_allocator_config(reversed);
  if (!turned) fail(target, fmt::format("the same entries reversed, '{}', are refused: {}", reversed, turned.error().message));
  if (*turned != *config) fail(target, fmt::format("the same entries reversed, '{}', read differently", reversed));
  // What the parser accepts, the allocator accepts, and it works: one block in and out on a sim device.
  static SimDriverHandle sim = [] {
    auto made = make_sim_driver({.capacity = 1 * GiB, .granularity = 2 * MiB});
    if (!made) throw Failure("allocator_config: no sim driver: " + made.error().message);
    return std::move(*made);
  }();
  {
    Result<std::unique_ptr<TesseraAllocator>> allocator = make_tessera_allocator(*sim.driver, *config);
    if (!allocator) {
      fail(target, fmt::format("make_tessera_allocator refuses a parsed configuration: {}", allocator.error().message));
    }
    if ((*allocator)->config() != *config) fail(target, "the allocator holds another configuration");
    for (const Bytes request : {Bytes{700}, 3 * MiB + 1}) {
      Result<Address> block = (*allocator)->allocate(request, default_stream);
      if (!block) fail(target, fmt::format("allocate({}) on an empty device: {}", request, block.error().message));
      if (auto freed = (*allocator)->deallocate(*block); !freed) fail(target, "deallocate failed");
    }
    if (auto broken = (*allocator)->check()) fail(target, "check(): " + *broken);
    if (auto emptied = (*allocator)->empty_cache(); !emptied) fail(target, "empty_cache failed");
    if ((*allocator)->stats().reserved_bytes != 0) fail(target, "pages held after empty_cache");
  }
  if (sim.driver->census() != DriverCensus{}) fail(target, "the allocator left something in the driver");
  return 0;
}

// ---------------------------------------------------------------------------------------------------------
// Operation sequences on the allocator.
//
// Byte format (every byte is used; reading past the end gives zeros):
//   header, 2 bytes: the device (granule 64 KiB or 2 MiB; capacity 8 or 64 MiB) and the configuration
//     (reclaim policy, garbage collection, page_max, roundup divisions, small_max, virtual_factor, chunk_max,
//     and whether the driver maps whole handles only, as Ascend's does);
//   then operations, one opcode byte each, modulo 16, with their operand bytes:
//     0-2 allocate (size: 1 class byte + 2 or 3 bytes; stream: 1 byte)    3-4 deallocate (block: 1 byte)
//     5 record_stream (block, stream)     6 use: work on a held stream touches a block (block, which user)
//     7 hold or complete a stream (1 byte)   8 empty_cache   9 set_memory_fraction (1 byte)
//     10-11 arm a driver fault (call, nth, repeat and error: 3 bytes)   12 clear the faults
//     13 deallocate / record_stream of an address that is not a live block (1 byte)
//     14 check every live block's bytes, whole, now     15 free the newest block
//
// Every new block: no overlap with a live block, 512-byte aligned, within the limit, not in use by work on
// another stream. After every operation: check() is clean; the driver's census matches the statistics; the
// requested bytes, their peak and the out-of-memory count match the model; the stream-contract witness saw
// no violation; while at most 32 blocks are live (else every 8th operation) the snapshot shows every live
// block allocated and mapped whole, and no other. Live blocks are filled at allocation with a pattern
// derived from their id, and their bytes are compared with it through the driver (which also proves them
// mapped and accessible) after every operation while at most 256 KiB are live (else every 16th, blocks over
// 64 KiB by one window per 64 KiB), and whole before each free. At the end, with faults cleared and streams
// completed: every block frees, empty_cache leaves no page and no event, the whole capacity is one
// allocation, and the destroyed allocator leaves the driver empty.

namespace {

constexpr std::string_view ops_target = "allocator_ops";

class ByteReader {
 public:
  ByteReader(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  bool done() const { return position_ >= size_; }
  std::uint8_t u8() { return position_ < size_ ? data_[position_++] : std::uint8_t{0}; }
  std::uint32_t u16() { return std::uint32_t{u8()} | std::uint32_t{u8()} << 8; }
  std::uint32_t u24() { return u16() | std::uint32_t{u8()} << 16; }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t position_ = 0;
};

std::uint64_t raw(StreamId stream) { return static_cast<std::uint64_t>(stream); }

// The stream contract (tests/support/stream_witness.hpp, shared with the adversarial tests), checked on the
// calls that really reach the device: work queued on a held stream uses a range until the stream, or an
// event recorded on it after the work, is proven complete; unmapping such a range before that, or handing
// it to another stream, is a violation.
using Witness = test_support::StreamWitness;

// The host driver as a platform that maps whole handles only (Ascend's aclrtMapMem): the allocator's
// handle-per-block rules and the handles it gives back before a block would pin part of one.
class WholeHandlesOnly final : public ForwardingDriver {
 public:
  explicit WholeHandlesOnly(std::unique_ptr<Driver> inner) : ForwardingDriver(std::move(inner)) {
    capabilities_ = ForwardingDriver::capabilities();
    capabilities_.partial_map = false;
  }
  const DriverCapabilities& capabilities() const noexcept override { return capabilities_; }

 private:
  DriverCapabilities capabilities_;
};

// The pattern word `word` of the block with id `seed`. A macro rather than a function, so that it is
// inlined into the uninstrumented loops below even when they are compiled without optimization.
#define TESSERA_FUZZ_PATTERN(seed, word) (((seed) + 1) * 0x9e3779b97f4a7c15ull ^ ((word) + 1) * 0xbf58476d1ce4e5b9ull)

// The loops over every word of a block are the fuzzer's own bookkeeping, not code under test: without
// coverage and sanitizer instrumentation they run at memory speed (instrumented, they took most of the time).
#if defined(__clang__)
#define TESSERA_FUZZ_PLAIN __attribute__((no_sanitize("address", "undefined", "coverage")))
#else
#define TESSERA_FUZZ_PLAIN
#endif

TESSERA_FUZZ_PLAIN void fill_pattern(std::uint64_t* words, std::size_t count, std::uint64_t seed) {
  for (std::size_t word = 0; word < count; ++word) words[word] = TESSERA_FUZZ_PATTERN(seed, word);
}

// The first byte of `words` (`size` bytes from pattern word `first`) that differs from the pattern; `size`
// when none does.
TESSERA_FUZZ_PLAIN std::size_t pattern_mismatch(const std::uint64_t* words, std::size_t size, std::uint64_t seed,
                                                std::size_t first) {
  const std::size_t whole = size / 8;
  for (std::size_t word = 0; word < whole; ++word) {
    if (words[word] != TESSERA_FUZZ_PATTERN(seed, first + word)) {
      const std::uint64_t expected = TESSERA_FUZZ_PATTERN(seed, first + word);
      std::size_t byte = 0;
      while (reinterpret_cast<const std::uint8_t*>(&words[word])[byte] ==
             reinterpret_cast<const std::uint8_t*>(&expected)[byte]) {
        ++byte;
      }
      return word * 8 + byte;
    }
  }
  const std::uint64_t expected = TESSERA_FUZZ_PATTERN(seed, first + whole);
  for (std::size_t byte = 0; byte < size % 8; ++byte) {
    if (reinterpret_cast<const std::uint8_t*>(&words[whole])[byte] !=
        reinterpret_cast<const std::uint8_t*>(&expected)[byte]) {
      return whole * 8 + byte;
    }
  }
  return size;
}

// A buffer of at least `words` words, kept between runs so that large blocks cost no allocation each time.
std::uint64_t* scratch(std::size_t words) {
  static std::vector<std::uint64_t> buffer;
  if (buffer.size() < words) buffer.resize(std::max(words, 2 * buffer.size()));
  return buffer.data();
}

// The calls the allocator makes, which faults may be armed on.
constexpr std::array<DriverCall, 13> fault_calls = {
    DriverCall::reserve,      DriverCall::create_chunk,       DriverCall::release_chunk,  DriverCall::map,
    DriverCall::set_access,   DriverCall::unmap,             DriverCall::create_event,  DriverCall::record_event,
    DriverCall::query_event,  DriverCall::synchronize_event, DriverCall::destroy_event, DriverCall::synchronize_stream,
    DriverCall::synchronize_device};

// Streams of the sequences: the default, two others, and one that differs from stream 1 only in its top bit.
constexpr std::array<std::uintptr_t, 4> stream_values = {0, 1, 2, (std::uintptr_t{1} << 63) | 1};

class OpsRun {
 public:
  OpsRun(const std::uint8_t* data, std::size_t size) : in_(data, size) {}

  OpsReport run() {
    set_up();
    while (!in_.done()) {
      const std::uint8_t opcode = in_.u8() % 20;
      step(opcode);
      ++report_.operations;
      // The counters after every operation; the snapshot and the bytes of every block (sampled) too while
      // they are few, else every 8th and 16th operation. Each block is checked whole before its free.
      verify(report_.operations % 8 == 0 || live_.size() <= 32, report_.operations % 16 == 0 || live_bytes_ <= 256 * KiB);
    }
    drain();
    return report_;
  }

 private:
  struct Live {
    Bytes requested;
    StreamId stream;
    std::uint64_t seed;
    std::vector<StreamId> users;  // the allocating stream and those named by record_stream
  };

  [[noreturn]] void fail(std::string_view what) const {
    fuzz::fail(ops_target, fmt::format("after {} operations ({}): {}", steps_, last_, what));
  }

  void set_up() {
    const std::uint8_t device = in_.u8();
    const std::uint8_t options = in_.u8();
    granule_ = (device & 1) != 0 ? 2 * MiB : 64 * KiB;
    capacity_ = (device & 2) != 0 ? 64 * MiB : 8 * MiB;
    std::string config;
    constexpr std::array<std::string_view, 4> reclaim = {"when_full", "first", "never", "when_full"};
    config += fmt::format("reclaim:{}", reclaim[(device >> 2) & 3]);
    if ((device & 16) != 0) config += ",garbage_collection_threshold:0.5";
    constexpr std::array<unsigned, 4> page_max_mb = {0, 1, 4, 0};
    config += fmt::format(",page_max_mb:{}", page_max_mb[(device >> 5) & 3]);
    if ((device & 128) != 0) config += ",roundup_power2_divisions:4";
    if ((options & 1) != 0) config += ",small_max_kb:64";
    if ((options & 2) != 0) config += ",virtual_factor:1";
    constexpr std::array<std::string_view, 4> chunks = {"", ",chunk_max_mb:0", ",chunk_max_mb:1", ",chunk_max_mb:8"};
    config += chunks[(options >> 2) & 3];
    Result<AllocatorConfig> parsed = parse_allocator_config(config);
    if (!parsed) fail("the sequence's configuration is refused: " + parsed.error().message);
    config_ = *parsed;

    auto host = make_host_driver({.capacity = capacity_, .granularity = granule_, .require_set_access = true});
    if (!host) fail("no host driver: " + host.error().message);
    auto witness = std::make_unique<Witness>(std::move(*host));
    witness_ = witness.get();
    std::unique_ptr<Driver> platform = std::move(witness);
    if ((options & 16) != 0) platform = std::make_unique<WholeHandlesOnly>(std::move(platform));
    faults_ = std::make_unique<FaultInjectingDriver>(std::move(platform));
    auto allocator = make_tessera_allocator(*faults_, config_);
    if (!allocator) fail("make_tessera_allocator: " + allocator.error().message);
    allocator_ = std::move(*allocator);
    limit_ = capacity_ / granule_ * granule_;
  }

  StreamId stream_operand() { return StreamId{stream_values[in_.u8() % stream_values.size()]}; }

  Bytes size_operand() {
    // Mostly small and medium blocks: every byte of a block is written and read back, so large ones cost.
    const std::uint8_t kind = in_.u8();
    if (kind < 128) return 1 + in_.u16() % (8 * KiB);
    if (kind < 208) return 1 + (std::uint64_t{in_.u16()} << 4 | (kind & 15)) % (1 * MiB);
    if (kind < 240) return 1 + std::uint64_t{in_.u24()} * 8 % (capacity_ + capacity_ / 4);
    const std::array<Bytes, 16> edges = {0,
                                         1,
                                         511,
                                         513,
                                         granule_ - 1,
                                         granule_,
                                         granule_ + 1,
                                         config_.small_max,
                                         config_.small_max + 1,
                                         capacity_ - granule_,
                                         capacity_,
                                         capacity_ + 1,
                                         capacity_ * config_.virtual_factor + 1,
                                         Bytes{1} << 63,
                                         ~Bytes{0} - 511,
                                         ~Bytes{0}};
    return edges[kind & 15];
  }

  // A live block chosen by a byte; none when there are none.
  std::optional<Address> block_operand() {
    const std::uint8_t pick = in_.u8();
    if (live_.empty()) return std::nullopt;
    return order_[pick % order_.size()];
  }

  void step(std::uint8_t opcode) {
    ++steps_;
    switch (opcode) {
      case 0:
      case 1:
      case 2: {
        const Bytes size = size_operand();
        const StreamId stream = stream_operand();
        last_ = fmt::format("allocate {} on stream {:#x}", size, raw(stream));
        allocate(size, stream);
        break;
      }
      case 3:
      case 4:
      case 15: {
        std::optional<Address> block = opcode == 15 ? newest() : block_operand();
        last_ = "deallocate";
        if (block) deallocate(*block);
        break;
      }
      case 5: {
        const std::optional<Address> block = block_operand();
        const StreamId stream = stream_operand();
        last_ = fmt::format("record_stream on {:#x}", raw(stream));
        if (!block) break;
        Result<void> done = allocator_->record_stream(*block, stream);
        if (!done) fail("record_stream failed: " + describe(done.error()));
        std::vector<StreamId>& users = live_.at(*block).users;
        if (std::find(users.begin(), users.end(), stream) == users.end()) users.push_back(stream);
        break;
      }
      case 6: {
        const std::optional<Address> block = block_operand();
        const std::uint8_t which = in_.u8();
        last_ = "use";
        if (!block) break;
        const Live& live = live_.at(*block);
        witness_->use(live.users[which % live.users.size()], *block, live.requested);
        break;
      }
      case 7: {
        const std::uint8_t choice = in_.u8();
        const StreamId stream{stream_values[choice % stream_values.size()]};
        StreamControl& control = *faults_->stream_control();
        if ((choice & 0x80) != 0) {
          last_ = fmt::format("complete stream {:#x}", raw(stream));
          control.complete(stream);
          held_.erase(raw(stream));
        } else {
          last_ = fmt::format("hold stream {:#x}", raw(stream));
          control.hold(stream);
          held_.insert(raw(stream));
        }
        break;
      }
      case 8: {
        last_ = "empty_cache";
        tolerate("empty_cache", allocator_->empty_cache());
        break;
      }
      case 9: {
        const std::uint8_t value = in_.u8();
        if (value == 0) {
          last_ = "set_memory_fraction out of range";
          for (const double bad : {0.0, -0.5, 1.5, std::numeric_limits<double>::quiet_NaN()}) {
            Result<void> refused = allocator_->set_memory_fraction(bad);
            if (refused || refused.error().code != Errc::invalid_argument) {
              fail(fmt::format("set_memory_fraction({}) is not refused as invalid_argument", bad));
            }
          }
          break;
        }
        const double fraction = value >= 192 ? 1.0 : static_cast<double>(value) / 192.0;
        last_ = fmt::format("set_memory_fraction({})", fraction);
        Result<void> done = allocator_->set_memory_fraction(fraction);
        // The new limit holds even when giving pages back failed.
        limit_ = std::max(granule_, static_cast<Bytes>(static_cast<double>(capacity_) * fraction) / granule_ * granule_);
        tolerate("set_memory_fraction", std::move(done));
        break;
      }
      case 10:
      case 11: {
        const DriverCall call = fault_calls[in_.u8() % fault_calls.size()];
        const std::uint64_t nth = 1 + in_.u8() % 8;
        const std::uint8_t mode = in_.u8();
        const auto repeat = (mode & 1) != 0 ? FaultInjectingDriver::Repeat::from_then_on : FaultInjectingDriver::Repeat::once;
        const Errc code = (mode & 2) != 0 && call == DriverCall::create_chunk ? Errc::out_of_memory : Errc::platform;
        last_ = fmt::format("fail {} at call {}{}", to_string(call), nth,
                            repeat == FaultInjectingDriver::Repeat::once ? "" : " and after");
        faults_->fail(call, nth, repeat, code);
        armed_ = true;
        break;
      }
      case 12: {
        last_ = "clear the faults";
        faults_->clear_all();
        armed_ = false;
        break;
      }
      case 13: {
        const std::uint8_t offset = in_.u8();
        last_ = "deallocate an address that is no live block";
        Address bogus = 0x1000 + offset;
        if (!live_.empty()) bogus = live_.begin()->first + 512 * (1 + offset % 4);
        if (live_.count(bogus) != 0) break;
        Result<void> freed = allocator_->deallocate(bogus);
        if (freed || freed.error().code != Errc::not_found) fail("deallocate of an unknown address is not not_found");
        Result<void> recorded = allocator_->record_stream(bogus, StreamId{1});
        if (recorded || recorded.error().code != Errc::not_found) fail("record_stream of an unknown address is not not_found");
        break;
      }
      case 14: {
        last_ = "check the data";
        for (const auto& [address, live] : live_) check_data(address, live);
        break;
      }
      case 16: begin_pool(); break;
      case 17: end_pool(); break;
      case 18: release_pool(); break;
      case 19: check_graph_pools(); break;
      default: break;
    }
  }

  // Private pools: ids (1, 0..3), each begun with a filter that accepts one stream. The model keeps their
  // uses, the ones active, and every range allocated into each while it lives: no allocation outside a pool
  // may land on one, and a graph pool's ranges stay mapped until it is released.
  struct PoolModel {
    PoolKind kind = PoolKind::graph;
    std::uint32_t uses = 0;
    std::vector<std::pair<Address, Bytes>> extents;
  };
  static PoolId pool_id(std::uint8_t id) { return PoolId{1, id}; }

  void begin_pool() {
    const std::uint8_t choice = in_.u8();
    const StreamId stream = stream_operand();
    if (choice == 255) {
      last_ = "begin pool (0, 0)";
      auto refused = allocator_->begin_allocate_to_pool(PoolId{}, [](StreamId) { return true; });
      if (refused || refused.error().code != Errc::invalid_argument) fail("pool (0, 0) is not refused");
      return;
    }
    const std::uint8_t id = choice % 4;
    const PoolKind kind = (choice & 4) != 0 ? PoolKind::plain : PoolKind::graph;
    last_ = fmt::format("begin {} pool (1, {}) on stream {:#x}", kind == PoolKind::graph ? "graph" : "plain", id,
                        raw(stream));
    auto begun = allocator_->begin_allocate_to_pool(
        pool_id(id), [stream](StreamId asked) { return asked == stream; }, kind);
    auto existing = pools_.find(id);
    if (existing != pools_.end() && existing->second.kind != kind) {
      if (begun || begun.error().code != Errc::invalid_argument) fail("a pool begun with another kind is not refused");
      return;
    }
    if (!begun) fail("begin_allocate_to_pool failed: " + describe(begun.error()));
    PoolModel& pool = pools_[id];
    pool.kind = kind;
    ++pool.uses;
    active_pools_.emplace_back(id, stream);
  }

  void end_pool() {
    const std::uint8_t id = in_.u8() % 4;
    last_ = fmt::format("end pool (1, {})", id);
    auto ended = allocator_->end_allocate_to_pool(pool_id(id));
    auto latest = std::find_if(active_pools_.rbegin(), active_pools_.rend(),
                               [id](const auto& entry) { return entry.first == id; });
    if (latest == active_pools_.rend()) {
      if (ended || ended.error().code != Errc::not_found) fail("ending a pool not begun is not not_found");
      return;
    }
    if (!ended) fail("end_allocate_to_pool failed: " + describe(ended.error()));
    active_pools_.erase(std::next(latest).base());
  }

  void release_pool() {
    const std::uint8_t id = in_.u8() % 4;
    last_ = fmt::format("release pool (1, {})", id);
    auto released = allocator_->release_pool(pool_id(id));
    auto pool = pools_.find(id);
    if (pool == pools_.end()) {
      if (released || released.error().code != Errc::not_found) fail("releasing no pool is not not_found");
      return;
    }
    const bool active = std::any_of(active_pools_.begin(), active_pools_.end(),
                                    [id](const auto& entry) { return entry.first == id; });
    if (pool->second.uses == 1 && active) {
      if (released || released.error().code != Errc::invalid_argument) fail("releasing an active pool is not refused");
      return;
    }
    // Released even when giving its pages back failed (an injected fault): the pool is gone either way.
    if (--pool->second.uses == 0) pools_.erase(pool);
    tolerate("release_pool", std::move(released));
  }

  // Every range a live graph pool was given is still mapped: its graph could replay into it.
  void check_graph_pools() {
    last_ = "check the graph pools' ranges";
    for (const auto& [id, pool] : pools_) {
      if (pool.kind != PoolKind::graph) continue;
      for (const auto& [at, size] : pool.extents) {
        for (Bytes offset = 0; offset < size + granule_; offset += granule_) {  // a byte of every granule, the last
          const Address probe = at + std::min(offset, size - 1);
          std::uint8_t byte = 0;
          if (auto read = faults_->read(probe, &byte, 1); !read) {
            fail(fmt::format("graph pool (1, {}) lost the page at {:#x} of {:#x}+{}: {}", id, probe, at, size,
                             describe(read.error())));
          }
        }
      }
    }
  }

  // The pool an allocation on `stream` goes to (the first active one that accepts it), if any.
  std::optional<std::uint8_t> pool_for(StreamId stream) const {
    for (const auto& [id, accepted] : active_pools_) {
      if (accepted == stream) return id;
    }
    return std::nullopt;
  }

  // A new block in `into` (none: the shared cache) must overlap no range of another live pool.
  void check_pool_isolation(Address at, Bytes size, std::optional<std::uint8_t> into) {
    for (const auto& [id, pool] : pools_) {
      if (into && *into == id) continue;
      for (const auto& [from, length] : pool.extents) {
        if (at < from + length && from < at + size) {
          fail(fmt::format("{:#x}+{} ({}) lands on {:#x}+{} of pool (1, {})", at, size,
                           into ? fmt::format("pool (1, {})", *into) : std::string("the shared cache"), from, length,
                           id));
        }
      }
    }
  }

  std::optional<Address> newest() const {
    if (order_.empty()) return std::nullopt;
    return order_.back();
  }

  // An error tolerated only when a fault is armed: the injected one.
  void tolerate(std::string_view what, Result<void> done) {
    if (done) return;
    ++report_.failed_calls;
    if (!armed_ || done.error().code != Errc::platform) {
      fail(fmt::format("{} failed without an injected fault to answer for it: {}", what, describe(done.error())));
    }
  }

  void allocate(Bytes size, StreamId stream) {
    Result<Address> block = allocator_->allocate(size, stream);
    if (!block) {
      ++report_.refused_allocations;
      const Errc code = block.error().code;
      if (code == Errc::out_of_memory) {
        ++ooms_;
      } else if (size == 0 && code == Errc::invalid_argument) {
        // allocate(0) is refused
      } else if (!(armed_ && code == Errc::platform)) {
        fail(fmt::format("allocate({}) failed: {}", size, describe(block.error())));
      }
      return;
    }
    if (size == 0) fail("allocate(0) succeeded");
    const Address at = *block;
    if (at % 512 != 0) fail(fmt::format("block {:#x} is not 512-byte aligned", at));
    if (size > limit_) fail(fmt::format("a block of {} bytes under a limit of {}", size, limit_));
    if (live_.count(at) != 0) fail(fmt::format("{:#x} handed out twice", at));
    auto next = live_.lower_bound(at);
    if (next != live_.end() && at + size > next->first) {
      fail(fmt::format("{:#x}+{} overlaps the live block {:#x}", at, size, next->first));
    }
    if (next != live_.begin()) {
      const auto& [before, other] = *std::prev(next);
      if (before + other.requested > at) fail(fmt::format("{:#x}+{} overlaps the live block {:#x}", at, size, before));
    }
    if (auto foreign = witness_->foreign_use(at, size, stream)) fail(*foreign);
    const std::optional<std::uint8_t> into = pool_for(stream);
    check_pool_isolation(at, size, into);
    if (into) pools_.at(*into).extents.emplace_back(at, size);
    const std::uint64_t seed = next_seed_++;
    fill(at, size, seed);
    live_.emplace(at, Live{size, stream, seed, {stream}});
    ++report_.allocations;
    order_.push_back(at);
    live_bytes_ += size;
    peak_bytes_ = std::max(peak_bytes_, live_bytes_);
  }

  void deallocate(Address block) {
    const Live& live = live_.at(block);
    check_data(block, live);
    Result<void> done = allocator_->deallocate(block);
    if (!done) {
      if (!armed_ || done.error().code != Errc::platform) fail("deallocate failed: " + describe(done.error()));
      ++report_.failed_calls;
      return;  // the block stays live: the caller may free it again
    }
    ++report_.frees;
    live_bytes_ -= live.requested;
    live_.erase(block);
    order_.erase(std::find(order_.begin(), order_.end(), block));
  }

  void fill(Address at, Bytes size, std::uint64_t seed) {
    const std::size_t words = align_up(size, 8) / 8;
    std::uint64_t* buffer = scratch(words);
    fill_pattern(buffer, words, seed);
    if (auto written = faults_->write(at, buffer, size); !written) {
      fail(fmt::format("the new block {:#x}+{} cannot be written: {}", at, size, describe(written.error())));
    }
  }

  // Every byte of the block (through the driver, which also proves it mapped and accessible); or, when not
  // `whole` and the block is larger than 64 KiB, one 4 KiB window in every 64 KiB: a window on every page
  // (pages are at least a granule, 64 KiB).
  void check_data(Address at, const Live& live, bool whole = true) {
    whole = whole || live.requested <= 64 * KiB;
    const Bytes step = whole ? live.requested : 64 * KiB;
    const Bytes window = whole ? live.requested : 4 * KiB;
    for (Bytes offset = 0; offset < live.requested; offset += step) {
      const Bytes size = std::min(window, live.requested - offset);
      std::uint64_t* buffer = scratch(align_up(size, 8) / 8);
      if (auto read = faults_->read(at + offset, buffer, size); !read) {
        fail(fmt::format("the live block {:#x}+{} cannot be read: {}", at, live.requested, describe(read.error())));
      }
      if (const std::size_t differs = pattern_mismatch(buffer, size, live.seed, offset / 8); differs != size) {
        fail(fmt::format("the live block {:#x}+{} (block {}) changed at byte {}", at, live.requested, live.seed,
                         offset + differs));
      }
    }
  }

  void verify(bool whole_snapshot, bool data) {
    if (auto broken = allocator_->check()) fail("check(): " + *broken);
    const DriverCensus census = faults_->census();
    const TesseraStats stats = allocator_->tessera_stats();
    const AllocatorStats& common = stats.common;
    if (census.page_bytes != common.reserved_bytes) {
      fail(fmt::format("the driver holds {} bytes of pages, the statistics say {} reserved", census.page_bytes,
                       common.reserved_bytes));
    }
    if (census.pages != common.num_device_alloc - common.num_device_free) {
      fail(fmt::format("the driver holds {} pages, the statistics {} created and {} released", census.pages,
                       common.num_device_alloc, common.num_device_free));
    }
    if (census.mapped_bytes != stats.mapped_bytes + stats.sliver_mapped_bytes) {
      fail(fmt::format("the driver maps {} bytes, the statistics say {} (+ {} of slivers mapped twice)",
                       census.mapped_bytes, stats.mapped_bytes, stats.sliver_mapped_bytes));
    }
    if (census.page_bytes - (census.mapped_bytes - stats.sliver_mapped_bytes) != stats.pooled_bytes) {
      fail("pooled bytes disagree with the driver");
    }
    if (common.reserved_bytes > capacity_) fail("more reserved than the device has");
    if (common.requested_bytes != live_bytes_) {
      fail(fmt::format("{} requested bytes live, the statistics say {}", live_bytes_, common.requested_bytes));
    }
    if (common.peak_requested_bytes != peak_bytes_) {
      fail(fmt::format("peak requested {}, the statistics say {}", peak_bytes_, common.peak_requested_bytes));
    }
    if (common.allocated_bytes < common.requested_bytes) fail("fewer bytes allocated than requested");
    if (common.num_ooms != ooms_) fail(fmt::format("{} out-of-memory answers, the statistics say {}", ooms_, common.num_ooms));
    if (!witness_->violations().empty()) fail(witness_->violations().front());
    if (whole_snapshot) verify_snapshot(stats);
    if (data) {
      for (const auto& [address, live] : live_) check_data(address, live, /*whole=*/false);
    }
  }

  // The snapshot shows every live block, allocated, with what was asked, mapped whole, and nothing else
  // allocated.
  void verify_snapshot(const TesseraStats& stats) {
    const AllocatorSnapshot snapshot = allocator_->snapshot();
    std::vector<const SnapshotBlock*> allocated;
    std::vector<Address> lent_to;  // a lent sliver is shown allocated, for the shared block that holds it
    std::set<Address> in_use;
    Bytes segments_mapped = 0;
    for (const SnapshotSegment& segment : snapshot.segments) {
      segments_mapped += segment.mapped_size;
      for (const SnapshotBlock& block : segment.blocks) {
        if (block.lent_to != 0) {
          lent_to.push_back(block.lent_to);
          continue;
        }
        if (block.state != SnapshotBlock::State::inactive) in_use.insert(block.address);
        if (block.state == SnapshotBlock::State::active_allocated) allocated.push_back(&block);
      }
    }
    for (Address holder : lent_to) {
      if (!in_use.contains(holder)) fail(fmt::format("a sliver is lent to {:#x}, which is not in use", holder));
    }
    if (snapshot.pooled_bytes != stats.pooled_bytes) fail("the snapshot's pooled bytes disagree");
    if (segments_mapped != stats.mapped_bytes) fail("the snapshot's mapped bytes disagree");
    if (allocated.size() != live_.size()) {
      fail(fmt::format("the snapshot shows {} allocated blocks, {} are live", allocated.size(), live_.size()));
    }
    std::sort(allocated.begin(), allocated.end(),
              [](const SnapshotBlock* a, const SnapshotBlock* b) { return a->address < b->address; });
    auto shown = allocated.begin();
    for (const auto& [address, live] : live_) {  // both in address order
      const SnapshotBlock& block = **shown++;
      if (block.address != address) fail(fmt::format("the live block {:#x} is not in the snapshot", address));
      if (block.requested != live.requested || block.mapped_bytes != block.size || block.size < live.requested) {
        fail(fmt::format("the snapshot shows the live block {:#x} wrongly", address));
      }
    }
  }

  // Faults off, streams done, everything freed, the cache emptied: nothing may stay held.
  void drain() {
    ++steps_;
    last_ = "the drain at the end";
    faults_->clear_all();
    armed_ = false;
    for (const DriverCall call : fault_calls) report_.injected_faults += faults_->injected(call);
    for (const std::uint64_t stream : held_) faults_->stream_control()->complete(StreamId{static_cast<std::uintptr_t>(stream)});
    held_.clear();
    while (!active_pools_.empty()) {
      if (auto done = allocator_->end_allocate_to_pool(pool_id(active_pools_.back().first)); !done) {
        fail("end_allocate_to_pool: " + describe(done.error()));
      }
      active_pools_.pop_back();
    }
    for (auto& [id, pool] : pools_) {
      for (; pool.uses > 0; --pool.uses) {
        if (auto done = allocator_->release_pool(pool_id(id)); !done) fail("release_pool: " + describe(done.error()));
      }
    }
    pools_.clear();
    while (!order_.empty()) deallocate(order_.back());
    if (auto done = allocator_->set_memory_fraction(1.0); !done) fail("set_memory_fraction(1): " + describe(done.error()));
    limit_ = capacity_ / granule_ * granule_;
    if (auto done = allocator_->empty_cache(); !done) fail("empty_cache: " + describe(done.error()));
    verify(true, true);
    const DriverCensus census = faults_->census();
    if (census.pages != 0 || allocator_->stats().reserved_bytes != 0) {
      fail(fmt::format("{} pages ({} bytes reserved) held after freeing everything and empty_cache", census.pages,
                       allocator_->stats().reserved_bytes));
    }
    // The whole capacity is one block again, on a stream never used.
    const StreamId fresh{77};
    Result<Address> whole = allocator_->allocate(limit_, fresh);
    if (!whole) fail("the whole capacity cannot be allocated after the drain: " + describe(whole.error()));
    if (auto done = allocator_->deallocate(*whole); !done) fail("deallocate: " + describe(done.error()));
    if (auto done = allocator_->empty_cache(); !done) fail("empty_cache: " + describe(done.error()));
    if (auto broken = allocator_->check()) fail("check(): " + *broken);
    if (faults_->census().events != 0) fail(fmt::format("{} events held after the drain", faults_->census().events));
    allocator_.reset();
    const DriverCensus left = faults_->census();
    if (left != DriverCensus{}) {
      fail(fmt::format("the destroyed allocator left {} reservations, {} pages, {} mappings, {} events in the driver",
                       left.reservations, left.pages, left.mappings, left.events));
    }
  }

  ByteReader in_;
  std::unique_ptr<FaultInjectingDriver> faults_;  // owns the witness, which owns the host driver
  Witness* witness_ = nullptr;
  std::unique_ptr<TesseraAllocator> allocator_;
  AllocatorConfig config_;
  Bytes granule_ = 0;
  Bytes capacity_ = 0;
  Bytes limit_ = 0;
  std::map<Address, Live> live_;
  std::vector<Address> order_;  // live blocks, oldest first
  std::set<std::uint64_t> held_;  // streams held
  std::map<std::uint8_t, PoolModel> pools_;  // the pools not released, by id
  std::vector<std::pair<std::uint8_t, StreamId>> active_pools_;  // begun and not ended, in order
  Bytes live_bytes_ = 0;
  Bytes peak_bytes_ = 0;
  std::uint64_t ooms_ = 0;
  std::uint64_t next_seed_ = 0;
  bool armed_ = false;
  std::size_t steps_ = 0;
  std::string last_ = "set-up";
  OpsReport report_;
};

}  // namespace

OpsReport replay_allocator_ops(const std::uint8_t* data, std::size_t size) { return OpsRun(data, size).run(); }

int run_allocator_ops(const std::uint8_t* data, std::size_t size) {
  (void)replay_allocator_ops(data, size);
  return 0;
}

std::string encode_allocator_ops(const Trace& trace, std::uint8_t variant, std::size_t max_bytes) {
  std::string out;
  const auto put = [&out](std::uint64_t value, int bytes) {
    for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>(value >> (8 * i) & 0xff));
  };
  // The header: the variant's device and configuration (decoded in OpsRun::set_up); small_max 64 KiB.
  const std::uint8_t device = variant;
  put(device, 1);
  put(1, 1);
  const Bytes capacity = (device & 2) != 0 ? 64 * MiB : 8 * MiB;
  // Scale the sizes so that the trace's peak fits in three quarters of the device.
  const Bytes peak = std::max<Bytes>(summarize(trace).peak_live_bytes, 1);
  Bytes scale = 1;
  while (peak / scale > capacity / 4 * 3) scale *= 2;
  const auto encode_size = [&](std::uint64_t size) {
    const Bytes scaled = std::max<Bytes>(size / scale, 1);
    if (scaled <= 8 * KiB) {
      put(0, 1);
      put(scaled - 1, 2);
    } else if (scaled <= 1 * MiB) {
      put(128 | ((scaled - 1) & 15), 1);
      put((scaled - 1) >> 4, 2);
    } else {
      put(208, 1);
      put((scaled - 1) / 8, 3);
    }
  };
  std::vector<BlockId> live;  // in allocation order, as the decoder keeps them
  for (const InitialBlock& block : trace.initial_blocks) {
    if (out.size() + 5 > max_bytes) return out;
    put(0, 1);
    encode_size(block.size);
    put(block.stream % stream_values.size(), 1);
    live.push_back(block.id);
  }
  for (const TraceEvent& event : trace.events) {
    if (out.size() + 5 > max_bytes) break;
    if (event.kind == TraceEventKind::alloc) {
      put(0, 1);
      encode_size(event.size);
      put(event.stream % stream_values.size(), 1);
      live.push_back(event.block);
    } else if (event.kind == TraceEventKind::free) {
      const auto found = std::find(live.begin(), live.end(), event.block);
      if (found == live.end() || found - live.begin() >= 256) continue;
      if (live.size() > 256) continue;  // the decoder picks modulo the live count: only exact when it is small
      put(3, 1);
      put(static_cast<std::uint64_t>(found - live.begin()), 1);
      live.erase(found);
    } else {
      put(8, 1);  // an iteration: empty_cache, as a framework may call between steps
    }
  }
  return out;
}

int run_export_handle(const std::uint8_t* data, std::size_t size) {
  constexpr std::string_view target = "export_handle";
  if (size == 0) return 0;
  // Eight memfds of 4 MiB stand for the chunks' descriptors; an importer over a host driver that shares.
  static const std::vector<int> memfds = [] {
    std::vector<int> made;
    for (int i = 0; i < 8; ++i) {
      const int memfd = memfd_create("fuzz-export-handle", MFD_CLOEXEC);
      if (memfd < 0 || ftruncate(memfd, static_cast<off_t>(4 * MiB)) != 0) throw Failure("export_handle: no memfd");
      made.push_back(memfd);
    }
    return made;
  }();
  static std::unique_ptr<Driver> driver = [] {
    auto made = make_host_driver({.capacity = 64 * MiB, .granularity = 2 * MiB, .shareable_chunks = true});
    if (!made) throw Failure("export_handle: no host driver: " + made.error().message);
    return std::move(made).value();
  }();
  // The liveness descriptors: a live exporter's, a gone one's (stale), and a memfd that is none.
  static ExportLiveness live_exporter;
  static const int live = live_exporter.hand_out().value();
  static const int gone = [] {
    ExportLiveness exporter;
    return exporter.hand_out().value();
  }();
  std::vector<int> descriptors(memfds.begin(), memfds.begin() + (data[0] & 0x0f) % (memfds.size() + 1));
  const bool stale = (data[0] & 0x80) != 0;
  const bool no_liveness = !stale && (data[0] & 0x40) != 0;
  descriptors.push_back(stale ? gone : no_liveness ? memfds[0] : live);
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data + 1), size - 1);
  Result<ExportedBlock> block = core::decode_export(bytes, descriptors);
  if (!block) {
    if (block.error().code != Errc::invalid_argument) fail(target, "a decoding error that is not invalid_argument");
    if (!block.error().message.starts_with("tessera: an export handle")) {
      fail(target, fmt::format("the error does not name the handle: {}", block.error().message));
    }
    return 0;
  }
  const std::vector<std::byte> again = core::encode_export(*block);
  if (!std::equal(again.begin(), again.end(), bytes.begin(), bytes.end())) fail(target, "the handle encodes back differently");
  if (block->pieces.size() > 64) return 0;  // mapping a million pieces proves nothing more
  auto allocator = make_tessera_allocator(*driver);
  if (!allocator) fail(target, "no allocator: " + allocator.error().message);
  Result<Address> imported = (*allocator)->import_block(*block);
  // The liveness is checked last: a handle that passes every other check names it.
  if (imported && (stale || no_liveness)) fail(target, "a handle without a live exporter was imported");
  if (!imported) {
    if (imported.error().code != Errc::invalid_argument && imported.error().code != Errc::out_of_memory) {
      fail(target, fmt::format("an import refused with {}: {}", describe(imported.error()), imported.error().message));
    }
    // A handle that a live exporter's liveness makes importable was refused for its liveness alone: the
    // refusal must say so.
    if (stale || no_liveness) {
      ExportedBlock with_live = *block;
      with_live.liveness = live;
      if (Result<Address> with_live_import = (*allocator)->import_block(with_live)) {
        if (auto closed = (*allocator)->close_import(*with_live_import); !closed) fail(target, "close_import: " + closed.error().message);
        const std::string_view words = stale ? "is stale" : "bad liveness descriptor";
        if (imported.error().message.find(words) == std::string::npos) {
          fail(target, fmt::format("a refusal for the liveness alone does not say '{}': {}", words, imported.error().message));
        }
      }
    }
    if (driver->census() != DriverCensus{}) fail(target, "a refused import kept something in the driver");
    return 0;
  }
  if (auto closed = (*allocator)->close_import(*imported); !closed) fail(target, "close_import: " + closed.error().message);
  allocator->reset();
  if (driver->census() != DriverCensus{}) fail(target, "an import closed left something in the driver");
  return 0;
}

std::span<const Target> targets() {
  static constexpr std::array<Target, 10> all = {{
      {"pytorch_snapshot", run_pytorch_snapshot},
      {"kineto_json", run_kineto_json},
      {"operator_memory_csv", run_operator_memory_csv},
      {"memory_record_csv", run_memory_record_csv},
      {"lifetimes_csv", run_lifetimes_csv},
      {"stalloc_trace", run_stalloc_trace},
      {"text_trace", run_text_trace},
      {"allocator_config", run_allocator_config},
      {"allocator_ops", run_allocator_ops},
      {"export_handle", run_export_handle},
  }};
  return all;
}

}  // namespace tessera::fuzz
