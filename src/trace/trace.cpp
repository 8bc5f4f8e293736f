// The trace model's own operations: names, the summary a report starts from, and the consistency check
// every reader's output passes.
#include <fmt/format.h>

#include <algorithm>

#include "tessera/trace.hpp"

namespace tessera {

std::string_view to_string(TraceEventKind kind) noexcept {
  switch (kind) {
    case TraceEventKind::alloc: return "alloc";
    case TraceEventKind::free: return "free";
    case TraceEventKind::iteration: return "iteration";
  }
  return "unknown";
}

std::string_view to_string(TraceFormat format) noexcept {
  switch (format) {
    case TraceFormat::automatic: return "automatic";
    case TraceFormat::pytorch_snapshot: return "pytorch_snapshot";
    case TraceFormat::lifetimes_csv: return "lifetimes_csv";
    case TraceFormat::stalloc: return "stalloc";
    case TraceFormat::text: return "text";
    case TraceFormat::kineto_json: return "kineto_json";
    case TraceFormat::operator_memory_csv: return "operator_memory_csv";
  }
  return "unknown";
}

TraceSummary summarize(const Trace& trace) {
  TraceSummary summary;
  std::vector<bool> stream_used(trace.streams.size(), false);
  auto use_stream = [&](std::uint32_t stream) {
    if (stream < stream_used.size() && !stream_used[stream]) {
      stream_used[stream] = true;
      ++summary.streams;
    }
  };
  Bytes live = 0;
  for (const InitialBlock& block : trace.initial_blocks) {
    live += block.size;
    use_stream(block.stream);
  }
  summary.initial_blocks = trace.initial_blocks.size();
  summary.initial_bytes = live;
  summary.peak_live_bytes = live;
  std::size_t live_blocks = trace.initial_blocks.size();
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    const TraceEvent& event = trace.events[i];
    switch (event.kind) {
      case TraceEventKind::alloc:
        ++summary.allocs;
        ++live_blocks;
        if (__builtin_add_overflow(live, event.size, &live) && summary.live_past_2_64 == TraceSummary::npos) {
          summary.live_past_2_64 = i;
        }
        summary.largest_alloc = std::max<Bytes>(summary.largest_alloc, event.size);
        use_stream(event.stream);
        if (live > summary.peak_live_bytes) {
          summary.peak_live_bytes = live;
          summary.peak_event = i;
        }
        break;
      case TraceEventKind::free:
        ++summary.frees;
        --live_blocks;
        live -= event.size;
        break;
      case TraceEventKind::iteration: ++summary.iterations; break;
    }
    if (event.time_us != no_time) {
      if (summary.first_time_us == no_time) summary.first_time_us = event.time_us;
      summary.last_time_us = event.time_us;
    }
  }
  summary.live_bytes_at_end = live;
  summary.live_blocks_at_end = live_blocks;
  return summary;
}

Result<void> validate(const Trace& trace) {
  enum class State : std::uint8_t { unused, live, freed };
  std::vector<State> state(trace.block_count, State::unused);
  std::vector<std::uint64_t> size(trace.block_count, 0);
  std::vector<std::uint32_t> stream(trace.block_count, 0);
  auto fail = [&trace](std::string what) {
    return make_error(Errc::invalid_argument, fmt::format("trace {}: {}", trace.name, what));
  };
  for (std::size_t i = 0; i < trace.initial_blocks.size(); ++i) {
    const InitialBlock& block = trace.initial_blocks[i];
    if (block.id >= trace.block_count) {
      return fail(fmt::format("initial block {} has id {}, beyond the {} blocks", i, block.id, trace.block_count));
    }
    if (block.stream >= trace.streams.size()) {
      return fail(fmt::format("initial block {} uses stream {}, beyond the {} streams", block.id, block.stream,
                              trace.streams.size()));
    }
    if (state[block.id] != State::unused) return fail(fmt::format("initial block {} is listed twice", block.id));
    // The readers' rule (trace_builder): no allocator can hand out a block of 0 bytes to replay.
    if (block.size == 0) return fail(fmt::format("initial block {} has 0 bytes", block.id));
    state[block.id] = State::live;
    size[block.id] = block.size;
    stream[block.id] = block.stream;
  }
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    const TraceEvent& event = trace.events[i];
    if (event.kind == TraceEventKind::iteration) continue;
    const std::string_view kind = to_string(event.kind);
    if (event.block >= trace.block_count) {
      return fail(fmt::format("event {} ({}) names block {}, beyond the {} blocks", i, kind, event.block,
                              trace.block_count));
    }
    if (event.stream >= trace.streams.size()) {
      return fail(fmt::format("event {} ({}) uses stream {}, beyond the {} streams", i, kind, event.stream,
                              trace.streams.size()));
    }
    State& block = state[event.block];
    if (event.kind == TraceEventKind::alloc) {
      if (block == State::live) return fail(fmt::format("event {} allocates block {}, which is live", i, event.block));
      if (block == State::freed) {
        return fail(fmt::format("event {} allocates block {} again: block ids are not reused", i, event.block));
      }
      if (event.size == 0) return fail(fmt::format("event {} allocates block {} of 0 bytes", i, event.block));
      block = State::live;
      size[event.block] = event.size;
      stream[event.block] = event.stream;
    } else {
      if (block != State::live) return fail(fmt::format("event {} frees block {}, which is not live", i, event.block));
      if (event.size != size[event.block] || event.stream != stream[event.block]) {
        return fail(fmt::format("event {} frees block {} with size {} on stream {}; it has size {} on stream {}", i,
                                event.block, event.size, event.stream, size[event.block], stream[event.block]));
      }
      block = State::freed;
    }
  }
  return {};
}

}  // namespace tessera
