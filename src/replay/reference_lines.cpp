// The reference lines a replay report compares allocators against, computed from the trace alone: no
// allocator, no driver.
#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <limits>
#include <optional>
#include <string>

#include "tessera/replay.hpp"

namespace tessera {

namespace {

// Calls `sample(event, live)` where the replay samples: once after the initial blocks (event 0), then after
// every event.
template <class Sample>
void walk_live_bytes(const Trace& trace, Sample&& sample) {
  Bytes live = 0;
  for (const InitialBlock& block : trace.initial_blocks) live += block.size;
  sample(std::size_t{0}, live);
  for (std::size_t index = 0; index < trace.events.size(); ++index) {
    const TraceEvent& event = trace.events[index];
    if (event.kind == TraceEventKind::alloc) live += event.size;
    if (event.kind == TraceEventKind::free) live -= event.size;
    sample(index, live);
  }
}

// Where the live bytes first pass 2^64 ("event 7", "initial block 2"); none when they never do. Such a trace
// has no figures: its sums would wrap.
std::optional<std::string> live_bytes_overflow(const Trace& trace) {
  constexpr Bytes most = std::numeric_limits<Bytes>::max();
  Bytes live = 0;
  for (const InitialBlock& block : trace.initial_blocks) {
    if (live > most - block.size) return fmt::format("initial block {}", block.id);
    live += block.size;
  }
  for (std::size_t index = 0; index < trace.events.size(); ++index) {
    const TraceEvent& event = trace.events[index];
    if (event.kind == TraceEventKind::alloc) {
      if (live > most - event.size) return fmt::format("event {} (alloc of {} bytes)", index, event.size);
      live += event.size;
    }
    if (event.kind == TraceEventKind::free) live -= event.size;
  }
  return std::nullopt;
}

ReplayResult reference_line(const Trace& trace, Bytes granularity, std::string allocator) {
  ReplayResult result;
  result.trace = trace.name;
  result.allocator = std::move(allocator);
  result.driver = "none";
  if (auto overflow = live_bytes_overflow(trace)) {
    result.failure = fmt::format("{}: the live bytes pass 2^64", *overflow);
    return result;
  }
  const TraceSummary summary = summarize(trace);
  result.peak_allocated = summary.peak_live_bytes;
  result.peak_reserved = summary.peak_live_bytes;
  result.reserved_at_peak_allocated = summary.peak_live_bytes;
  // No capacity below 2^64 holds a peak within a granule of it.
  if (summary.peak_live_bytes <= std::numeric_limits<Bytes>::max() - (granularity - 1)) {
    result.min_capacity = align_up(summary.peak_live_bytes, granularity);
  }
  if (summary.peak_live_bytes > 0 && result.min_capacity) {
    result.overhead = static_cast<double>(*result.min_capacity) / static_cast<double>(summary.peak_live_bytes) - 1.0;
  }
  result.events = trace.events.size();
  return result;
}

}  // namespace

double avg_frag_floor(const Trace& trace, std::size_t idle_events) {
  // The samples of the window, as a deque whose live bytes fall from front to back: its front is the most
  // live bytes within the window.
  struct Sample {
    std::size_t index;
    Bytes live;
  };
  std::deque<Sample> window;
  Bytes highest = 0;  // idle_events == 0: the most live bytes so far
  std::size_t index = 0;
  double sum = 0;
  std::size_t samples = 0;
  walk_live_bytes(trace, [&](std::size_t, Bytes live) {
    Bytes held = 0;
    if (idle_events == 0) {
      highest = std::max(highest, live);
      held = highest;
    } else {
      while (!window.empty() && window.back().live <= live) window.pop_back();
      window.push_back({index, live});
      while (window.front().index + idle_events < index) window.pop_front();
      held = window.front().live;
    }
    ++index;
    if (held == 0) return;
    sum += static_cast<double>(held - live) / static_cast<double>(held);
    ++samples;
  });
  return samples == 0 ? 0.0 : sum / static_cast<double>(samples);
}

ReplayResult ideal_result(const Trace& trace, Bytes granularity) { return reference_line(trace, granularity, "ideal"); }

ReplayResult ideal_cache_result(const Trace& trace, Bytes granularity, std::size_t series_points) {
  ReplayResult result = reference_line(trace, granularity, "ideal_cache");
  if (!result.failure.empty()) return result;
  result.avg_frag = avg_frag_floor(trace);
  if (series_points > 0) {
    // The replay's stride, so that the chart's lines share their x values.
    const std::size_t stride = std::max<std::size_t>(1, trace.events.size() / series_points);
    Bytes highest = 0;
    walk_live_bytes(trace, [&](std::size_t event, Bytes live) {
      highest = std::max(highest, live);
      if (event % stride == 0 || event + 1 == trace.events.size()) result.series.push_back({event, live, highest});
    });
  }
  return result;
}

std::optional<ReplayResult> reference_result(std::string_view name, const Trace& trace, Bytes granularity,
                                             std::size_t series_points) {
  if (name == "ideal") return ideal_result(trace, granularity);
  if (name == "ideal_cache") return ideal_cache_result(trace, granularity, series_points);
  return std::nullopt;
}

bool is_reference_line(std::string_view name) { return name == "ideal" || name == "ideal_cache"; }

}  // namespace tessera
