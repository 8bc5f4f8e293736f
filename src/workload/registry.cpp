// The workloads by name: the public entry points of include/tessera/workload.hpp.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tessera/workload.hpp"
#include "workload/workloads.hpp"

namespace tessera {
namespace {

using Generator = Result<Trace> (*)(const workload::Parameters&);

struct Entry {
  WorkloadDescription description;
  Generator generate;
};

const std::vector<Entry>& entries() {
  static const std::vector<Entry> all = {
      {workload::training_description(), workload::generate_training},
      {workload::moe_description(), workload::generate_moe},
      {workload::inference_description(), workload::generate_inference},
      {workload::finetune_description(), workload::generate_finetune},
      {workload::rl_description(), workload::generate_rl},
      {workload::serving_description(), workload::generate_serving},
      {workload::fsdp_description(), workload::generate_fsdp},
  };
  return all;
}

}  // namespace

const std::vector<WorkloadDescription>& workloads() {
  static const std::vector<WorkloadDescription> descriptions = [] {
    std::vector<WorkloadDescription> result;
    for (const Entry& entry : entries()) result.push_back(entry.description);
    return result;
  }();
  return descriptions;
}

Result<Trace> generate_workload(std::string_view name, const std::map<std::string, std::string>& settings) {
  if (const WorkloadScenario* scenario = find_workload_scenario(name)) {
    std::map<std::string, std::string> merged = settings;
    merged.insert(scenario->settings.begin(), scenario->settings.end());  // keeps the explicit ones
    auto trace = generate_workload(scenario->workload, merged);
    if (trace) trace->name = scenario->name;
    return trace;
  }
  for (const Entry& entry : entries()) {
    if (entry.description.name != name) continue;
    auto parameters = workload::Parameters::resolve(entry.description, settings);
    if (!parameters) return std::move(parameters).error();
    return entry.generate(*parameters);
  }
  std::vector<std::string_view> names;
  for (const Entry& entry : entries()) names.emplace_back(entry.description.name);
  std::vector<std::string_view> scenarios;
  for (const WorkloadScenario& scenario : workload_scenarios()) scenarios.emplace_back(scenario.name);
  return make_error(Errc::invalid_argument, fmt::format("unknown workload '{}' (workloads: {}; scenarios: {})", name,
                                                        fmt::join(names, ", "), fmt::join(scenarios, ", ")));
}

}  // namespace tessera
