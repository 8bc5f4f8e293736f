#include "latency_argument.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "usage_error.hpp"

namespace tessera::cli {

LatencyScaling parse_latency_model_argument(std::string_view option, const std::optional<std::string>& text,
                                            std::string_view driver) {
  if (!text) return LatencyScaling::per_call;
  const auto scaling = latency_scaling_named(*text);
  if (!scaling) {
    throw UsageError(fmt::format("{}: unknown latency model '{}' (expected {})", option, *text,
                                 fmt::join(latency_scaling_names(), " or ")));
  }
  if (driver != "sim") {
    throw UsageError(fmt::format("{}: a latency model is for the sim driver (--driver sim); the {} driver's "
                                 "times are measured",
                                 option, driver));
  }
  return *scaling;
}

std::string latency_model_note(const ReplayOptions& options) {
  if (options.driver != "sim") return {};
  return fmt::format("Driver time modelled by the sim driver, latency model {} (docs/drivers.md).",
                     to_string(options.sim_latency));
}

}  // namespace tessera::cli
