// The driver: the VMM primitives of one platform behind one small interface (layer 1).
//
// Contract, the same for every driver (the conformance suite in tests/driver checks each one):
//   - Sizes of reservations and pages are positive multiples of granularity(); mapping addresses are
//     granule-aligned and lie inside a live reservation.
//   - map() maps one whole page at one address; unmap() removes exactly one earlier mapping, whole.
//   - A page is released only when it has no mapping; a reservation only when nothing is mapped in it.
//     (CUDA itself would defer the release to the last unmap; Tessera refuses instead, on every platform,
//     so that no memory is ever held by a handle nobody owns.)
//   - Every failure is a Result holding an Error with a category (Errc), the platform's code and a message.
//     A failed call changes nothing: the driver stays usable.
//   - A driver is not thread-safe. The allocator serializes the calls of one device.
//
// Platform differences are capabilities, never #ifdefs in callers.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "tessera/result.hpp"
#include "tessera/types.hpp"

namespace tessera {

// Every kind of call, for counting, timing and fault injection.
enum class DriverCall : std::uint8_t {
  reserve,
  release_reservation,
  create_chunk,
  release_chunk,
  map,
  set_access,
  unmap,
  create_event,
  record_event,
  query_event,
  synchronize_event,
  destroy_event,
  synchronize_stream,
  synchronize_device,
  copy,  // write() and read(): data access, for tests and checks
  allocate_host,   // host buffers for backups, and copies between them and device memory
  free_host,
  copy_to_host,
  copy_to_device,
  export_chunk,  // a chunk shared with another process, and one imported from another (IPC)
  import_chunk,
};

inline constexpr std::size_t driver_call_count = static_cast<std::size_t>(DriverCall::import_chunk) + 1;

// The call's name in messages and reports; the chunk calls keep their report names create_page and
// release_page (src/driver/names.cpp says why).
std::string_view to_string(DriverCall call) noexcept;

// Per-kind counters (calls, failures, nanoseconds), used by the counting decorator and the sim driver.
struct CallTally {
  std::array<std::uint64_t, driver_call_count> calls{};
  std::array<std::uint64_t, driver_call_count> failures{};
  std::array<std::uint64_t, driver_call_count> nanoseconds{};

  std::uint64_t calls_of(DriverCall call) const { return calls[static_cast<std::size_t>(call)]; }
  std::uint64_t failures_of(DriverCall call) const { return failures[static_cast<std::size_t>(call)]; }
  std::uint64_t nanoseconds_of(DriverCall call) const { return nanoseconds[static_cast<std::size_t>(call)]; }
  std::uint64_t total_calls() const;
  std::uint64_t total_nanoseconds() const;
};

struct DriverCapabilities {
  bool needs_set_access = false;    // map() leaves the range inaccessible until set_access() (CUDA)
  bool page_multi_mapping = false;  // one page may be mapped at several addresses at once (CUDA, host)
  bool data_access = false;         // write()/read() reach real memory (host, CUDA, Ascend)
  bool host_pointers = false;       // addresses are host pointers the CPU may dereference (host)
  bool asynchronous = false;        // events may stay pending while the device works (CUDA, Ascend)
  bool partial_map = false;         // map_part(): a granule-aligned part of a page on its own (CUDA, host, sim)
  bool survives_fork = false;       // a child of fork() may go on using it (host: it copies its memory; sim)
  bool host_backup = false;  // allocate_host / copy_to_host / copy_to_device (host, sim, CUDA, Ascend)
  // export_chunk / import_chunk: a chunk shared with another process through a file descriptor (host with
  // HostDriverOptions::shareable_chunks, CUDA with CudaDriverOptions::shareable_chunks and the calls in libcuda)
  bool shareable_chunks = false;
  // record_event() may record an event again once its work completed (CUDA: cuEventRecord overwrites what it
  // captured; host, sim). Not Ascend: a plain aclrtCreateEvent event is documented as recordable again only
  // when made with aclrtCreateEventExWithFlag, and a recorded one holds one of a limited number of hardware
  // event ids — there an event is destroyed once it completed.
  bool reusable_events = false;
};

// A chunk exported for another process: a file descriptor the caller now owns (and closes) that names the
// chunk's memory, and where the chunk lies in what it names. The importer passes all three to import_chunk.
struct ExportedChunk {
  int descriptor = -1;
  Bytes offset = 0;  // into the descriptor's file (host: 0, a chunk is a memfd of its own; CUDA: 0)
  Bytes size = 0;    // the chunk's bytes
};

// A host buffer for backups: page-locked ("pinned") where the platform has it, so copies run at full speed.
// data is null on drivers without data access (sim), which only account for the bytes.
struct HostBuffer {
  std::uint64_t id = 0;   // 0: no buffer
  void* data = nullptr;
  Bytes size = 0;
};

// What a driver holds right now; a leak check compares it with the state a test expects.
struct DriverCensus {
  std::size_t reservations = 0;
  Bytes reserved_bytes = 0;
  std::size_t pages = 0;
  Bytes page_bytes = 0;
  std::size_t mappings = 0;
  Bytes mapped_bytes = 0;
  std::size_t events = 0;
  std::size_t host_buffers = 0;  // allocate_host's buffers not yet freed
  Bytes host_bytes = 0;

