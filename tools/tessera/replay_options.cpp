#include "replay_options.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "latency_argument.hpp"
#include "sizes.hpp"
#include "support/sizes.hpp"
#include "tessera/allocator.hpp"
#include "usage_error.hpp"

namespace tessera::cli {

void add_replay_arguments(CLI::App& app, ReplayArguments& arguments) {
  app.add_option("--allocators", arguments.allocators,
                 fmt::format("Comma-separated: {} (default: all)", fmt::join(replay_allocator_names(), ", ")))
      ->delimiter(',');
  app.add_option("--driver", arguments.driver,
                 "Driver to replay on: sim (modelled, any size) or host (real "
                 "memory mappings)")
      ->check(CLI::IsMember({"sim", "host"}))
      ->capture_default_str();
  app.add_option("--platform", arguments.platform,
                 "Whose VMM contract and call latencies the sim driver models: cuda, or ascend (whole-handle "
                 "mapping, no set-access, assumed latencies; docs/drivers.md)")
      ->check(CLI::IsMember({"cuda", "ascend"}))
      ->capture_default_str();
  // Checked after parsing, so that an unknown name's message names the option and the choices.
  app.add_option("--latency-model", arguments.latency_model, std::string(latency_model_help));
  app.add_option("--capacity", arguments.capacity, "Device capacity, e.g. 80GiB (default: unlimited)");
  app.add_option("--granule", arguments.granule,
                 fmt::format("The driver's granule in bytes (or with a unit), a power of two of at least {}",
                             support::format_size(min_replay_granularity)))
      ->capture_default_str();
  std::vector<std::string_view> keys;
  for (const OptionDescription& option : allocator_options()) keys.push_back(option.key);
  app.add_option("--conf", arguments.conf,
                 fmt::format("Tessera's configuration, key:value,... as TESSERA_ALLOC_CONF (default: that variable); "
                             "keys: {} (docs/allocator.md)",
                             fmt::join(keys, ", ")));
  app.add_option("--jobs,-j", arguments.jobs, jobs_help)->capture_default_str();
}

ReplayPlan make_replay_plan(const ReplayArguments& arguments) {
  ReplayPlan plan;
  plan.allocators = resolve_allocators(arguments.allocators, "--allocators");
  plan.options.driver = arguments.driver;
  if (arguments.platform == "ascend") {
    if (arguments.driver != "sim") {
      throw UsageError("--platform: ascend is modelled by the sim driver only (--driver sim)");
    }
    plan.options.sim_platform = SimPlatform::ascend;
  }
  plan.options.sim_latency = parse_latency_model_argument("--latency-model", arguments.latency_model, arguments.driver);
  if (arguments.capacity) plan.options.capacity = parse_size_argument("--capacity", *arguments.capacity);
  plan.options.granularity = parse_granule_argument("--granule", arguments.granule, min_replay_granularity);
  if (plan.options.capacity && *plan.options.capacity < plan.options.granularity) {
    throw UsageError(fmt::format("--capacity: '{}' is less than one granule", *arguments.capacity));
  }
  auto config = arguments.conf ? parse_allocator_config(*arguments.conf) : allocator_config_from_environment();
  if (!config) {
    throw UsageError(fmt::format("{}: {}", arguments.conf ? "--conf" : "TESSERA_ALLOC_CONF", config.error().message));
  }
  plan.options.tessera_config = *config;
  plan.jobs = arguments.jobs;
  return plan;
}

}  // namespace tessera::cli
