// The shared half of every backend: argument checks and the ledger of what the driver holds, so that every
// platform answers a broken contract with the same defined error before the platform is ever called.
// Backends implement only the platform_* primitives, which receive validated arguments.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>

#include "tessera/driver.hpp"

namespace tessera::detail {

using PlatformHandle = std::uint64_t;  // CUmemGenericAllocationHandle, aclrtDrvMemHandle, memfd offset, ...

struct PageRecord {
  PlatformHandle handle = 0;
  Bytes size = 0;
  std::uint32_t mappings = 0;
  bool imported = false;  // import_chunk's: another process's memory, not counted against the capacity
  // Offset -> size of each part mapped now; kept only where a page maps at one address at a time
  // (no page_multi_mapping), to refuse a part mapped twice.
  std::map<Bytes, Bytes> parts;
};

// A host buffer as the platform made it: its handle (the pointer, where there is one) and its bytes.
struct HostBufferRecord {
  PlatformHandle handle = 0;
  void* data = nullptr;  // null where the driver has no data access (sim)
  Bytes size = 0;
};

struct MappingRecord {
  ChunkId page{};
  Bytes offset = 0;  // into the page
  Bytes size = 0;
  bool accessible = false;
};

// The process that loaded a device runtime. CUDA and ACL contexts do not survive fork(): a child's call
// fails with this error instead of reaching a runtime that would hang or answer garbage.
class CreatorProcess {
 public:
  bool is_current() const noexcept { return getpid() == pid_; }
  Error forked_child_error(std::string_view driver) const;

 private:
  pid_t pid_ = getpid();
};

class PlatformDriver : public Driver {
 public:
  std::string_view name() const noexcept final { return name_; }
  const DriverCapabilities& capabilities() const noexcept final { return capabilities_; }
  Bytes granularity() const noexcept final { return granularity_; }
  Bytes capacity() const noexcept final { return capacity_; }
  DriverCensus census() const final;

  Result<Address> reserve(Bytes size, Bytes alignment = 0) final;
  Result<void> release_reservation(Address base) final;
  Result<ChunkId> create_chunk(Bytes size) final;
  Result<void> release_chunk(ChunkId chunk) final;
  Result<void> map(Address at, ChunkId chunk) final;
  Result<void> map_part(Address at, ChunkId chunk, Bytes offset, Bytes size) final;
  Result<void> set_access(Address at, Bytes size) final;
  Result<void> unmap(Address at) final;
  Result<EventId> create_event() final;
  Result<void> record_event(EventId event, StreamId stream) final;
  Result<bool> query_event(EventId event) final;
  Result<void> synchronize_event(EventId event) final;
  Result<void> destroy_event(EventId event) final;
  Result<void> synchronize_stream(StreamId stream) final;
  Result<void> synchronize_device() final;
  Result<void> write(Address at, const void* source, Bytes size) final;
  Result<void> read(Address at, void* destination, Bytes size) final;
  Result<HostBuffer> allocate_host(Bytes size) final;
  Result<void> free_host(HostBuffer buffer) final;
  Result<void> copy_to_host(HostBuffer destination, Address source, Bytes size) final;
  Result<void> copy_to_device(Address destination, HostBuffer source, Bytes size) final;
  Result<ExportedChunk> export_chunk(ChunkId chunk) final;
  Result<ChunkId> import_chunk(int descriptor, Bytes offset, Bytes size) final;

 protected:
  PlatformDriver(std::string name, DriverCapabilities capabilities, Bytes granularity, Bytes capacity);

