// torch_npu's NPUPluggableAllocator statistics hooks: Tessera's figures in the struct torch_npu's
// memory_stats() reads, c10_npu::NPUCachingAllocator::DeviceStats (torch_npu/csrc/core/npu/NPUCachingAllocator.h,
// torch_npu v2.7.1). torch_npu casts the address it is given to DeviceStats(*)(int) and calls it from C++: the
// struct is trivially copyable, so it comes back as a C struct of that size does (the caller's buffer on
// x86-64 and AArch64), and only its layout has to match, which the asserts below pin.
#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "capi/guard.hpp"
#include "capi/last_error.hpp"
#include "capi/registry.hpp"
#include "tessera/tessera_c.h"

namespace tessera::capi {
namespace {

// torch_npu's layout: Stat is four int64; a StatArray three Stats; nine StatArrays, then num_alloc_retries,
// num_ooms, oversize_allocations, oversize_segments (Stats) and max_split_size.
constexpr std::size_t stat_size = 4 * sizeof(std::int64_t);
constexpr std::size_t stat_array_size = 3 * stat_size;
static_assert(sizeof(tessera_npu_stat) == stat_size);
static_assert(sizeof(tessera_npu_device_stats::allocation) == stat_array_size);
static_assert(offsetof(tessera_npu_stat, peak) == 8 && offsetof(tessera_npu_stat, allocated) == 16 &&
              offsetof(tessera_npu_stat, freed) == 24);
static_assert(offsetof(tessera_npu_device_stats, allocation) == 0 * stat_array_size);
static_assert(offsetof(tessera_npu_device_stats, segment) == 1 * stat_array_size);
static_assert(offsetof(tessera_npu_device_stats, active) == 2 * stat_array_size);
static_assert(offsetof(tessera_npu_device_stats, inactive_split) == 3 * stat_array_size);
static_assert(offsetof(tessera_npu_device_stats, allocated_bytes) == 4 * stat_array_size);
static_assert(offsetof(tessera_npu_device_stats, reserved_bytes) == 5 * stat_array_size);
static_assert(offsetof(tessera_npu_device_stats, active_bytes) == 6 * stat_array_size);
static_assert(offsetof(tessera_npu_device_stats, inactive_split_bytes) == 7 * stat_array_size);
static_assert(offsetof(tessera_npu_device_stats, requested_bytes) == 8 * stat_array_size);
static_assert(offsetof(tessera_npu_device_stats, num_alloc_retries) == 9 * stat_array_size);
static_assert(offsetof(tessera_npu_device_stats, num_ooms) == 9 * stat_array_size + 8);
static_assert(offsetof(tessera_npu_device_stats, oversize_allocations) == 9 * stat_array_size + 16);
static_assert(offsetof(tessera_npu_device_stats, oversize_segments) == 9 * stat_array_size + 16 + stat_size);
static_assert(offsetof(tessera_npu_device_stats, max_split_size) == 9 * stat_array_size + 16 + 2 * stat_size);
static_assert(sizeof(tessera_npu_device_stats) == 9 * stat_array_size + 16 + 2 * stat_size + 8);  // 952 bytes
static_assert(std::is_trivially_copyable_v<tessera_npu_device_stats>);

tessera_npu_stat to_stat(const Stat& counter) {
  return {static_cast<std::int64_t>(counter.current), static_cast<std::int64_t>(counter.peak),
          static_cast<std::int64_t>(counter.allocated), static_cast<std::int64_t>(counter.freed)};
}

// One StatArray from the per-pool counters of one measure.
void put(tessera_npu_stat (&out)[3], const Usage& usage, Stat PoolUsage::*measure) {
  out[TESSERA_NPU_STAT_AGGREGATE] = to_stat(usage.all.*measure);
  out[TESSERA_NPU_STAT_SMALL_POOL] = to_stat(usage.small_pool.*measure);
  out[TESSERA_NPU_STAT_LARGE_POOL] = to_stat(usage.large_pool.*measure);
}

tessera_npu_device_stats device_stats(const Device& device) {
  const Usage usage = device.allocator->usage();
  const TesseraStats stats = device.allocator->tessera_stats();
  tessera_npu_device_stats out{};
  put(out.allocation, usage, &PoolUsage::allocation);
  put(out.allocated_bytes, usage, &PoolUsage::allocated_bytes);
  put(out.requested_bytes, usage, &PoolUsage::requested_bytes);
  put(out.active, usage, &PoolUsage::active);
  put(out.active_bytes, usage, &PoolUsage::active_bytes);
  put(out.segment, usage, &PoolUsage::segment);
  // The pools' entries are what their segments map; the aggregate every page held, pooled ones too.
  put(out.reserved_bytes, usage, &PoolUsage::mapped_bytes);
  out.reserved_bytes[TESSERA_NPU_STAT_AGGREGATE] = to_stat(usage.reserved_bytes);
  // Read from the allocator's state: the current value only, the others 0 (docs/pytorch.md says why).
  for (const SizePool pool : {SizePool::small, SizePool::large}) {
    const PoolStats& figures = stats.pools[static_cast<std::size_t>(pool)];
    const int index = pool == SizePool::small ? TESSERA_NPU_STAT_SMALL_POOL : TESSERA_NPU_STAT_LARGE_POOL;
    for (const int at : {index, static_cast<int>(TESSERA_NPU_STAT_AGGREGATE)}) {
      out.inactive_split[at].current += static_cast<std::int64_t>(figures.inactive_split);
      out.inactive_split_bytes[at].current += static_cast<std::int64_t>(figures.inactive_split_bytes);
    }
  }
  out.num_alloc_retries = static_cast<std::int64_t>(stats.common.num_alloc_retries);
  out.num_ooms = static_cast<std::int64_t>(stats.common.num_ooms);
  // oversize_* and max_split_size have no meaning in Tessera (no max_split_size): 0.
  return out;
}

}  // namespace
}  // namespace tessera::capi

using namespace tessera;
using namespace tessera::capi;

extern "C" {

tessera_npu_device_stats tessera_npu_get_device_stats(int device) {
  return guarded("tessera_npu_get_device_stats", tessera_npu_device_stats{}, [&] {
    if (device < 0 || device >= max_devices) {
      set_last_error(Errc::invalid_argument,
                     fmt::format("tessera_npu_get_device_stats: {}", device_out_of_range(device).message));
      return tessera_npu_device_stats{};
    }
    const Device* found = existing_device(device);
    return found == nullptr ? tessera_npu_device_stats{} : device_stats(*found);
  });
}

void tessera_npu_reset_peak_stats(int device) { (void)tessera_reset_peak_memory_stats(device); }

}  // extern "C"
