// Private pools through the C ABI: the C functions for any caller (tessera_c.h, "Private pools"), whose pool
// takes the calling thread's allocations, and PyTorch's CUDA graph hooks with their C++ types
// (tessera_torch_hooks.hpp), whose pool takes the streams PyTorch's filter accepts.
#include <fmt/format.h>

#include <cstdint>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <utility>

#include "capi/guard.hpp"
#include "capi/last_error.hpp"
#include "capi/registry.hpp"
#include "tessera/tessera_torch_hooks.hpp"

namespace tessera::capi {
namespace {

std::string named(std::string_view function, int device, PoolId pool) {
  return fmt::format("{}(device {}, pool ({}, {}))", function, device, pool.first, pool.second);
}

// Runs `operation(allocator)` on the device's allocator (created if need be) and records its failure.
template <class Operation>
int on_pool(std::string_view function, Platform platform, int device, PoolId pool, Operation&& operation) {
  return guarded(function, -1, [&] {
    auto found = device_for(device, platform);
    if (!found) {
      set_last_error(found.error().code, fmt::format("{}: {}", named(function, device, pool), found.error().message));
      return -1;
    }
    if (auto done = operation(*(*found)->allocator); !done) {
      set_last_error(done.error().code, fmt::format("{}: {}", named(function, device, pool), describe(done.error())));
      return -1;
    }
    return 0;
  });
}

// The pool takes the allocations of the thread that began it, on every stream (as torch.cuda.use_mem_pool).
StreamFilter this_thread_only() {
  return [owner = std::this_thread::get_id()](StreamId) { return std::this_thread::get_id() == owner; };
}

template <class Stream, class Filter>
StreamFilter from_pytorch(Filter filter) {
  if (!filter) return {};  // refused as no filter, not called and thrown under the allocator's lock
  return [filter = std::move(filter)](StreamId stream) {
    return filter(reinterpret_cast<Stream>(static_cast<std::uintptr_t>(stream)));
  };
}

void throw_if_failed(int result) {
  if (result != 0) throw std::runtime_error(tessera_last_error());
}

}  // namespace
}  // namespace tessera::capi

using namespace tessera;
using namespace tessera::capi;

extern "C" {

int tessera_pool_begin(int device, uint64_t id_first, uint64_t id_second, int kind) {
  const PoolId pool{id_first, id_second};
  return on_pool("tessera_pool_begin", Platform::cuda, device, pool, [&](TesseraAllocator& allocator) -> Result<void> {
    if (kind != 0 && kind != 1) {
      return make_error(Errc::invalid_argument, fmt::format("kind {} is neither 0 (graph) nor 1 (plain)", kind));
    }
    return allocator.begin_allocate_to_pool(pool, this_thread_only(), kind == 0 ? PoolKind::graph : PoolKind::plain);
  });
}

int tessera_pool_end(int device, uint64_t id_first, uint64_t id_second) {
  const PoolId pool{id_first, id_second};
  return on_pool("tessera_pool_end", Platform::cuda, device, pool,
                 [&](TesseraAllocator& allocator) { return allocator.end_allocate_to_pool(pool); });
}

int tessera_pool_release(int device, uint64_t id_first, uint64_t id_second) {
  const PoolId pool{id_first, id_second};
  return on_pool("tessera_pool_release", Platform::cuda, device, pool,
                 [&](TesseraAllocator& allocator) { return allocator.release_pool(pool); });
}

void tessera_begin_allocate_to_pool(int device, torch_hooks::MempoolId id, torch_hooks::CudaStreamFilter filter) {
  const PoolId pool{id.first, id.second};
  throw_if_failed(on_pool("tessera_begin_allocate_to_pool", Platform::cuda, device, pool, [&](TesseraAllocator& a) {
    return a.begin_allocate_to_pool(pool, from_pytorch<CUstream_st*>(std::move(filter)), PoolKind::graph);
  }));
}

void tessera_end_allocate_to_pool(int device, torch_hooks::MempoolId id) {
  const PoolId pool{id.first, id.second};
  throw_if_failed(on_pool("tessera_end_allocate_to_pool", Platform::cuda, device, pool,
                          [&](TesseraAllocator& a) { return a.end_allocate_to_pool(pool); }));
}

void tessera_release_pool(int device, torch_hooks::MempoolId id) {
  const PoolId pool{id.first, id.second};
  throw_if_failed(on_pool("tessera_release_pool", Platform::cuda, device, pool,
                          [&](TesseraAllocator& a) { return a.release_pool(pool); }));
}

void tessera_npu_begin_allocate_to_pool(int device, torch_hooks::MempoolId id, torch_hooks::NpuStreamFilter filter) {
  const PoolId pool{id.first, id.second};
  throw_if_failed(on_pool("tessera_npu_begin_allocate_to_pool", Platform::ascend, device, pool,
                          [&](TesseraAllocator& a) {
                            return a.begin_allocate_to_pool(pool, from_pytorch<void*>(std::move(filter)),
                                                            PoolKind::graph);
                          }));
}

void tessera_npu_end_allocate_to_pool(int device, torch_hooks::MempoolId id) {
  const PoolId pool{id.first, id.second};
  throw_if_failed(on_pool("tessera_npu_end_allocate_to_pool", Platform::ascend, device, pool,
                          [&](TesseraAllocator& a) { return a.end_allocate_to_pool(pool); }));
}

void tessera_npu_release_pool(int device, torch_hooks::MempoolId id) {
  const PoolId pool{id.first, id.second};
  throw_if_failed(on_pool("tessera_npu_release_pool", Platform::ascend, device, pool,
                          [&](TesseraAllocator& a) { return a.release_pool(pool); }));
}

}  // extern "C"
