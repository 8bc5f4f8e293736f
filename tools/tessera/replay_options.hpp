// The replay settings `replay` and `demo` share on the command line: allocators, driver, capacity,
// granule, Tessera's configuration, threads. Sizes and the configuration are checked after parsing, so that
// an error names the option.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

#include "replay_runner.hpp"

namespace tessera::cli {

struct ReplayArguments {
  std::vector<std::string> allocators;
  std::string driver = "sim";
  std::string platform = "cuda";  // sim only: cuda or ascend
  std::optional<std::string> latency_model;  // sim only: per_call (none given) or per_byte
  std::optional<std::string> capacity;
  std::string granule = "2MiB";
  std::optional<std::string> conf;
  unsigned jobs = 1;
};

void add_replay_arguments(CLI::App& app, ReplayArguments& arguments);

// The plan the arguments describe; throws UsageError naming the bad option.
ReplayPlan make_replay_plan(const ReplayArguments& arguments);

}  // namespace tessera::cli
