// Baselines: faithful models of the device allocators people use today, so that the replay tool runs them
// and Tessera in one process, on the same trace and the same driver (docs/baselines.md).
//
//   "pytorch"     PyTorch's native CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp, PyTorch 2.5)
//   "expandable"  the same allocator with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
//   "gmlake"      GMLake (glake's patched PyTorch caching allocator), which stitches 2 MiB physical chunks
//   "memory-saver" torch_memory_saver / vLLM's CuMemAllocator: one physical handle per tagged allocation,
//                 released on pause and created again on resume; untagged memory through "pytorch"
//
// Each model gets physical memory only through the Driver it is given, so that reserved memory is the
// driver's census().page_bytes for every model alike and driver calls are counted the same way. A model does
// not own its driver; the driver must outlive it. The models are single-threaded: the replay calls them from
// one thread, and none of them locks.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string_view>
#include <vector>

#include "tessera/device_allocator.hpp"
#include "tessera/driver.hpp"
#include "tessera/result.hpp"
#include "tessera/types.hpp"

namespace tessera {

// What a model did to its device memory, in the words of PyTorch's trace entries (segment_alloc,
// segment_free, segment_map, segment_unmap), so that validation can compare a model with a recording.
struct SegmentEvent {
  enum class Kind : std::uint8_t {
    alloc,  // a new segment (PyTorch: cudaMalloc; GMLake: a segment of 2 MiB chunks; memory-saver: a tagged
            // allocation's handle, made or resumed)
    free,   // a segment given back (cudaFree; memory-saver: a handle freed or paused)
    map,    // pages mapped into an expandable segment
    unmap,  // pages of an expandable segment unmapped and released
  };
  Kind kind = Kind::alloc;
  Address address = 0;
  Bytes size = 0;
  StreamId stream{};
  bool small_pool = false;
};

using SegmentObserver = std::function<void(const SegmentEvent&)>;

// max_split_size when it is not set: PyTorch's own "unlimited" value.
inline constexpr Bytes unlimited_split_size = std::numeric_limits<Bytes>::max();

// GMLake's own knobs; the names in brackets are the environment variables GMLake reads.
struct GMLakeOptions {
  Bytes fragment_limit = 512 * MiB;  // [fragLimit] smallest request that may be stitched
  double reuse_limit = 10.0;         // [reuseLimit] a free stitched block serves requests down to 1/10 its size
  Bytes auto_gc_limit = 1000 * GiB;  // [autoGC, in GiB] stitched virtual bytes that trigger a stitch GC
};

// The knobs of PyTorch's allocator, with PYTORCH_CUDA_ALLOC_CONF's meaning (bytes where PyTorch takes MiB).
struct BaselineOptions {
  // [max_split_size_mb] Blocks at or above this size are never split and serve only requests of at least
  // this size that they exceed by less than 20 MiB. Must be above 20 MiB; unlimited by default.
  Bytes max_split_size = unlimited_split_size;
  // [garbage_collection_threshold] in (0, 1); 0 is off. As in PyTorch it acts only when memory_fraction is
  // set too: when the reserved bytes pass threshold × the allowed bytes, cached whole segments that were
  // reused least recently are given back before a new one is allocated.
  double garbage_collection_threshold = 0.0;
  // [roundup_power2_divisions] 0 (off) or a power of two: requests above 512 B × divisions are rounded up
  // to the next of `divisions` equal steps between two powers of two. One value for every size.
  std::size_t roundup_power2_divisions = 0;
  // torch.cuda.set_per_process_memory_fraction: in (0, 1], 0 means never set. Caps the reserved bytes at
  // fraction × driver capacity, and enables the garbage collection threshold above.
  double memory_fraction = 0.0;
  // Called at every segment event, in order; empty by default. Tests and validation read the segment sizes
  // a model creates through it.
  SegmentObserver on_segment = {};
  GMLakeOptions gmlake = {};
};

// Reads PyTorch's configuration string ("max_split_size_mb:128,garbage_collection_threshold:0.6,...") into
// options. Keys: max_split_size_mb, garbage_collection_threshold, roundup_power2_divisions (a single value),
// expandable_segments (True/False: returned in `expandable`). An unknown key or a bad value is an
// Errc::invalid_argument error that names it.
struct ParsedAllocConf {
  BaselineOptions options;
  bool expandable = false;
};
Result<ParsedAllocConf> parse_pytorch_alloc_conf(std::string_view conf);

// By name: "pytorch", "expandable", "gmlake", "memory-saver". An unknown name is an Errc::invalid_argument error that lists
// the known ones; options that break a model's rules are Errc::invalid_argument errors that name the knob.
Result<std::unique_ptr<DeviceAllocator>> make_baseline(std::string_view name, Driver& driver,
                                                       const BaselineOptions& options = {});
std::vector<std::string_view> baseline_names();

Result<std::unique_ptr<DeviceAllocator>> make_pytorch_caching(Driver& driver, const BaselineOptions& options = {});
Result<std::unique_ptr<DeviceAllocator>> make_expandable_segments(Driver& driver, const BaselineOptions& options = {});
Result<std::unique_ptr<DeviceAllocator>> make_gmlake(Driver& driver, const BaselineOptions& options = {});
Result<std::unique_ptr<DeviceAllocator>> make_memory_saver(Driver& driver, const BaselineOptions& options = {});

}  // namespace tessera
