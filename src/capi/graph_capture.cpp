// tessera_refuse_graph_capture and the check it turns on (graph_capture.hpp).
#include "capi/graph_capture.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <string_view>

#include "capi/guard.hpp"
#include "capi/last_error.hpp"

namespace tessera::capi {
namespace graph_capture {
std::atomic<bool> refused{false};
}  // namespace graph_capture

bool may_allocate_on(std::string_view function, Platform platform, std::size_t size, int device, Device& owner,
                     void* stream) noexcept {
  // Safe outside the allocator's lock: the query reads nothing the allocator's driver calls change (driver.hpp).
  auto capturing = owner.driver->stream_is_capturing(StreamId{reinterpret_cast<std::uintptr_t>(stream)});
  if (capturing && !*capturing) return true;
  const bool cuda = platform == Platform::cuda;
  if (!capturing) {
    set_last_error(capturing.error().code,
                   fmt::format("{}({} bytes, device {}): graph capture is refused (tessera_refuse_graph_capture), "
                               "and whether stream {} is capturing a graph cannot be told: {}; nothing was "
                               "allocated",
                               function, size, device, stream, describe(capturing.error())));
    return false;
  }
  set_last_error(Errc::unsupported,
                 fmt::format("{}({} bytes, device {}): stream {} is capturing a {}, and this {} cannot route graph "
                             "memory to a Tessera graph pool (its {} lacks set_begin_allocate_to_pool: {} has it); "
                             "serving it from the shared cache could give memory the graph still uses to other "
                             "tensors. Nothing was allocated: capture graphs with a newer {}, or without Tessera",
                             function, size, device, stream, cuda ? "CUDA graph" : "graph",
                             cuda ? "PyTorch" : "torch_npu",
                             cuda ? "CUDAPluggableAllocator" : "NPUPluggableAllocator",
                             cuda ? "PyTorch 2.3" : "a torch_npu whose NPUPluggableAllocator takes the graph hooks",
                             cuda ? "PyTorch" : "torch_npu"));
  return false;
}

}  // namespace tessera::capi

using namespace tessera::capi;

extern "C" {

int tessera_refuse_graph_capture(int on) {
  return guarded("tessera_refuse_graph_capture", -1, [&] {
    graph_capture::refused.store(on != 0, std::memory_order_relaxed);
    return 0;
  });
}

}  // extern "C"
