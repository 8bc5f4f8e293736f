// The real allocator's line: a profile's recorded totals measured as a replay is, so that the reports put
// it beside the replays of the same trace.
#include <algorithm>

#include "tessera/replay.hpp"

namespace tessera {

std::optional<ReplayResult> recorded_result(const Trace& trace, const RecordedTotals& recorded,
                                            std::size_t series_points) {
  const std::size_t events = trace.events.size();
  if (events == 0 || recorded.reserved_after.size() != events || recorded.peak_reserved == 0) return std::nullopt;
  const bool with_allocated = recorded.allocated_after.size() == events;
  ReplayResult result;
  result.trace = trace.name;
  result.allocator = std::string(recorded_line_name);
  result.driver = "none";
  result.events = events;
  result.peak_reserved = recorded.peak_reserved;
  // Allocated bytes after each event: the recorded ones, else the trace's live bytes.
  Bytes live = 0;
  for (const InitialBlock& block : trace.initial_blocks) live += block.size;
  const std::size_t stride = series_points == 0 ? 0 : std::max<std::size_t>(1, events / series_points);
  double frag_sum = 0;
  std::size_t frag_samples = 0;
  for (std::size_t index = 0; index < events; ++index) {
    const TraceEvent& event = trace.events[index];
    if (event.kind == TraceEventKind::alloc) live += event.size;
    if (event.kind == TraceEventKind::free) live -= event.size;
    const Bytes allocated = with_allocated ? recorded.allocated_after[index] : live;
    const Bytes reserved = recorded.reserved_after[index];
    if (allocated > result.peak_allocated) {
      result.peak_allocated = allocated;
      result.reserved_at_peak_allocated = reserved;
    }
    if (reserved > 0) {
      frag_sum += static_cast<double>(reserved - std::min(reserved, allocated)) / static_cast<double>(reserved);
      ++frag_samples;
    }
    if (stride != 0 && (index % stride == 0 || index + 1 == events)) {
      result.series.push_back({index, allocated, reserved});
    }
  }
  // The recorded peak of Total Allocated may fall before the first event (RecordedTotals' peaks count it).
  if (with_allocated) result.peak_allocated = std::max(result.peak_allocated, recorded.peak_allocated);
  result.frag_at_peak = 1.0 - static_cast<double>(result.peak_allocated) /
                                  static_cast<double>(result.peak_reserved);
  result.avg_frag = frag_samples == 0 ? 0.0 : frag_sum / static_cast<double>(frag_samples);
  return result;
}

}  // namespace tessera
