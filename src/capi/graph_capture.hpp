// The refusal of allocations on a stream that is capturing a graph (tessera_refuse_graph_capture,
// tessera_c.h): where PyTorch cannot give Tessera its graph pool hooks (before 2.3), a captured graph's memory
// would come from the shared cache, and eager tensors could later be given memory the graph replays into.
#pragma once

#include <atomic>
#include <cstddef>
#include <string_view>

#include "capi/registry.hpp"

namespace tessera::capi {
namespace graph_capture {
extern std::atomic<bool> refused;  // tessera_refuse_graph_capture's switch
}  // namespace graph_capture

// Read by every allocation's fast path: relaxed, because the switch orders nothing else and is turned on once,
// before PyTorch allocates (tessera.torch.enable).
inline bool refusing_graph_capture() noexcept { return graph_capture::refused.load(std::memory_order_relaxed); }

// While refusing: whether `stream` may be given memory on `owner`. False when the driver says it is capturing,
// or cannot say; the call's failure is then recorded, naming `function` and its arguments.
bool may_allocate_on(std::string_view function, Platform platform, std::size_t size, int device, Device& owner,
                     void* stream) noexcept;

}  // namespace tessera::capi
