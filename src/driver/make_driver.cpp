// Choosing a driver by name: the one place that maps a name and DriverOptions to a driver's own options.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tessera/drivers.hpp"

namespace tessera {

std::vector<std::string_view> driver_names() { return {"host", "sim", "cuda", "ascend"}; }

Result<std::unique_ptr<Driver>> make_driver(std::string_view name, const DriverOptions& options) {
  if (name == "host") {
    HostDriverOptions host;
    if (options.capacity) host.capacity = *options.capacity;
    if (options.granularity) host.granularity = *options.granularity;
    host.require_set_access = options.require_set_access;
    host.shareable_chunks = options.shareable_chunks;
    return make_host_driver(host);
  }
  if (name == "sim") {
    SimDriverOptions sim_options;
    if (options.capacity) sim_options.capacity = *options.capacity;
    if (options.granularity) sim_options.granularity = *options.granularity;
    auto sim = make_sim_driver(sim_options);
    if (!sim) return std::move(sim).error();
    return std::move(sim->driver);
  }
  if (name == "cuda") {
    CudaDriverOptions cuda{.device = options.device};
    cuda.shareable_chunks = options.shareable_chunks;
    if (!options.library.empty()) cuda.library = options.library;
    return make_cuda_driver(cuda);
  }
  if (name == "ascend") {
    AscendDriverOptions ascend{.device = options.device};
    if (!options.library.empty()) ascend.library = options.library;
    return make_ascend_driver(ascend);
  }
  return make_error(Errc::invalid_argument,
                    fmt::format("unknown driver '{}': expected one of {}", name, fmt::join(driver_names(), ", ")));
}

}  // namespace tessera
