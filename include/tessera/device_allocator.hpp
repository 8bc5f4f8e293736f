// The resource interface every device allocator implements — Tessera's own and the baseline models of
// the allocators people use today — so that the replay tool runs them side by side on the same trace
// and the same driver.
//
// The public calls are non-virtual: they check their arguments once, here, and pass what is valid to the
// protected do_ functions an allocator overrides, which may assume it (a size above 0, an address not 0).
//
// Stream contract (as RMM states it for its resources):
//   - memory allocated on stream S may be used by work on S at once;
//   - a block freed on S may be reused at once by work on S;
//   - before another stream may use a freed block, or before its pages may be unmapped, an event recorded
//     on S at the free (and on every stream added with record_stream) must have completed.
// Out of memory is an answer, not a crash: allocate() returns Errc::out_of_memory after the allocator's
// whole out-of-memory ladder failed, and the allocator is usable afterwards with its live blocks, and the
// bytes they account for, as they were. What it caches may differ: the ladder may have given cached pages
// back, and an allocator that backs a block page by page may keep pooled the pages it obtained on the way.
// Every other refusal changes nothing at all.
//
// tests/contract holds one suite of these contracts that runs for every allocator over every driver.
#pragma once

#include <compare>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>

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
  std::uint64_t num_device_alloc = 0;      // [num_device_alloc] physical allocations (PyTorch: cudaMalloc calls;
                                           // Tessera: chunks created; the models: segments or handles)
  std::uint64_t num_device_free = 0;       // [num_device_free] the same, released
};

// Which streams' allocations go to a pool while it is active (PyTorch passes one that accepts the streams
// its graph captures on). It is called under the allocator's lock: it must not call the allocator.
using StreamFilter = std::function<bool(StreamId)>;

class DeviceAllocator {
 public:
  virtual ~DeviceAllocator() = default;

  virtual std::string_view name() const noexcept = 0;
  // A block of at least `size` bytes for work on `stream`, aligned to 512 bytes. A size of 0 is
  // Errc::invalid_argument (no allocator hands out an empty block).
  Result<Address> allocate(Bytes size, StreamId stream) {
    if (size == 0) [[unlikely]] return refuse(Errc::invalid_argument, "allocate of 0 bytes");
    return do_allocate(size, stream);
  }
  // Frees a block returned by allocate(). An address that is not a live block of this allocator — 0, which
  // allocate never returns, among them — is Errc::not_found and changes nothing: the same answer as a
  // double free, since to the caller both are a pointer the allocator does not own.
  Result<void> deallocate(Address block) {
    if (block == 0) [[unlikely]] return refuse(Errc::not_found, "deallocate of 0x0, which is not a live block");
    return do_deallocate(block);
  }
  // Work on `stream` uses `block` too: its reuse by another stream waits for that work as well. An address
  // that is not a live block is Errc::not_found, as in deallocate.
  Result<void> record_stream(Address block, StreamId stream) {
    if (block == 0) [[unlikely]] return refuse(Errc::not_found, "record_stream on 0x0, which is not a live block");
    return do_record_stream(block, stream);
  }
  // Gives every cached, unused page back to the device.
  virtual Result<void> empty_cache() = 0;

  // Pause and resume the memory of a tag (tags.hpp): its pages go back to the device while its blocks keep
  // their addresses, and come back at the same addresses, their bytes restored where `backup` was asked
  // (every block) or the block was allocated with OnPause::back_up.
  // Only allocators that can override them (Tessera: allocator.hpp states the contract; the
  // torch_memory_saver model); the others answer Errc::unsupported and change nothing.
  Result<void> pause(std::string_view tag, bool backup) { return do_pause(tag, backup); }
  Result<void> resume(std::string_view tag) { return do_resume(tag); }

  // Private pools, with PyTorch's semantics (beginAllocateToPool, endAllocateToPool, releasePool;
  // docs/allocator.md, "Private pools"). While a pool is active, an allocation on a stream that its filter
  // accepts goes into the pool (the first active pool that accepts it, in the order they were begun), and a
  // freed block of the pool is reused only by allocations into it. Beginning a pool that exists (not yet
  // released) adds a use, as several graph captures share one pool; ending it stops the allocations into
  // it, not its use. Releasing takes one use away; the last one releases the pool: its id may name a new pool
  // from then on, its cached memory goes back to the shared cache at once, and its live blocks' memory as each
  // is freed. Releasing a pool that is still active, or one that does not exist, is an error naming it.
  // Only allocators that can override them; the others answer Errc::unsupported and change nothing.
  Result<void> begin_allocate_to_pool(PoolId pool, StreamFilter accepts, PoolKind kind = PoolKind::graph) {
    if (pool == PoolId{}) [[unlikely]] return refuse(Errc::invalid_argument, "pool (0, 0) is no pool");
    if (!accepts) [[unlikely]] return refuse(Errc::invalid_argument, "begin_allocate_to_pool without a stream filter");
    return do_begin_allocate_to_pool(pool, std::move(accepts), kind);
  }
  Result<void> end_allocate_to_pool(PoolId pool) { return do_end_allocate_to_pool(pool); }
  Result<void> release_pool(PoolId pool) { return do_release_pool(pool); }

  virtual AllocatorStats stats() const = 0;

 protected:
  // Called with the arguments checked above: size > 0, block != 0.
  virtual Result<Address> do_allocate(Bytes size, StreamId stream) = 0;
  virtual Result<void> do_deallocate(Address block) = 0;
  virtual Result<void> do_record_stream(Address block, StreamId stream) = 0;
  virtual Result<void> do_pause(std::string_view tag, bool /*backup*/) {
    return refuse(Errc::unsupported, "pause of tag '" + std::string(tag) + "': this allocator cannot pause memory");
  }
  virtual Result<void> do_resume(std::string_view tag) {
    return refuse(Errc::unsupported, "resume of tag '" + std::string(tag) + "': this allocator cannot pause memory");
  }
  virtual Result<void> do_begin_allocate_to_pool(PoolId /*pool*/, StreamFilter /*accepts*/, PoolKind /*kind*/) {
    return refuse(Errc::unsupported, "begin_allocate_to_pool: this allocator has no private pools");
  }
  virtual Result<void> do_end_allocate_to_pool(PoolId /*pool*/) {
    return refuse(Errc::unsupported, "end_allocate_to_pool: this allocator has no private pools");
  }
  virtual Result<void> do_release_pool(PoolId /*pool*/) {
    return refuse(Errc::unsupported, "release_pool: this allocator has no private pools");
  }

 private:
  // "<name>: <what>", in the style of the allocators' own errors. Out of line of the fast path.
  [[gnu::cold, gnu::noinline]] Error refuse(Errc code, std::string_view what) const {
    std::string message(name());
    message += ": ";
    message += what;
    return make_error(code, std::move(message));
  }
};

}  // namespace tessera
