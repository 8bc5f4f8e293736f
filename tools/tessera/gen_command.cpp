// `tessera gen WORKLOAD [--set key=value]... -o FILE`: a synthetic LLM trace from the workload generators,
// written in the text format; WORKLOAD may be a scenario (a workload with fixed settings, such as the seed
// experiment's). `--list` shows the workloads, their parameters and presets, and the scenarios.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <memory>

#include "command.hpp"
#include "tessera/report.hpp"
#include "tessera/workload.hpp"
#include "usage_error.hpp"

namespace tessera::cli {

namespace {

struct GenOptions {
  std::string workload;
  std::vector<std::string> settings;
  std::string output;
  bool list = false;
};

std::map<std::string, std::string> parse_settings(const std::vector<std::string>& settings) {
  std::map<std::string, std::string> parsed;
  for (const std::string& setting : settings) {
    const auto equals = setting.find('=');
    if (equals == 0 || equals == std::string::npos) {
      throw UsageError(fmt::format("--set: '{}' is not key=value", setting));
    }
    const std::string key = setting.substr(0, equals);
    if (!parsed.emplace(key, setting.substr(equals + 1)).second) {
      throw UsageError(fmt::format("--set: '{}' is set twice", key));
    }
  }
  return parsed;
}

void print_workloads() {
  for (const WorkloadDescription& workload : workloads()) {
    fmt::print("{}: {}\n", workload.name, workload.summary);
    if (!workload.presets.empty()) fmt::print("  presets: {}\n", fmt::join(workload.presets, ", "));
    for (const WorkloadParameter& parameter : workload.parameters) {
      fmt::print("  {:<22} {:<12} {}\n", parameter.key, parameter.default_value, parameter.meaning);
    }
    fmt::print("\n");
  }
  fmt::print("scenarios (a workload with fixed settings; --set still overrides them):\n");
  for (const WorkloadScenario& scenario : workload_scenarios()) {
    fmt::print("  {:<34} {}: {}\n", scenario.name, scenario.workload, scenario.summary);
  }
}

int run_gen(const GenOptions& options) {
  const auto settings = parse_settings(options.settings);
  if (!options.list) {
    if (options.workload.empty()) throw UsageError("WORKLOAD: required (see tessera gen --list)");
    if (options.output.empty()) throw UsageError("--output: required");
  }
  if (options.list) {
    print_workloads();
    return 0;
  }
  auto trace = generate_workload(options.workload, settings);
  if (!trace) {
    // An unknown workload or setting is the user's mistake; the message names it.
    const bool usage = trace.error().code == Errc::invalid_argument;
    fmt::print(stderr, "tessera gen: {}\n", trace.error().message);
    return usage ? exit_usage : exit_failure;
  }
  if (auto written = write_text_trace(*trace, options.output); !written) {
    fmt::print(stderr, "tessera gen: {}\n", written.error().message);
    return exit_failure;
  }
  const TraceSummary summary = summarize(*trace);
  fmt::print("{}: {} events ({} allocs, {} frees, {} iterations), peak live {}\n", options.output, trace->events.size(),
             summary.allocs, summary.frees, summary.iterations, format_bytes(summary.peak_live_bytes));
  return 0;
}

}  // namespace

Command add_gen_command(CLI::App& parent) {
  auto options = std::make_shared<GenOptions>();
  CLI::App* app = parent.add_subcommand("gen", "Generate a synthetic LLM workload trace");
  app->add_option("workload", options->workload, "Workload or scenario name (see --list)");
  app->add_option("--set", options->settings, "A parameter, key=value (repeatable); preset=NAME sets several");
  app->add_option("-o,--output", options->output, "Trace file to write (text format; .gz compresses)");
  app->add_flag("--list", options->list, "List the workloads, their parameters and presets");
  return {app, [options] { return run_gen(*options); }};
}

}  // namespace tessera::cli
