// `tessera info TRACE...`: what a trace holds, from summarize().
#include <fmt/format.h>

#include <memory>

#include "command.hpp"
#include "tessera/replay.hpp"
#include "tessera/report.hpp"
#include "trace_input.hpp"
#include "usage_error.hpp"

namespace tessera::cli {

namespace {

struct InfoOptions {
  std::vector<std::string> traces;
  TraceInputOptions input;
};

void print_info(const std::string& path, const ProfileRecording& recording) {
  const Trace& trace = recording.trace;
  const TraceSummary summary = summarize(trace);
  fmt::print("file            {}\n", path);
  fmt::print("trace           {}\n", trace.name);
  fmt::print("device          {}\n", trace.device.empty() ? "unknown" : trace.device);
  fmt::print("events          {}\n", trace.events.size());
  fmt::print("allocs          {}\n", summary.allocs);
  fmt::print("frees           {}\n", summary.frees);
  fmt::print("iterations      {}\n", summary.iterations);
  fmt::print("initial blocks  {} ({} bytes)\n", summary.initial_blocks, summary.initial_bytes);
  if (summary.live_past_2_64 != TraceSummary::npos) {
    // No device holds that much; the sum would wrap.
    fmt::print("peak live       more than 2^64 bytes, from event {}\n", summary.live_past_2_64);
  } else {
    fmt::print("peak live       {} bytes ({}), {}\n", summary.peak_live_bytes, format_bytes(summary.peak_live_bytes),
               summary.peak_event == TraceSummary::npos ? std::string("before the first event")
                                                        : fmt::format("after event {}", summary.peak_event));
    // Traces that pause tags: what must be resident when a paused tag costs nothing.
    if (summary.pauses > 0) {
      fmt::print("peak resident   {} bytes ({}), {} ({} tags, {} pauses, {} resumes)\n", summary.peak_resident_bytes,
                 format_bytes(summary.peak_resident_bytes),
                 summary.peak_resident_event == TraceSummary::npos
                     ? std::string("before the first event")
                     : fmt::format("after event {}", summary.peak_resident_event),
                 trace.tags.size(), summary.pauses, summary.resumes);
    }
    if (summary.pool_begins > 0 || summary.record_streams > 0) {
      fmt::print("private pools   {} ({} begins), {} record_stream events\n", trace.pools.size(), summary.pool_begins,
                 summary.record_streams);
    }
  }
  // The profiled allocator's own figures, where the file carries them: the real line beside the replays.
  const RecordedTotals& recorded = recording.recorded;
  // operator_memory.csv's totals come from memory_record.csv where it lies beside it.
  const std::string from =
      recording.recorded_from.empty() ? "" : fmt::format(" ({})", recording.recorded_from.filename().string());
  if (!recorded.allocated_after.empty()) {
    fmt::print("real allocated  {} bytes ({}) at its peak, as the profile recorded it{}\n", recorded.peak_allocated,
               format_bytes(recorded.peak_allocated), from);
  }
  // A CPU profile records a reserved total of 0 throughout: the CPU allocator keeps no cache.
  if (!recorded.reserved_after.empty() && recorded.peak_reserved > 0) {
    fmt::print("real reserved   {} bytes ({}) at its peak, as the {} recorded it{}\n", recorded.peak_reserved,
               format_bytes(recorded.peak_reserved),
               recording.format == TraceFormat::pytorch_snapshot ? "snapshot" : "profile", from);
  }
  fmt::print("live at end     {} bytes in {} blocks\n", summary.live_bytes_at_end, summary.live_blocks_at_end);
  fmt::print("largest alloc   {} bytes ({})\n", summary.largest_alloc, format_bytes(summary.largest_alloc));
  fmt::print("streams         {}\n", summary.streams);
  // What caching costs on this trace whatever the allocator (docs/replay.md, "avg_frag floors").
  fmt::print("avg_frag floor  {:.1f}% giving no page back, {:.1f}% giving back pages idle over 1000 events, "
             "{:.1f}% over 100\n",
             100.0 * avg_frag_floor(trace), 100.0 * avg_frag_floor(trace, 1000), 100.0 * avg_frag_floor(trace, 100));
  if (summary.first_time_us == no_time) {
    fmt::print("time span       not recorded\n");
  } else {
    fmt::print("time span       {:.3f} s ({} us to {} us)\n",
               static_cast<double>(summary.last_time_us - summary.first_time_us) / 1e6, summary.first_time_us,
               summary.last_time_us);
  }
}

int run_info(const InfoOptions& options) {
  int status = 0;
  for (std::size_t i = 0; i < options.traces.size(); ++i) {
    auto trace = read_input_recording(options.traces[i], options.input);
    if (!trace) {
      fmt::print(stderr, "tessera info: {}\n", trace.error().message);
      status = exit_failure;
      continue;
    }
    if (i > 0) fmt::print("\n");
    print_info(options.traces[i], *trace);
  }
  return status;
}

}  // namespace

Command add_info_command(CLI::App& parent) {
  auto options = std::make_shared<InfoOptions>();
  CLI::App* app = parent.add_subcommand("info", "Summarize traces: events, peak live bytes, streams, time span");
  app->add_option("traces", options->traces, "Trace files")->required();
  add_trace_input_options(*app, options->input);
  return {app, [options] { return run_info(*options); }};
}

}  // namespace tessera::cli
