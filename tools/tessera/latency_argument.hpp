// `--latency-model` on the command line: which of the sim driver's latency models a replay charges
// (docs/drivers.md), with an error that names the option and the choices.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "tessera/drivers.hpp"
#include "tessera/replay.hpp"

namespace tessera::cli {

inline constexpr std::string_view latency_model_help =
    "How the sim driver's modelled latencies grow with a chunk's size: per_call (default; each call costs its "
    "2 MiB figure whatever its size) or per_byte (creating and releasing a chunk cost in proportion to its "
    "bytes, the same at 2 MiB); docs/drivers.md";

// The model named by `option`'s value; none given is the default. Throws UsageError naming the option, the
// value and the choices for an unknown name, or for any name on a driver other than sim (whose times are
// measured, not modelled).
LatencyScaling parse_latency_model_argument(std::string_view option, const std::optional<std::string>& text,
                                            std::string_view driver);

// The line the human reports carry: which model charged the driver time ("" on the host driver, whose
// times are measured). The JSON says it in each result's `driver`.
std::string latency_model_note(const ReplayOptions& options);

}  // namespace tessera::cli
