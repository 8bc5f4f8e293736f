// `tessera replay TRACE...`: every trace with every chosen allocator, one comparison table, and the JSON and
// HTML reports when asked.
#include <fmt/format.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "command.hpp"
#include "replay_options.hpp"
#include "report_output.hpp"
#include "tessera/snapshot.hpp"
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

// The replay of the first allocator asked for, as a PyTorch snapshot that memory_viz opens: its addresses
// and, for the tessera allocator, its segments and blocks at the end.
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
  if (auto written = write_pytorch_snapshot(trace, result.addresses, path, write_options); !written) {
    fmt::print(stderr, "tessera replay: --snapshot: {}\n", written.error().message);
    return exit_failure;
  }
  fmt::print("PyTorch snapshot of the {} replay: {}\n", result.allocator, path);
  return exit_success;
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
  for (const std::string& path : options.traces) {
    auto trace = read_input_trace(path, options.input);
    if (!trace) {
      fmt::print(stderr, "tessera replay: {}\n", trace.error().message);
      return exit_failure;
    }
    traces.push_back(std::move(trace).value());
  }
  make_names_unique(traces);
  std::vector<std::pair<std::string, std::string>> sources;
  for (std::size_t i = 0; i < traces.size(); ++i) sources.emplace_back(traces[i].name, options.traces[i]);
  const std::vector<ReplayResult> results = run_replays(traces, plan);
  const int written = write_outputs(results, options.outputs, "tessera replay", fmt::format("Made by: {}", command_line()));
  // A failed replay is reported for its allocator once every result is out; the run then exits 1.
  const int status = report_failures(results, sources, "tessera replay") ? written : exit_failure;
  if (options.snapshot.empty() || written != exit_success) return status;
  for (const ReplayResult& result : results) {
    if (!is_reference_line(result.allocator)) {
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
                  "Trace files (PyTorch snapshot, lifetimes CSV, STAlloc or text; .gz "
                  "too)")
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
