// The four drivers and how to make them. Each backend lives in one file of src/driver/.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/driver.hpp"

namespace tessera {

// host: real virtual memory on Linux. A memfd is the device's physical memory, a page is a range of it,
// a reservation is a PROT_NONE mmap, map is a MAP_FIXED|MAP_SHARED mmap of the page's range. Data written
// through a mapping survives unmapping and remapping elsewhere, exactly as on a GPU.
struct HostDriverOptions {
  Bytes capacity = 1 * GiB;
  Bytes granularity = 2 * MiB;  // a power of two, at least the OS page size
  // Behave like CUDA: a fresh mapping is inaccessible (PROT_NONE) until set_access().
  bool require_set_access = false;
  // The kernel's mapping limit to respect; 0 reads /proc/sys/vm/max_map_count. Tests set a lower one.
  std::size_t max_map_count = 0;
  // How many mappings the process has now; empty counts the lines of /proc/self/maps. Tests count the calls.
  std::function<std::size_t()> count_mappings = {};
  // Chunks another process can import (capability shareable_chunks): each chunk is a memfd of its own rather
  // than a range of the device's one, so that the kernel keeps its memory while an importer maps it, whatever
  // this driver does after. Costs a descriptor a chunk, and the driver no longer survives fork() (a child
  // would share the chunks' files with its parent).
  bool shareable_chunks = false;
};

Result<std::unique_ptr<Driver>> make_host_driver(const HostDriverOptions& options = {});

// sim: no memory at all. Addresses are numbers, capacity is a number, every call is counted and charged
// the modelled latency of its kind: fixed + per_granule * (granules in the call - 1) + per_byte * bytes.
struct CallLatency {
  double fixed_us = 0;
  double per_extra_granule_us = 0;
  double per_byte_ns = 0;  // bytes moved (host buffers, copies: 1 / bandwidth in GB/s) or created (per_byte)
};

// How a chunk's cost grows with its size: the choice `tessera replay --latency-model` names. The published
// figures are for one 2 MiB granule and say nothing of larger chunks, so the two models bracket them:
//   per_call  every call costs its 2 MiB figure whatever its size (the default; larger chunks are free).
//   per_byte  create_chunk and release_chunk cost a fixed part plus a part in proportion to the chunk's
//             bytes, equal to per_call at 2 MiB (larger chunks cost almost what their granules would one by
//             one). The other calls cost what they cost in per_call. docs/drivers.md has the figures.
enum class LatencyScaling : std::uint8_t { per_call, per_byte };

std::string_view to_string(LatencyScaling scaling) noexcept;
// "per_call" or "per_byte"; anything else is empty.
std::optional<LatencyScaling> latency_scaling_named(std::string_view name) noexcept;
std::vector<std::string_view> latency_scaling_names();

struct LatencyModel {
  std::array<CallLatency, driver_call_count> of{};

  CallLatency& operator[](DriverCall call) { return of[static_cast<std::size_t>(call)]; }
  const CallLatency& operator[](DriverCall call) const { return of[static_cast<std::size_t>(call)]; }

  // Published A100 figures (kvcached's VMM benchmark) plus documented assumptions for
  // the calls it does not cover; see docs/drivers.md.
  static LatencyModel a100(LatencyScaling scaling = LatencyScaling::per_call);
  // ACL's VMM calls on an Ascend 910B: assumptions, each the A100 figure of the matching CUDA call, since
  // no measurement of them is known to this project; no set-access call (docs/drivers.md).
  static LatencyModel ascend_910b(LatencyScaling scaling = LatencyScaling::per_call);
};

// The platform whose VMM contract the sim driver follows. cuda: map() needs set_access(), a page may be
// mapped in parts (partial_map) and at several addresses. ascend: as the ascend driver declares ACL's
// (aclrtMapMem maps whole handles, no set-access call, one mapping of a handle at a time).
enum class SimPlatform : std::uint8_t { cuda, ascend };

struct SimDriverOptions {
  Bytes capacity = 80 * GiB;
  Bytes granularity = 2 * MiB;
  // Host memory for allocate_host's buffers (none is really allocated): out of memory beyond it.
  // Assumption: the 2 TiB of a DGX-class 8-GPU server.
  Bytes host_capacity = 2048 * GiB;
  LatencyModel latency = LatencyModel::a100();
  SimPlatform platform = SimPlatform::cuda;

  // An Ascend 910B of 64 GiB HBM: 2 MiB granule, the ascend platform, LatencyModel::ascend_910b(scaling).
  static SimDriverOptions ascend_910b(LatencyScaling scaling = LatencyScaling::per_call);
};

// The sim driver's own counters: every call it executed and the modelled nanoseconds charged.
class SimClock {
 public:
  virtual ~SimClock() = default;
  virtual const CallTally& modelled() const noexcept = 0;
  virtual void reset_modelled() noexcept = 0;
};

struct SimDriverHandle {
  std::unique_ptr<Driver> driver;
  SimClock* clock = nullptr;  // owned by driver
};

Result<SimDriverHandle> make_sim_driver(const SimDriverOptions& options = {});

// cuda: the CUDA driver API, loaded at run time from libcuda.so.1. Builds and runs without CUDA; asking
// for it on a machine without the library is an Errc::unavailable error that says so.
struct CudaDriverOptions {
  int device = 0;
  std::string library = "libcuda.so.1";
  // Chunks created with a POSIX file descriptor handle requested (prop.requestedHandleTypes), so that they can
  // be exported to another process (capability shareable_chunks, where libcuda has the export and import calls).
  bool shareable_chunks = false;
};

Result<std::unique_ptr<Driver>> make_cuda_driver(const CudaDriverOptions& options = {});

// ascend: the CANN ACL runtime, loaded at run time from libascendcl.so. Unverified on hardware: nothing
// in this project has run it on an Ascend device (docs/drivers.md).
struct AscendDriverOptions {
  int device = 0;
  std::string library = "libascendcl.so";
};

Result<std::unique_ptr<Driver>> make_ascend_driver(const AscendDriverOptions& options = {});

// What a caller that chooses a driver by name (the C ABI, the demo, the benchmarks, tessera-driver-latency)
// may set. Each driver reads the options it has and ignores the others; an empty one keeps the driver's
// own default.
struct DriverOptions {
  std::optional<Bytes> capacity = std::nullopt;     // host, sim: the device's size
  std::optional<Bytes> granularity = std::nullopt;  // host, sim
  bool require_set_access = false;   // host: a fresh mapping is inaccessible until set_access, as on CUDA
  int device = 0;                    // cuda, ascend: the device ordinal
  std::string library = {};          // cuda, ascend: the platform library (empty: libcuda.so.1, libascendcl.so)
  bool shareable_chunks = false;     // host, cuda: chunks another process can import (IPC)
};

// By name: "host", "sim", "cuda", "ascend". An unknown name is an Errc::invalid_argument error that lists the
// known ones.
Result<std::unique_ptr<Driver>> make_driver(std::string_view name, const DriverOptions& options = {});
std::vector<std::string_view> driver_names();

}  // namespace tessera
