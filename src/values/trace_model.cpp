// The trace model's own operations: names, the summary a report starts from, and the consistency check
// every reader's output passes.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <string>

#include "tessera/trace_model.hpp"

namespace tessera {

std::string_view to_string(TraceEventKind kind) noexcept {
  switch (kind) {
    case TraceEventKind::alloc: return "alloc";
    case TraceEventKind::free: return "free";
    case TraceEventKind::iteration: return "iteration";
    case TraceEventKind::pause: return "pause";
    case TraceEventKind::resume: return "resume";
    case TraceEventKind::record_stream: return "record_stream";
    case TraceEventKind::begin_pool: return "begin_pool";
    case TraceEventKind::end_pool: return "end_pool";
    case TraceEventKind::release_pool: return "release_pool";
  }
  return "unknown";
}

bool is_trace_tag_name(std::string_view name) noexcept {
  if (name.empty()) return false;
  return std::none_of(name.begin(), name.end(), [](char c) {
    const auto byte = static_cast<unsigned char>(c);
    return byte <= 0x20 || byte == 0x7f;
  });
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
  // Resident bytes: live bytes less those of paused tags. Per tag, its live bytes and whether it is paused;
  // a block's tag is looked up on its free (a free does not carry it).
  const std::size_t tag_count = std::max<std::size_t>(trace.tags.size(), 1);
  std::vector<Bytes> tag_live(tag_count, 0);
  std::vector<bool> tag_paused(tag_count, false);
  std::vector<TraceTag> block_tag(trace.block_count, trace_default_tag);
  tag_live[trace_default_tag] = live;
  Bytes resident = live;
  summary.peak_resident_bytes = resident;
  auto tag_of = [&](TraceTag tag) { return std::min<std::size_t>(tag, tag_count - 1); };
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    const TraceEvent& event = trace.events[i];
    switch (event.kind) {
      case TraceEventKind::alloc:
        if (event.block < block_tag.size()) block_tag[event.block] = event.tag;
        tag_live[tag_of(event.tag)] += event.size;
        resident += event.size;
        if (resident > summary.peak_resident_bytes) {
          summary.peak_resident_bytes = resident;
          summary.peak_resident_event = i;
        }
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
      case TraceEventKind::free: {
        ++summary.frees;
        --live_blocks;
        live -= event.size;
        const std::size_t tag = tag_of(event.block < block_tag.size() ? block_tag[event.block] : trace_default_tag);
        tag_live[tag] -= event.size;
        if (!tag_paused[tag]) resident -= event.size;
        break;
      }
      case TraceEventKind::iteration: ++summary.iterations; break;
      case TraceEventKind::pause:
        ++summary.pauses;
        if (!tag_paused[tag_of(event.tag)]) resident -= tag_live[tag_of(event.tag)];
        tag_paused[tag_of(event.tag)] = true;
        break;
      case TraceEventKind::resume:
        ++summary.resumes;
        if (tag_paused[tag_of(event.tag)]) resident += tag_live[tag_of(event.tag)];
        tag_paused[tag_of(event.tag)] = false;
        if (resident > summary.peak_resident_bytes) {
          summary.peak_resident_bytes = resident;
          summary.peak_resident_event = i;
        }
        break;
      case TraceEventKind::record_stream:
        ++summary.record_streams;
        use_stream(event.stream);
        break;
      case TraceEventKind::begin_pool: ++summary.pool_begins; break;
      case TraceEventKind::end_pool:
      case TraceEventKind::release_pool: break;
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

namespace {

// Stacks are all or nothing: a table that starts with the empty stack, and an index for every event and every
// initial block (a reader of a recording without frames leaves all three empty).
Result<void> validate_stacks(const Trace& trace) {
  auto fail = [](std::string what) { return make_error(Errc::invalid_argument, std::move(what)); };
  if (trace.stacks.empty() && trace.event_stacks.empty() && trace.initial_stacks.empty()) return {};
  if (trace.stacks.empty() || !trace.stacks.front().empty()) return fail("stack 0 must be the empty stack");
  if (trace.event_stacks.size() != trace.events.size()) {
    return fail(fmt::format("{} event stacks for {} events", trace.event_stacks.size(), trace.events.size()));
  }
  if (trace.initial_stacks.size() != trace.initial_blocks.size()) {
    return fail(fmt::format("{} initial block stacks for {} initial blocks", trace.initial_stacks.size(),
                            trace.initial_blocks.size()));
  }
  for (std::size_t i = 0; i < trace.event_stacks.size(); ++i) {
    if (trace.event_stacks[i] >= trace.stacks.size()) {
      return fail(fmt::format("event {} names stack {}; there are {}", i, trace.event_stacks[i], trace.stacks.size()));
    }
  }
  for (std::size_t i = 0; i < trace.initial_stacks.size(); ++i) {
    if (trace.initial_stacks[i] >= trace.stacks.size()) {
      return fail(fmt::format("initial block {} names stack {}; there are {}", trace.initial_blocks[i].id,
                              trace.initial_stacks[i], trace.stacks.size()));
    }
  }
  return {};
}

// The pool table names each id once and never (0, 0), which names no pool. A map, not a scan of the table
// for each entry: a hostile trace may declare millions.
Result<void> validate_pool_table(const Trace& trace) {
  std::map<PoolId, std::size_t> seen;
  for (std::size_t p = 0; p < trace.pools.size(); ++p) {
    const PoolId id = trace.pools[p].id;
    if (id == PoolId{}) return make_error(Errc::invalid_argument, fmt::format("pool {} is (0, 0), which names no pool", p));
    if (const auto [first, inserted] = seen.emplace(id, p); !inserted) {
      return make_error(Errc::invalid_argument, fmt::format("pool ({}, {}) is in the pool table twice ({} and {})",
                                                            id.first, id.second, first->second, p));
    }
  }
  return {};
}

}  // namespace

std::optional<std::string> PoolOrder::apply(TraceEventKind kind, std::uint64_t pool,
                                            const std::vector<TracePool>& table) {
  if (pool >= table.size()) return fmt::format("names pool {}, beyond the {} pools", pool, table.size());
  if (uses_.size() < table.size()) {
    uses_.resize(table.size(), 0);
    active_.resize(table.size(), 0);
  }
  const PoolId id = table[pool].id;
  switch (kind) {
    case TraceEventKind::begin_pool:
      // PyTorch refuses a second capture into a pool that a capture is still allocating to.
      if (active_[pool] > 0) {
        return fmt::format("begins pool ({}, {}), which is being allocated to already", id.first, id.second);
      }
      ++uses_[pool];
      ++active_[pool];
      return {};
    case TraceEventKind::end_pool:
      if (active_[pool] == 0) return fmt::format("ends pool ({}, {}), which is not being allocated to", id.first, id.second);
      --active_[pool];
      return {};
    case TraceEventKind::release_pool:
      if (uses_[pool] == 0) return fmt::format("releases pool ({}, {}), which has no use left", id.first, id.second);
      if (uses_[pool] == 1 && active_[pool] > 0) {
        return fmt::format("releases pool ({}, {}), which is still being allocated to", id.first, id.second);
      }
      --uses_[pool];
      return {};
    default: return fmt::format("{} is not a pool event", to_string(kind));
  }
}

Result<void> validate(const Trace& trace) {
  enum class State : std::uint8_t { unused, live, freed };
  std::vector<State> state(trace.block_count, State::unused);
  std::vector<std::uint64_t> size(trace.block_count, 0);
  std::vector<std::uint32_t> stream(trace.block_count, 0);
  auto fail = [&trace](std::string what) {
    return make_error(Errc::invalid_argument, fmt::format("trace {}: {}", trace.name, what));
  };
  if (trace.tags.empty() || trace.tags.front() != default_tag_name) {
    return fail(fmt::format("the tag table must start with '{}'", default_tag_name));
  }
  for (std::size_t t = 1; t < trace.tags.size(); ++t) {
    if (!is_trace_tag_name(trace.tags[t])) {
      return fail(fmt::format("tag {} '{}' is not one word of printable characters", t, trace.tags[t]));
    }
    if (std::find(trace.tags.begin(), trace.tags.begin() + static_cast<std::ptrdiff_t>(t), trace.tags[t]) !=
        trace.tags.begin() + static_cast<std::ptrdiff_t>(t)) {
      return fail(fmt::format("tag {} '{}' is in the tag table twice", t, trace.tags[t]));
    }
  }
  if (auto stacks = validate_stacks(trace); !stacks) return fail(stacks.error().message);
  if (auto pools = validate_pool_table(trace); !pools) return fail(pools.error().message);
  PoolOrder pools;
  std::vector<bool> paused(trace.tags.size(), false);
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
    if (event.is_pool_event()) {
      if (event.kind == TraceEventKind::begin_pool && event.stream >= trace.streams.size()) {
        return fail(fmt::format("event {} (begin_pool) uses stream {}, beyond the {} streams", i, event.stream,
                                trace.streams.size()));
      }
      if (auto wrong = pools.apply(event.kind, event.size, trace.pools)) return fail(fmt::format("event {} ({}) {}", i, kind, *wrong));
      continue;
    }
    if ((event.kind == TraceEventKind::alloc || event.kind == TraceEventKind::pause ||
         event.kind == TraceEventKind::resume) &&
        event.tag >= trace.tags.size()) {
      return fail(fmt::format("event {} ({}) names tag {}, beyond the {} tags", i, kind, event.tag,
                              trace.tags.size()));
    }
    if (event.kind == TraceEventKind::pause || event.kind == TraceEventKind::resume) {
      const bool pause = event.kind == TraceEventKind::pause;
      if (paused[event.tag] == pause) {
        return fail(fmt::format("event {} {}s tag '{}', which is {}", i, kind, trace.tags[event.tag],
                                pause ? "paused already" : "not paused"));
      }
      paused[event.tag] = pause;
      continue;
    }
    if (event.kind == TraceEventKind::alloc && paused[event.tag]) {
      return fail(fmt::format("event {} allocates block {} under tag '{}', which is paused", i, event.block,
                              trace.tags[event.tag]));
    }
    if (event.block >= trace.block_count) {
      return fail(fmt::format("event {} ({}) names block {}, beyond the {} blocks", i, kind, event.block,
                              trace.block_count));
    }
    if (event.stream >= trace.streams.size()) {
      return fail(fmt::format("event {} ({}) uses stream {}, beyond the {} streams", i, kind, event.stream,
                              trace.streams.size()));
    }
    State& block = state[event.block];
    if (event.kind == TraceEventKind::record_stream) {
      if (block != State::live) {
        return fail(fmt::format("event {} records stream {} on block {}, which is not live", i, event.stream,
                                event.block));
      }
      continue;
    }
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
