// `tessera replay TRACE...`: every trace with every chosen allocator, one comparison table, and the JSON and
// HTML reports when asked.
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "command.hpp"
#include "latency_argument.hpp"
#include "replay_options.hpp"
#include "report_output.hpp"
#include "tessera/trace.hpp"
#include "trace_input.hpp"
#include "usage_error.hpp"

namespace tessera::cli {

namespace {

struct ReplayCommandOptions {
  std::vector<std::string> traces;
  ReplayArguments replay;
  TraceInputOptions input;
  bool min_capacity = false;
  ReportOutputs outputs;
  std::string snapshot;  // a PyTorch snapshot of the first allocator's replay
};

// The replay of the first allocator asked for, as a PyTorch snapshot that memory_viz opens: its addresses,
// what it mapped and unmapped as it went and, for the tessera allocator, its segments and blocks at the end.
int write_snapshot(const Trace& trace, const ReplayResult& result, const std::string& path) {
  if (!result.failure.empty()) {
    fmt::print(stderr, "tessera replay: --snapshot: the {} replay failed; no snapshot written\n", result.allocator);
    return exit_failure;
  }
  if (result.oom) {
    fmt::print(stderr, "tessera replay: --snapshot: the {} replay ran out of memory; no snapshot written\n",
               result.allocator);
    return exit_failure;
  }
  SnapshotWriteOptions write_options;
  if (result.final_state) write_options.state = &*result.final_state;
  write_options.segment_changes = &result.segment_changes;  // the reserved bytes as they went
  write_options.starting_changes = result.starting_segment_changes;
  if (auto written = write_pytorch_snapshot(trace, result.addresses, path, write_options); !written) {
    fmt::print(stderr, "tessera replay: --snapshot: {}\n", written.error().message);
    return exit_failure;
  }
  fmt::print("PyTorch snapshot of the {} replay: {}\n", result.allocator, path);
  return exit_success;
}

// The real allocator's line, from a profile that recorded its reserved bytes (Kineto's Total Reserved,
// torch_npu's memory_record.csv or operator_memory.csv). A PyTorch snapshot's segments are the real
// allocator's too, but its reserved bytes before the first event are inferred, not recorded: no line.
std::optional<ReplayResult> real_line(const ProfileRecording& recording, std::size_t series_points) {
  if (recording.format != TraceFormat::kineto_json && recording.format != TraceFormat::operator_memory_csv) {
    return std::nullopt;
  }
  return recorded_result(recording.trace, recording.recorded, series_points);
}

// Each trace's results, its real allocator's line first where it has one.
std::vector<ReplayResult> with_real_lines(std::vector<ReplayResult> results, const std::vector<Trace>& traces,
                                          std::vector<std::optional<ReplayResult>>& recorded) {
  if (std::none_of(recorded.begin(), recorded.end(), [](const auto& line) { return line.has_value(); })) return results;
  const std::size_t per_trace = traces.empty() ? 0 : results.size() / traces.size();
  std::vector<ReplayResult> merged;
  merged.reserve(results.size() + traces.size());
  for (std::size_t t = 0; t < traces.size(); ++t) {
    if (recorded[t]) {
      recorded[t]->trace = traces[t].name;  // as make_names_unique left it
      merged.push_back(std::move(*recorded[t]));
    }
    for (std::size_t r = t * per_trace; r < (t + 1) * per_trace; ++r) merged.push_back(std::move(results[r]));
  }
  return merged;
}

int run_replay_command(const ReplayCommandOptions& options) {
  ReplayPlan plan = make_replay_plan(options.replay);
  plan.min_capacity = options.min_capacity;
  if (!options.outputs.html.empty()) plan.options.series_points = html_series_points;
  if (!options.snapshot.empty()) {
    if (options.traces.size() != 1) throw UsageError("--snapshot: give exactly one trace");
    plan.options.keep_state = true;
  }

  // Every file the run will write must be writable before the first replay, which can take minutes.
  auto writable = check_writable(options.outputs);
  if (writable && !options.snapshot.empty()) writable = check_writable("--snapshot", options.snapshot);
  if (!writable) {
    fmt::print(stderr, "tessera replay: {}\n", writable.error().message);
    return exit_failure;
  }

  std::vector<Trace> traces;
  std::vector<std::optional<ReplayResult>> recorded;  // the real allocator's line of each trace, where a profile has one
  for (const std::string& path : options.traces) {
    auto recording = read_input_recording(path, options.input);
    if (!recording) {
      fmt::print(stderr, "tessera replay: {}\n", recording.error().message);
      return exit_failure;
    }
    recorded.push_back(real_line(*recording, plan.options.series_points));
    traces.push_back(std::move(recording->trace));
  }
  make_names_unique(traces);
  std::vector<std::pair<std::string, std::string>> sources;
  for (std::size_t i = 0; i < traces.size(); ++i) sources.emplace_back(traces[i].name, options.traces[i]);
  const std::vector<ReplayResult> results = with_real_lines(run_replays(traces, plan), traces, recorded);
  const std::string model = latency_model_note(plan.options);
  if (!model.empty()) fmt::print(notes_stream(options.outputs), "{}\n", model);
  const int written = write_outputs(results, options.outputs, "tessera replay",
                                    fmt::format("Made by: {}{}{}", command_line(), model.empty() ? "" : "\n", model));
  // A failed replay is reported for its allocator once every result is out; the run then exits 1.
  const int status = report_failures(results, sources, "tessera replay") ? written : exit_failure;
  if (options.snapshot.empty() || written != exit_success) return status;
  for (const ReplayResult& result : results) {
    if (!is_reference_line(result.allocator) && result.allocator != recorded_line_name) {
      const int snapshot = write_snapshot(traces.front(), result, options.snapshot);
      return status != exit_success ? status : snapshot;
    }
  }
  fmt::print(stderr, "tessera replay: --snapshot: no allocator was replayed\n");
  return exit_failure;
}

}  // namespace

Command add_replay_command(CLI::App& parent) {
  auto options = std::make_shared<ReplayCommandOptions>();
  CLI::App* app = parent.add_subcommand("replay", "Replay traces with allocators and compare them");
  app->add_option("traces", options->traces,
                  "Trace files (PyTorch snapshot, Kineto JSON, operator_memory.csv, lifetimes CSV, STAlloc or text; "
                  ".gz too)")
      ->required();
  add_replay_arguments(*app, options->replay);
  add_trace_input_options(*app, options->input);
  app->add_flag("--min-capacity", options->min_capacity, "Also bisect for min_capacity and overhead (slower)");
  add_report_outputs(*app, options->outputs);
  app->add_option("--snapshot", options->snapshot,
                  "Write the first allocator's replay as a PyTorch snapshot (pickle; .gz compresses) that "
                  "pytorch.org/memory_viz opens");
  return {app, [options] { return run_replay_command(*options); }};
}

}  // namespace tessera::cli
