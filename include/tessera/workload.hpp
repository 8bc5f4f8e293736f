// Workloads: deterministic (seeded) generators of LLM allocation traces whose assumptions are written down
// (docs/workloads.md). Each workload has named parameters with defaults; presets set several at once at
// the real byte sizes of well-known models.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/result.hpp"
#include "tessera/trace.hpp"

namespace tessera {

struct WorkloadParameter {
  std::string key;
  std::string default_value;  // with the workload's default preset
  std::string meaning;        // one line; "(preset)" marks the keys a preset sets
};

struct WorkloadDescription {
  std::string name;     // "training", "moe", "inference", "finetune"
  std::string summary;  // one line
  std::vector<WorkloadParameter> parameters;  // in the order a listing shows them
  std::vector<std::string> presets;  // values of the "preset" parameter, e.g. "gpt3-1.3b", "llama2-7b-tp2"
};

// The workloads, in a fixed order.
const std::vector<WorkloadDescription>& workloads();

// A named scenario: one workload with settings fixed for an experiment, e.g. the seed experiment's
// MindSpeed training on four Ascend 910B cards ("seed-llama2-7b-tp2pp2-selective", docs/workloads.md).
struct WorkloadScenario {
  std::string name;
  std::string workload;  // the workload it runs
  std::string summary;   // one line
  std::map<std::string, std::string> settings;
};

// The scenarios, in a fixed order; find_workload_scenario answers null for an unknown name.
const std::vector<WorkloadScenario>& workload_scenarios();
const WorkloadScenario* find_workload_scenario(std::string_view name);

// Generates a trace of a workload or of a scenario (its settings under the explicit ones; the trace is named
// after the scenario). `settings` maps parameter keys to values (as text, as a command line gives them);
// each value is the explicit setting, else the preset's, else the parameter's default. An unknown
// workload, an unknown key, a bad value or values that do not fit together are an Errc::invalid_argument
// error naming the key. The same settings always give the same trace, on every platform. Training
// workloads mark each step with an iteration event; inference every `mark_every` scheduler steps.
Result<Trace> generate_workload(std::string_view name, const std::map<std::string, std::string>& settings = {});

}  // namespace tessera
