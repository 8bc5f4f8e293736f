// Seed corpora for the fuzz targets, from real traces (scripts/fuzz.sh runs it). For each trace given, and
// for growing prefixes of its events (8, 32, 128, ... while the output stays under the size limit), it
// writes the prefix in every format a reader fuzzes: Tessera's text format, a PyTorch snapshot pickle, an
// STAlloc log and a lifetimes CSV; and an operation sequence for allocator_ops.
//
//   fuzz_make_seeds OUT_DIR MAX_BYTES TRACE...      writes OUT_DIR/<target>/<trace>-<events>.<ext>
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "targets.hpp"
#include "tessera/trace.hpp"

namespace {

namespace fs = std::filesystem;
using namespace tessera;

void write(const fs::path& path, const std::string& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// The first `count` events; blocks that no longer appear keep their ids (validate() allows unused ids).
Trace prefix(const Trace& trace, std::size_t count) {
  Trace cut = trace;
  if (cut.events.size() > count) cut.events.resize(count);
  return cut;
}

std::uintptr_t stream_value(const Trace& trace, std::uint32_t index) {
  return index < trace.streams.size() ? static_cast<std::uintptr_t>(trace.streams[index]) : 0;
}

// "1 <ptr> <size> <stream>" / "0 ...", each block at an address of its own, iterations as markers.
std::string stalloc_text(const Trace& trace) {
  std::string out;
  const auto address = [](BlockId id) { return 0x7f0000000000ull + std::uint64_t{id} * 0x100000; };
  for (const TraceEvent& event : trace.events) {
    switch (event.kind) {
      case TraceEventKind::alloc:
        out += fmt::format("1 {:#x} {} {:#x}\n", address(event.block), event.size, stream_value(trace, event.stream));
        break;
      case TraceEventKind::free:
        out += fmt::format("0 {:#x} {} {:#x}\n", address(event.block), event.size, stream_value(trace, event.stream));
        break;
      case TraceEventKind::iteration:
        out += fmt::format("Iteration Index : {}\nmicro-batch : F\n", event.size);
        break;
      default: break;  // STAlloc's lines carry no tags, pools or stream uses
    }
  }
  out += "Iteration Index : end\n";
  return out;
}

// id,lower,upper,size with the event index as the step; blocks live before the trace start at -1, blocks
// never freed end after the last event.
std::string lifetimes_text(const Trace& trace) {
  std::vector<std::int64_t> lower(trace.block_count, 0);
  std::vector<std::int64_t> upper(trace.block_count, -2);
  std::vector<std::uint64_t> size(trace.block_count, 0);
  for (const InitialBlock& block : trace.initial_blocks) {
    lower[block.id] = -1;
    upper[block.id] = static_cast<std::int64_t>(trace.events.size());
    size[block.id] = block.size;
  }
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    const TraceEvent& event = trace.events[i];
    if (event.kind == TraceEventKind::alloc) {
      lower[event.block] = static_cast<std::int64_t>(i);
      upper[event.block] = static_cast<std::int64_t>(trace.events.size());
      size[event.block] = event.size;
    } else if (event.kind == TraceEventKind::free) {
      upper[event.block] = static_cast<std::int64_t>(i);
    }
  }
  std::string out = "id,lower,upper,size\n";
  for (BlockId id = 0; id < trace.block_count; ++id) {
    if (upper[id] <= lower[id]) continue;  // not in the prefix
    out += fmt::format("{},{},{},{}\n", id, lower[id], upper[id], size[id]);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s OUT_DIR MAX_BYTES TRACE...\n", argv[0]);
    return 2;
  }
  const fs::path out = argv[1];
  const std::size_t limit = std::strtoull(argv[2], nullptr, 10);
  int written = 0;
  for (int arg = 3; arg < argc; ++arg) {
    const fs::path path = argv[arg];
    Result<Trace> trace = read_trace(path);
    if (!trace) {
      std::fprintf(stderr, "fuzz_make_seeds: skipping %s: %s\n", path.c_str(), trace.error().message.c_str());
      continue;
    }
    const std::string stem = trace->name.empty() ? path.stem().string() : trace->name;
    bool whole = false;
    for (std::size_t count = 8; !whole; count *= 4) {
      whole = count >= trace->events.size();
      const Trace cut = prefix(*trace, count);
      const std::size_t events = cut.events.size();
      bool any = false;
      const auto keep = [&](std::string_view target, std::string_view extension, const std::string& bytes) {
        if (bytes.size() > limit) return;
        write(out / target / fmt::format("{}-{}{}", stem, events, extension), bytes);
        any = true;
        ++written;
      };
      keep("text_trace", ".trace", format_text_trace(cut));
      if (Result<std::string> pickle = format_pytorch_snapshot(cut)) keep("pytorch_snapshot", ".pickle", *pickle);
      keep("stalloc_trace", ".txt", stalloc_text(cut));
      keep("lifetimes_csv", ".csv", lifetimes_text(cut));
      if (count <= 32) {  // short sequences: each runs in milliseconds; mutation makes them longer
        keep("allocator_ops", ".ops",
             fuzz::encode_allocator_ops(cut, static_cast<std::uint8_t>(std::hash<std::string>{}(stem) + count),
                                        std::min<std::size_t>(limit, 2048)));
      }
      if (!any) break;  // the next prefixes are larger still
    }
  }
  std::printf("fuzz_make_seeds: %d seeds in %s\n", written, out.c_str());
  return 0;
}
