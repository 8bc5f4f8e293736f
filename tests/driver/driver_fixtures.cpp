#include "driver_fixtures.hpp"

namespace tessera::testing {

std::vector<DriverFactory> available_drivers() {
  std::vector<DriverFactory> drivers;
  drivers.push_back({"host", [] { return make_host_driver({.capacity = test_capacity}); }});
  drivers.push_back({"host_cuda_like", [] {
                       return make_host_driver({.capacity = test_capacity, .require_set_access = true});
                     }});
  // Every chunk a memfd of its own, so that another process can import it (capability shareable_chunks).
  drivers.push_back({"host_shareable", [] {
                       return make_host_driver({.capacity = test_capacity, .shareable_chunks = true});
                     }});
  drivers.push_back({"sim", []() -> Result<std::unique_ptr<Driver>> {
                       auto sim = make_sim_driver({.capacity = test_capacity});
                       if (!sim) return std::move(sim).error();
                       return std::move(sim->driver);
                     }});
  // The sim driver following Ascend's contract (whole-handle mapping, no set-access), as the seed's bench runs it.
  drivers.push_back({"sim_ascend", []() -> Result<std::unique_ptr<Driver>> {
                       SimDriverOptions options = SimDriverOptions::ascend_910b();
                       options.capacity = test_capacity;
                       auto sim = make_sim_driver(options);
                       if (!sim) return std::move(sim).error();
                       return std::move(sim->driver);
                     }});
#ifdef TESSERA_FAKE_CUDA_LIBRARY
  // The cuda driver's own code over a fake libcuda that serves the calls from host memory.
  drivers.push_back({"cuda_fake", [] {
                       return make_cuda_driver({.device = 0, .library = TESSERA_FAKE_CUDA_LIBRARY});
                     }});
  // The same with chunks created for sharing (a POSIX file descriptor handle requested).
  drivers.push_back({"cuda_fake_shareable", [] {
                       return make_cuda_driver(
                           {.device = 0, .library = TESSERA_FAKE_CUDA_LIBRARY, .shareable_chunks = true});
                     }});
#endif
#ifdef TESSERA_FAKE_ASCEND_LIBRARY
  // The ascend driver's own code over a stand-in libascendcl that serves the ACL calls from host memory.
  drivers.push_back({"ascend_fake", [] {
                       return make_ascend_driver({.device = 0, .library = TESSERA_FAKE_ASCEND_LIBRARY});
                     }});
#endif
  // The accelerator drivers join only where their platform answers; scripts/gpu-check.sh runs them.
  if (make_cuda_driver()) drivers.push_back({"cuda", [] { return make_cuda_driver(); }});
  if (make_ascend_driver()) drivers.push_back({"ascend", [] { return make_ascend_driver(); }});
  return drivers;
}

}  // namespace tessera::testing
