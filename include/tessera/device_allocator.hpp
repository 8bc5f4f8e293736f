// The resource interface every device allocator implements — Tessera's own and the baseline models of
// the allocators people use today — so that the replay tool runs them side by side on the same trace
// and the same driver.
//
// Stream contract (as RMM states it for its resources):
//   - memory allocated on stream S may be used by work on S at once;
//   - a block freed on S may be reused at once by work on S;
//   - before another stream may use a freed block, or before its pages may be unmapped, an event recorded
//     on S at the free (and on every stream added with record_stream) must have completed.
// Out of memory is an answer, not a crash: allocate() returns Errc::out_of_memory after the allocator's
// whole out-of-memory ladder failed, and the allocator is unchanged and usable afterwards.
#pragma once

#include <cstdint>
#include <string_view>

#include "tessera/result.hpp"
#include "tessera/types.hpp"

namespace tessera {

// Counters in PyTorch's vocabulary (memory_stats() keys in brackets), "all" pools together.
struct AllocatorStats {
  Bytes requested_bytes = 0;       // [requested_bytes.all.current] live bytes as the caller asked
  Bytes allocated_bytes = 0;       // [allocated_bytes.all.current] live bytes after rounding
  Bytes reserved_bytes = 0;        // [reserved_bytes.all.current] physical bytes held from the device
  Bytes peak_requested_bytes = 0;  // [requested_bytes.all.peak]
  Bytes peak_allocated_bytes = 0;  // [allocated_bytes.all.peak]
  Bytes peak_reserved_bytes = 0;   // [reserved_bytes.all.peak]
  std::uint64_t num_alloc_retries = 0;     // [num_alloc_retries] allocations that needed the OOM ladder
  std::uint64_t num_ooms = 0;              // [num_ooms]
  std::uint64_t num_sync_all_streams = 0;  // [num_sync_all_streams]
  std::uint64_t num_device_alloc = 0;      // [num_device_alloc] pages (or segments) created
  std::uint64_t num_device_free = 0;       // [num_device_free] pages (or segments) released
};

class DeviceAllocator {
 public:
  virtual ~DeviceAllocator() = default;

  virtual std::string_view name() const noexcept = 0;
  // A block of at least `size` bytes (size > 0) for work on `stream`.
  Result<Address> allocate(Bytes size, StreamId stream) { return do_allocate(size, stream); }
  // Frees a block returned by allocate(); an unknown address is Errc::not_found and changes nothing.
  Result<void> deallocate(Address block) { return do_deallocate(block); }
  // Work on `stream` uses `block` too: its reuse by another stream waits for that work as well.
  Result<void> record_stream(Address block, StreamId stream) { return do_record_stream(block, stream); }
  // Gives every cached, unused page back to the device.
  virtual Result<void> empty_cache() = 0;

  virtual AllocatorStats stats() const = 0;

 protected:
  virtual Result<Address> do_allocate(Bytes size, StreamId stream) = 0;
  virtual Result<void> do_deallocate(Address block) = 0;
  virtual Result<void> do_record_stream(Address block, StreamId stream) = 0;
};

}  // namespace tessera
