// Tessera as libtorch's CPU allocator: every CPU tensor's memory comes from Tessera's allocator on the host
// driver (real virtual memory: a memfd mapped page by page), through the C ABI of libtessera_c.so, so that
// tessera.memory_stats(), memory_summary() and dump_snapshot() see it. Built against Debian's libtorch-dev
// (c10 only); loaded by tessera.torch.enable("cpu"), which calls tessera_torch_cpu_enable().
//
// This is how the project runs PyTorch on Tessera for real without a GPU: the same allocator code as on CUDA,
// driven by a real training loop (tests/python/torch_cpu_training_test.py).
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <string>

#include "tessera/tessera_c.h"

namespace {

// The CPU is device 0 of the host driver; streams mean nothing on the CPU.
constexpr int cpu_device = 0;

void free_block(void* data) { tessera_free(data, 0, cpu_device, nullptr); }

class TesseraCpuAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(std::size_t bytes) const override {
    const c10::Device cpu(c10::DeviceType::CPU);
    if (bytes == 0) return {nullptr, nullptr, &free_block, cpu};  // as c10's default CPU allocator answers
    void* data = tessera_alloc(bytes, cpu_device, nullptr);
    if (data == nullptr) {
      // c10::OutOfMemoryError: Python sees torch's out-of-memory error, with Tessera's message.
      TORCH_CHECK_WITH(OutOfMemoryError, false, "Tessera CPU allocator: ", tessera_last_error());
    }
    TORCH_INTERNAL_ASSERT(reinterpret_cast<std::uintptr_t>(data) % c10::gAlignment == 0,
                          "Tessera returned a block below c10's alignment");
    return {data, data, &free_block, cpu};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &free_block; }
};

TesseraCpuAllocator allocator;  // trivially destructible state: safe for frees during static destruction
// Above c10's default CPU allocator (priority 0), so that it is not replaced by a later default registration.
constexpr std::uint8_t priority = 100;

}  // namespace

extern "C" {

// Makes Tessera libtorch's CPU allocator: from now on, every new CPU tensor's memory comes from Tessera (tensors
// allocated before keep the allocator they came from, which frees them). `alloc_conf` as in tessera_configure
// (NULL: TESSERA_ALLOC_CONF). 0, or -1 with a message in tessera_last_error(): the host driver is forced (a
// TESSERA_DRIVER naming another is an error), the configuration is checked, and the first allocation is made
// at once, so that a broken setup fails here rather than inside a tensor operation.
__attribute__((visibility("default"))) int tessera_torch_cpu_enable(const char* alloc_conf) {
  if (tessera_configure("host", alloc_conf) != 0) return -1;
  void* probe = tessera_alloc(1, cpu_device, nullptr);
  if (probe == nullptr) return -1;
  tessera_free(probe, 1, cpu_device, nullptr);
  c10::SetAllocator(c10::DeviceType::CPU, &allocator, priority);
  return 0;
}

// 1 when libtorch's CPU allocator is Tessera's now.
__attribute__((visibility("default"))) int tessera_torch_cpu_enabled(void) {
  return c10::GetAllocator(c10::DeviceType::CPU) == &allocator ? 1 : 0;
}

}  // extern "C"