  bool operator==(const DriverCensus&) const = default;
};

// Control over the streams of drivers whose work is simulated (host, sim): a held stream leaves every
// event recorded on it pending until complete() (or a synchronize call) — how tests exercise the
// allocator's event logic without a device.
class StreamControl {
 public:
  virtual ~StreamControl() = default;
  virtual void hold(StreamId stream) = 0;
  virtual void complete(StreamId stream) = 0;
};

class Driver {
 public:
  virtual ~Driver() = default;

  virtual std::string_view name() const noexcept = 0;
  virtual const DriverCapabilities& capabilities() const noexcept = 0;
  virtual Bytes granularity() const noexcept = 0;
  // Physical bytes the device offers (or the configured limit).
  virtual Bytes capacity() const noexcept = 0;
  virtual DriverCensus census() const = 0;

  // Virtual address space. alignment 0 means the granule; otherwise a power of two multiple of it.
  virtual Result<Address> reserve(Bytes size, Bytes alignment = 0) = 0;
  virtual Result<void> release_reservation(Address base) = 0;

  // Physical memory: a chunk of `size` bytes, a whole number of granules (cuMemCreate, aclrtMallocPhysical).
  virtual Result<ChunkId> create_chunk(Bytes size) = 0;
  virtual Result<void> release_chunk(ChunkId chunk) = 0;

  // Mappings.
  virtual Result<void> map(Address at, ChunkId chunk) = 0;
  // Maps bytes [offset, offset + size) of the chunk at `at` (capability partial_map; else Errc::unsupported):
  // one chunk cut into pages mapped, and unmapped, independently — cuMemMap's offset argument.
  // offset and size are granule multiples. A call of kind DriverCall::map.
  virtual Result<void> map_part(Address at, ChunkId chunk, Bytes offset, Bytes size) = 0;
  virtual Result<void> set_access(Address at, Bytes size) = 0;  // every byte of the range must be mapped
  virtual Result<void> unmap(Address at) = 0;                   // the mapping that starts at `at`

  // Stream order: an event recorded on a stream completes when the work submitted before it is done.
  virtual Result<EventId> create_event() = 0;
  virtual Result<void> record_event(EventId event, StreamId stream) = 0;
  virtual Result<bool> query_event(EventId event) = 0;  // true when complete
  virtual Result<void> synchronize_event(EventId event) = 0;
  virtual Result<void> destroy_event(EventId event) = 0;
  virtual Result<void> synchronize_stream(StreamId stream) = 0;
  virtual Result<void> synchronize_device() = 0;

  // Data access through mapped, accessible memory (capability data_access).
  virtual Result<void> write(Address at, const void* source, Bytes size) = 0;
  virtual Result<void> read(Address at, void* destination, Bytes size) = 0;

  // Host memory for backups, and copies between it and mapped, accessible device memory. Synchronous:
  // the copy is complete when the call returns (the caller has already proven the device idle).
  // Errors: a size of 0, or a copy larger than the buffer, is Errc::invalid_argument; a buffer this driver
  // did not allocate (or freed) Errc::not_found; a device range not mapped (or without access where the
  // platform needs it) Errc::not_mapped, as for write()/read(); no host memory left Errc::out_of_memory;
  // a driver without the capability host_backup Errc::unsupported. A failed call changes nothing.
  virtual Result<HostBuffer> allocate_host(Bytes size) = 0;
  virtual Result<void> free_host(HostBuffer buffer) = 0;
  virtual Result<void> copy_to_host(HostBuffer destination, Address source, Bytes size) = 0;
  virtual Result<void> copy_to_device(Address destination, HostBuffer source, Bytes size) = 0;

  // Sharing between processes (capability shareable_chunks; else Errc::unsupported). export_chunk answers a
  // new descriptor for a chunk this driver holds; the chunk stays this driver's, and releasing it later does
  // not take the memory from a process that imported it (the platform keeps the memory while any process
  // holds it). import_chunk makes a chunk of this driver over memory another process exported: it is mapped,
  // accessed and released as any chunk, its bytes are not counted against capacity() (they are the
  // exporter's), and the caller keeps (and closes) `descriptor`. A descriptor that names no importable memory,
  // or a size that is not a positive granule multiple or passes the end of what the descriptor names, is an
  // Errc::invalid_argument error that says which.
  virtual Result<ExportedChunk> export_chunk(ChunkId chunk) = 0;
  virtual Result<ChunkId> import_chunk(int descriptor, Bytes offset, Bytes size) = 0;

  // Present on drivers whose streams are simulated (host, sim); null otherwise.
  virtual StreamControl* stream_control() noexcept { return nullptr; }

  // Whether `stream` is capturing a graph now (CUDA: cuStreamIsCapturing, a capture an error invalidated
  // included): work submitted to it is recorded for replay, not run, so memory it is given stays the graph's.
  // The default answers false, for drivers whose streams cannot capture (host, sim; ascend until it asks
  // CANN). A driver that cannot tell answers an error (Errc::unsupported where the platform library lacks
  // the call). Unlike every other call, safe from any thread while the driver's other calls run: it reads
  // nothing they change. No DriverCall: it is not counted, timed or injected.
  virtual Result<bool> stream_is_capturing(StreamId /*stream*/) { return false; }
};

}  // namespace tessera
