// `tessera demo` (also `tessera` alone): the README's main job. Replays a representative handful of the
// bundled real traces and a few generated workloads with every allocator;
// prints one comparison table and writes an HTML report. `--stitching` shows the drivers' stitching instead.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "command.hpp"
#include "demo.hpp"
#include "latency_argument.hpp"
#include "replay_runner.hpp"
#include "report_output.hpp"
#include "tessera/workload.hpp"
#include "trace_input.hpp"
#include "usage_error.hpp"

#ifndef TESSERA_SOURCE_DIR
#define TESSERA_SOURCE_DIR "."
#endif

namespace tessera::cli {

namespace {

namespace fs = std::filesystem;

// A spread of what the shared traces hold, chosen so that the demo finishes in well under a minute on two
// cores: recordings from process start (the pytorch model's check traces), one training step and one
// forward pass of large models, inference, a microbenchmark, and a static planner's tensor lifetimes.
constexpr std::array<std::string_view, 7> demo_traces{
    "pytorch/cs336-niu_b10_ctx200_train-from-init__NiuHuangxiaozi.pickle.gz",
    "pytorch/opt-125m_zeroth-order-fedtune_from-start__DeComFL.pickle.gz",
    "pytorch/cs336-medium_b4_ctx1024_train-step__Wedsonlin.pickle.gz",
    "pytorch/cs336-xl_b4_ctx256_fwd_mixed__notHanmin.pickle.gz",
    "pytorch/cs336-medium_b4_ctx512_inference__Wedsonlin.pickle.gz",
    "pytorch/attention-peak-microbench__silmont2000.pickle.gz",
    "lifetimes/somas_bert_large.csv.gz",
};

// Generated workloads, with their default parameters.
constexpr std::array<std::string_view, 3> demo_workloads{"training", "moe", "inference"};

// Generated traces longer than this would push the demo past its minute.
constexpr std::size_t max_generated_events = 200'000;

struct DemoOptions {
  bool stitching = false;
  std::string driver;
  std::string traces_dir;
  bool all = false;
  std::vector<std::string> allocators;
  std::optional<std::string> latency_model;  // the replay demo on the sim driver only
  unsigned jobs = 1;
  ReportOutputs outputs{.json = "", .html = "tessera-demo.html"};
};

fs::path default_traces_dir() { return (fs::path(TESSERA_SOURCE_DIR) / ".." / "shared" / "traces").lexically_normal(); }

bool looks_like_trace(const fs::path& path) {
  const std::string name = path.filename().string();
  return fs::is_regular_file(path) && !name.starts_with(".") && path.extension() != ".md";
}

// The demo's handful where present; every trace with --all, or when none of the handful is there.
std::vector<fs::path> choose_traces(const fs::path& dir, bool all) {
  std::vector<fs::path> chosen;
  if (!all) {
    for (std::string_view name : demo_traces) {
      if (fs::is_regular_file(dir / name)) chosen.push_back(dir / name);
    }
    if (!chosen.empty()) return chosen;
  }
  std::error_code error;
  for (auto it = fs::recursive_directory_iterator(dir, error); !error && it != fs::recursive_directory_iterator();
       it.increment(error)) {
    if (looks_like_trace(it->path())) chosen.push_back(it->path());
  }
  std::sort(chosen.begin(), chosen.end());
  return chosen;
}

int run_replay_demo(const DemoOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  if (!options.driver.empty() && options.driver != "sim" && options.driver != "host") {
    throw UsageError(
        fmt::format("--driver: the replay demo runs on sim or host; '{}' is for --stitching", options.driver));
  }
  // The report files must be writable before the replays, which take a while.
  if (auto writable = check_writable(options.outputs); !writable) {
    fmt::print(stderr, "tessera demo: {}\n", writable.error().message);
    return exit_failure;
  }
  ReplayPlan plan;
  plan.allocators = resolve_allocators(options.allocators, "--allocators");
  plan.options.driver = options.driver.empty() ? "sim" : options.driver;
  plan.options.sim_latency =
      parse_latency_model_argument("--latency-model", options.latency_model, plan.options.driver);
  plan.options.series_points = html_series_points;
  plan.min_capacity = true;
  plan.jobs = options.jobs;

  const fs::path dir = options.traces_dir.empty() ? default_traces_dir() : fs::path(options.traces_dir);
  if (!options.traces_dir.empty() && !fs::is_directory(dir)) {
    throw UsageError(fmt::format("--traces: '{}' is not a directory", options.traces_dir));
  }
  std::vector<Trace> traces;
  std::vector<std::string> paths;  // of the recorded traces, which come first
  std::size_t recorded = 0;
  if (fs::is_directory(dir)) {
    for (const fs::path& path : choose_traces(dir, options.all)) {
      auto trace = read_input_trace(path, {});
      if (!trace) {
        fmt::print(stderr, "tessera demo: {}\n", trace.error().message);
        return exit_failure;
      }
      traces.push_back(std::move(trace).value());
      paths.push_back(path.string());
      ++recorded;
    }
  }
  if (recorded == 0)
    fmt::print(stderr, "tessera demo: no recorded traces in {} (--traces DIR names another folder)\n", dir.string());
  std::size_t generated = 0;
  const auto& known = workloads();
  for (std::string_view name : demo_workloads) {
    if (std::none_of(known.begin(), known.end(), [&](const WorkloadDescription& w) { return w.name == name; }))
      continue;
    auto trace = generate_workload(name);
    if (!trace) {
      fmt::print(stderr, "tessera demo: workload {}: {}\n", name, trace.error().message);
      return exit_failure;
    }
    if (trace->events.size() > max_generated_events) continue;
    trace->name = fmt::format("generated: {}", trace->name.empty() ? std::string(name) : trace->name);
    traces.push_back(std::move(trace).value());
    ++generated;
  }
  if (traces.empty()) {
    fmt::print(stderr, "tessera demo: nothing to replay\n");
    return exit_failure;
  }

  fmt::print(notes_stream(options.outputs),
             "Tessera demo: {} recorded trace{} from {}{} replayed with {} on the {} driver; min capacity by "
             "bisection to the {} MiB granule.\n\n",
             recorded, recorded == 1 ? "" : "s", dir.string(),
             generated == 0 ? std::string()
                            : fmt::format(" and {} generated workload{}", generated, generated == 1 ? "" : "s"),
             fmt::format("{}", fmt::join(plan.allocators, ", ")), plan.options.driver, plan.options.granularity / MiB);
  make_names_unique(traces);
  std::vector<std::pair<std::string, std::string>> sources;
  for (std::size_t i = 0; i < paths.size(); ++i) sources.emplace_back(traces[i].name, paths[i]);
  const std::vector<ReplayResult> results = run_replays(traces, plan);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string model = latency_model_note(plan.options);
  if (!model.empty()) fmt::print(notes_stream(options.outputs), "{}\n", model);
  const int status = write_outputs(results, options.outputs, "tessera demo",
                                   fmt::format("Made by: {}\nTraces from {}.{}{}", command_line(), dir.string(),
                                               model.empty() ? "" : "\n", model));
  fmt::print(notes_stream(options.outputs), "done in {:.1f} s\n", seconds);
  return report_failures(results, sources, "tessera demo") ? status : exit_failure;
}

}  // namespace

Command add_demo_command(CLI::App& parent) {
  auto options = std::make_shared<DemoOptions>();
  CLI::App* app = parent.add_subcommand("demo", "Replay bundled real traces with every allocator (the default)");
  app->add_flag("--stitching", options->stitching, "Show stitching on one driver instead");
  app->add_option("--driver", options->driver,
                  "Replay: sim (default) or host; --stitching: host (default), sim, "
                  "cuda or ascend")
      ->check(CLI::IsMember({"host", "sim", "cuda", "ascend"}));
  app->add_option("--traces", options->traces_dir,
                  fmt::format("Folder of traces (default: {})", default_traces_dir().string()));
  app->add_flag("--all", options->all, "Replay every trace in the folder, not the demo's handful");
  app->add_option("--allocators", options->allocators, "Comma-separated allocators (default: all)")->delimiter(',');
  app->add_option("--latency-model", options->latency_model, std::string(latency_model_help));
  app->add_option("--jobs,-j", options->jobs, jobs_help)->capture_default_str();
  add_report_outputs(*app, options->outputs);
  app->get_option("--html")->capture_default_str();
  return {app, [options] {
            if (options->stitching) return run_stitching_demo(options->driver.empty() ? "host" : options->driver);
            return run_replay_demo(*options);
          }};
}

}  // namespace tessera::cli
