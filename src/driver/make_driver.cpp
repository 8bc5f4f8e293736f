#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tessera/drivers.hpp"

namespace tessera {

std::vector<std::string_view> driver_names() { return {"host", "sim", "cuda", "ascend"}; }

Result<std::unique_ptr<Driver>> make_driver(std::string_view name) {
  if (name == "host") return make_host_driver();
  if (name == "sim") {
    auto sim = make_sim_driver();
    if (!sim) return std::move(sim).error();
    return std::move(sim->driver);
  }
  if (name == "cuda") return make_cuda_driver();
  if (name == "ascend") return make_ascend_driver();
  return make_error(Errc::invalid_argument,
                    fmt::format("unknown driver '{}': expected one of {}", name, fmt::join(driver_names(), ", ")));
}

}  // namespace tessera