  virtual Result<Address> platform_reserve(Bytes size, Bytes alignment) = 0;
  virtual Result<void> platform_release_reservation(Address base, Bytes size) = 0;
  virtual Result<PlatformHandle> platform_create_chunk(Bytes size) = 0;
  virtual Result<void> platform_release_chunk(PlatformHandle handle, Bytes size) = 0;
  // Bytes [offset, offset + size) of the page; offset is 0 unless the capability partial_map is set.
  virtual Result<void> platform_map(Address at, PlatformHandle handle, Bytes offset, Bytes size) = 0;
  virtual Result<void> platform_set_access(Address at, Bytes size) = 0;
  virtual Result<void> platform_unmap(Address at, Bytes size) = 0;
  virtual Result<PlatformHandle> platform_create_event() = 0;
  virtual Result<void> platform_record_event(PlatformHandle event, StreamId stream) = 0;
  virtual Result<bool> platform_query_event(PlatformHandle event) = 0;
  virtual Result<void> platform_synchronize_event(PlatformHandle event) = 0;
  virtual Result<void> platform_destroy_event(PlatformHandle event) = 0;
  virtual Result<void> platform_synchronize_stream(StreamId stream) = 0;
  virtual Result<void> platform_synchronize_device() = 0;
  virtual Result<void> platform_write(Address at, const void* source, Bytes size);
  virtual Result<void> platform_read(Address at, void* destination, Bytes size);
  // Host buffers (capability host_backup). Copies receive a checked size, no larger than the buffer, and a
  // device range that is mapped and accessible.
  virtual Result<HostBufferRecord> platform_allocate_host(Bytes size);
  virtual Result<void> platform_free_host(const HostBufferRecord& buffer);
  virtual Result<void> platform_copy_to_host(const HostBufferRecord& destination, Address source, Bytes size);
  virtual Result<void> platform_copy_to_device(Address destination, const HostBufferRecord& source, Bytes size);
  // Sharing (capability shareable_chunks): the chunk's descriptor, and a handle over an imported one. The
  // import receives a descriptor >= 0 and a size that is a positive granule multiple; the platform checks
  // what the descriptor names.
  virtual Result<ExportedChunk> platform_export_chunk(PlatformHandle handle, Bytes size);
  virtual Result<PlatformHandle> platform_import_chunk(int descriptor, Bytes offset, Bytes size);

  void set_capacity(Bytes capacity) noexcept { capacity_ = capacity; }
  void set_granularity(Bytes granularity) noexcept { granularity_ = granularity; }

  // The ledger, read-only, for backends that reason about neighbours (the host driver's mapping count).
  const std::map<Address, MappingRecord>& mappings() const noexcept { return mappings_; }
  const std::map<Address, Bytes>& reservations() const noexcept { return reservations_; }
  const std::unordered_map<std::uint64_t, HostBufferRecord>& host_buffers() const noexcept { return host_buffers_; }
  const PageRecord* find_page(ChunkId chunk) const;

 private:
  Result<void> check_range_mapped(Address at, Bytes size, bool need_access, std::string_view what) const;
  Result<void> map_checked(Address at, ChunkId chunk, Bytes offset, std::optional<Bytes> size);
  Result<PlatformHandle> event_handle(EventId event) const;
  // The buffer a copy names, checked: host_backup present, size positive and within the buffer.
  Result<const HostBufferRecord*> copy_buffer(const HostBuffer& buffer, Bytes size, std::string_view what) const;
  Error refuse(Errc code, std::string message) const;

  std::string name_;
  DriverCapabilities capabilities_;
  Bytes granularity_;
  Bytes capacity_;

  std::map<Address, Bytes> reservations_;  // base -> size
  std::unordered_map<std::uint64_t, PageRecord> pages_;
  std::map<Address, MappingRecord> mappings_;  // address -> mapping
  std::unordered_map<std::uint64_t, PlatformHandle> events_;
  std::unordered_map<std::uint64_t, HostBufferRecord> host_buffers_;
  Bytes host_bytes_ = 0;
  std::uint64_t next_host_buffer_ = 1;
  Bytes page_bytes_ = 0;
  Bytes imported_bytes_ = 0;  // part of page_bytes_: chunks import_chunk made
  Bytes reserved_bytes_ = 0;
  Bytes mapped_bytes_ = 0;
  std::uint64_t next_page_ = 1;
  std::uint64_t next_event_ = 1;
};

}  // namespace tessera::detail
