// PyTorch's CUDA graph pool hooks, for CUDAPluggableAllocator (PyTorch 2.3 and later) and torch_npu's
// NPUPluggableAllocator where it takes them:
//   allocator._allocator.set_begin_allocate_to_pool(address of tessera_begin_allocate_to_pool)
//   allocator._allocator.set_end_allocate_to_pool_fn(address of tessera_end_allocate_to_pool)
//   allocator._allocator.set_release_pool(address of tessera_release_pool)
// PyTorch casts each address to a C++ function type and calls it when a graph capture begins, is about to end,
// and when the graph is destroyed: void(int device, MempoolId_t, std::function<bool(cudaStream_t)>) and
// void(int device, MempoolId_t). These functions have exactly those types (MempoolId_t is
// std::pair<unsigned long long, unsigned long long>, cudaStream_t is CUstream_st*, aclrtStream is void*), and
// C names so that ctypes finds them. The filter is called under the allocator's lock, for each allocation on
// the device while the pool is begun, with the allocation's stream; it must not call the allocator.
// The pools are graph pools (tessera_c.h, "Private pools"). A failure throws std::runtime_error with the
// message, which PyTorch turns into a Python RuntimeError; the code and message are recorded as well.
// tessera.torch.enable installs them; C++ only (the parameter types are C++).
#pragma once

#include <functional>
#include <utility>

#include "tessera/tessera_c.h"

struct CUstream_st;

namespace tessera::torch_hooks {
using MempoolId = std::pair<unsigned long long, unsigned long long>;
using CudaStreamFilter = std::function<bool(CUstream_st*)>;
using NpuStreamFilter = std::function<bool(void*)>;
}  // namespace tessera::torch_hooks

extern "C" {
TESSERA_C_API void tessera_begin_allocate_to_pool(int device, tessera::torch_hooks::MempoolId pool,
                                                  tessera::torch_hooks::CudaStreamFilter filter);
TESSERA_C_API void tessera_end_allocate_to_pool(int device, tessera::torch_hooks::MempoolId pool);
TESSERA_C_API void tessera_release_pool(int device, tessera::torch_hooks::MempoolId pool);
TESSERA_C_API void tessera_npu_begin_allocate_to_pool(int device, tessera::torch_hooks::MempoolId pool,
                                                      tessera::torch_hooks::NpuStreamFilter filter);
TESSERA_C_API void tessera_npu_end_allocate_to_pool(int device, tessera::torch_hooks::MempoolId pool);
TESSERA_C_API void tessera_npu_release_pool(int device, tessera::torch_hooks::MempoolId pool);
}
