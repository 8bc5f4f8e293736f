#include "driver/platform_driver.hpp"

#include <fmt/format.h>
#include <limits>

namespace tessera::detail {

namespace {

std::string hex(Address address) { return fmt::format("{:#x}", address); }

std::uint64_t raw(ChunkId page) { return static_cast<std::uint64_t>(page); }
std::uint64_t raw(EventId event) { return static_cast<std::uint64_t>(event); }

}  // namespace

PlatformDriver::PlatformDriver(std::string name, DriverCapabilities capabilities, Bytes granularity,
                               Bytes capacity)
    : name_(std::move(name)), capabilities_(capabilities), granularity_(granularity), capacity_(capacity) {}

Error CreatorProcess::forked_child_error(std::string_view driver) const {
  return make_error(Errc::unavailable,
                    fmt::format("{} driver: this process ({}) is a fork() of the process that opened the device "
                                "({}), and a device context does not survive fork(); start worker processes "
                                "with the 'spawn' method, or open the device in the child",
                                driver, getpid(), pid_));
}

Error PlatformDriver::refuse(Errc code, std::string message) const {
  return make_error(code, fmt::format("{} driver: {}", name_, message));
}

DriverCensus PlatformDriver::census() const {
  return DriverCensus{.reservations = reservations_.size(),
                      .reserved_bytes = reserved_bytes_,
                      .pages = pages_.size(),
                      .page_bytes = page_bytes_,
                      .mappings = mappings_.size(),
                      .mapped_bytes = mapped_bytes_,
                      .events = events_.size(),
                      .host_buffers = host_buffers_.size(),
                      .host_bytes = host_bytes_};
}

const PageRecord* PlatformDriver::find_page(ChunkId page) const {
  auto found = pages_.find(raw(page));
  return found == pages_.end() ? nullptr : &found->second;
}

Result<Address> PlatformDriver::reserve(Bytes size, Bytes alignment) {
  if (size == 0 || !is_aligned(size, granularity_)) {
    return refuse(Errc::invalid_argument,
                  fmt::format("reserve size {} is not a positive multiple of the granule {}", size, granularity_));
  }
  if (alignment == 0) alignment = granularity_;
  if (!is_power_of_two(alignment) || alignment < granularity_) {
    return refuse(Errc::invalid_argument,
                  fmt::format("reserve alignment {} is not a power of two of at least the granule {}", alignment,
                              granularity_));
  }
  auto base = platform_reserve(size, alignment);
  if (!base) return base;
  reservations_.emplace(*base, size);
  reserved_bytes_ += size;
  return base;
}

Result<void> PlatformDriver::release_reservation(Address base) {
  auto found = reservations_.find(base);
  if (found == reservations_.end()) {
    return refuse(Errc::not_found, fmt::format("no reservation starts at {}", hex(base)));
  }
  const Bytes size = found->second;
  auto inside = mappings_.lower_bound(base);
  if (inside != mappings_.end() && inside->first < base + size) {
    return refuse(Errc::still_mapped, fmt::format("reservation {} (+{}) still has a mapping at {}", hex(base), size,
                                                  hex(inside->first)));
  }
  if (auto done = platform_release_reservation(base, size); !done) return done;
  reservations_.erase(found);
  reserved_bytes_ -= size;
  return {};
}

Result<ChunkId> PlatformDriver::create_chunk(Bytes size) {
  if (size == 0 || !is_aligned(size, granularity_)) {
    return refuse(Errc::invalid_argument,
                  fmt::format("page size {} is not a positive multiple of the granule {}", size, granularity_));
  }
  const Bytes own_bytes = page_bytes_ - imported_bytes_;
  if (size > capacity_ || own_bytes > capacity_ - size) {
    return refuse(Errc::out_of_memory, fmt::format("cannot create a page of {} bytes: {} of {} bytes are in use",
                                                   size, own_bytes, capacity_));
  }
  auto handle = platform_create_chunk(size);
  if (!handle) return std::move(handle).error();
  const ChunkId page{next_page_++};
  pages_.emplace(raw(page), PageRecord{.handle = *handle, .size = size, .mappings = 0, .imported = false, .parts = {}});
  page_bytes_ += size;
  return page;
}

Result<void> PlatformDriver::release_chunk(ChunkId page) {
  auto found = pages_.find(raw(page));
  if (found == pages_.end()) return refuse(Errc::not_found, fmt::format("no page {}", raw(page)));
  if (found->second.mappings != 0) {
    return refuse(Errc::still_mapped,
                  fmt::format("page {} still has {} mapping(s)", raw(page), found->second.mappings));
  }
  if (auto done = platform_release_chunk(found->second.handle, found->second.size); !done) return done;
  page_bytes_ -= found->second.size;
  if (found->second.imported) imported_bytes_ -= found->second.size;
  pages_.erase(found);
  return {};
}

Result<void> PlatformDriver::map(Address at, ChunkId page) { return map_checked(at, page, 0, std::nullopt); }

Result<void> PlatformDriver::map_part(Address at, ChunkId page, Bytes offset, Bytes size) {
  if (!capabilities_.partial_map) {
    return refuse(Errc::unsupported, "map_part: this driver maps whole pages only (capability partial_map)");
  }
  return map_checked(at, page, offset, size);
}

// size: nullopt for the whole page.
Result<void> PlatformDriver::map_checked(Address at, ChunkId page, Bytes offset, std::optional<Bytes> part) {
  auto found = pages_.find(raw(page));
  if (found == pages_.end()) return refuse(Errc::not_found, fmt::format("no page {}", raw(page)));
  PageRecord& record = found->second;
  const Bytes size = part.value_or(record.size);
  if (!is_aligned(at, granularity_)) {
    return refuse(Errc::invalid_argument,
                  fmt::format("map address {} is not aligned to the granule {}", hex(at), granularity_));
  }
  if (part && (size == 0 || !is_aligned(offset, granularity_) || !is_aligned(size, granularity_) ||
               offset > record.size || size > record.size - offset)) {
    return refuse(Errc::invalid_argument,
                  fmt::format("map_part of bytes {} + {} of page {} ({} bytes): not granule multiples inside the page",
                              offset, size, raw(page), record.size));
  }
  if (!capabilities_.page_multi_mapping && record.mappings > 0) {
    auto after = record.parts.lower_bound(offset);
    const bool overlaps = (after != record.parts.end() && after->first < offset + size) ||
                          (after != record.parts.begin() && std::prev(after)->first + std::prev(after)->second > offset);
    if (overlaps) {
      return refuse(Errc::already_mapped, fmt::format("page {} (bytes {} + {}) is already mapped and this driver maps "
                                                      "a page at one address only",
                                                      raw(page), offset, size));
    }
  }
  auto reservation = reservations_.upper_bound(at);
  if (reservation == reservations_.begin() || std::prev(reservation)->first + std::prev(reservation)->second <
                                                  at + size) {
    return refuse(Errc::invalid_argument,
                  fmt::format("map of {} bytes at {} does not lie inside one reservation", size, hex(at)));
  }
  auto next = mappings_.lower_bound(at);
  if (next != mappings_.end() && next->first < at + size) {
    return refuse(Errc::already_mapped, fmt::format("address {} is already mapped", hex(next->first)));
  }
  if (next != mappings_.begin()) {
    auto previous = std::prev(next);
    if (previous->first + previous->second.size > at) {
      return refuse(Errc::already_mapped,
                    fmt::format("map at {} overlaps the mapping at {}", hex(at), hex(previous->first)));
    }
  }
  if (auto done = platform_map(at, record.handle, offset, size); !done) return done;
  mappings_.emplace_hint(next, at, MappingRecord{.page = page, .offset = offset, .size = size, .accessible = false});
  record.mappings += 1;
  if (!capabilities_.page_multi_mapping) record.parts.emplace(offset, size);
  mapped_bytes_ += size;
  return {};
}

Result<void> PlatformDriver::check_range_mapped(Address at, Bytes size, bool need_access,
                                                std::string_view what) const {
  if (size == 0) return refuse(Errc::invalid_argument, fmt::format("{} of 0 bytes at {}", what, hex(at)));
  if (at > std::numeric_limits<Address>::max() - size) {
    return refuse(Errc::invalid_argument, fmt::format("{} range at {} + {} wraps around", what, hex(at), size));
  }
  auto mapping = mappings_.upper_bound(at);
  if (mapping == mappings_.begin()) {
    return refuse(Errc::not_mapped, fmt::format("{}: {} is not mapped", what, hex(at)));
  }
  --mapping;
  Address covered = at;
  const Address end = at + size;
  while (covered < end) {
    if (mapping == mappings_.end() || mapping->first > covered ||
        mapping->first + mapping->second.size <= covered) {
      return refuse(Errc::not_mapped, fmt::format("{}: {} is not mapped", what, hex(covered)));
    }
    if (need_access && !mapping->second.accessible) {
      return refuse(Errc::not_mapped,
                    fmt::format("{}: the mapping at {} has no access set", what, hex(mapping->first)));
    }
    covered = mapping->first + mapping->second.size;
    ++mapping;
  }
  return {};
}

Result<void> PlatformDriver::set_access(Address at, Bytes size) {
  if (auto mapped = check_range_mapped(at, size, false, "set_access"); !mapped) return mapped;
  if (!is_aligned(at, granularity_) || !is_aligned(size, granularity_)) {
    return refuse(Errc::invalid_argument,
                  fmt::format("set_access range {} + {} is not granule-aligned", hex(at), size));
  }
  if (auto done = platform_set_access(at, size); !done) return done;
  for (auto mapping = std::prev(mappings_.upper_bound(at)); mapping != mappings_.end() && mapping->first < at + size;
       ++mapping) {
    mapping->second.accessible = true;
  }
  return {};
}

Result<void> PlatformDriver::unmap(Address at) {
  auto found = mappings_.find(at);
  if (found == mappings_.end()) return refuse(Errc::not_mapped, fmt::format("no mapping starts at {}", hex(at)));
  if (auto done = platform_unmap(at, found->second.size); !done) return done;
  PageRecord& page = pages_.at(raw(found->second.page));
  page.mappings -= 1;
  if (!capabilities_.page_multi_mapping) page.parts.erase(found->second.offset);
  mapped_bytes_ -= found->second.size;
  mappings_.erase(found);
  return {};
}

Result<PlatformHandle> PlatformDriver::event_handle(EventId event) const {
  auto found = events_.find(raw(event));
  if (found == events_.end()) return refuse(Errc::not_found, fmt::format("no event {}", raw(event)));
  return found->second;
}

Result<EventId> PlatformDriver::create_event() {
  auto handle = platform_create_event();
  if (!handle) return std::move(handle).error();
  const EventId event{next_event_++};
  events_.emplace(raw(event), *handle);
  return event;
}

Result<void> PlatformDriver::record_event(EventId event, StreamId stream) {
  auto handle = event_handle(event);
  if (!handle) return std::move(handle).error();
  return platform_record_event(*handle, stream);
}

Result<bool> PlatformDriver::query_event(EventId event) {
  auto handle = event_handle(event);
  if (!handle) return std::move(handle).error();
  return platform_query_event(*handle);
}

Result<void> PlatformDriver::synchronize_event(EventId event) {
  auto handle = event_handle(event);
  if (!handle) return std::move(handle).error();
  return platform_synchronize_event(*handle);
}

Result<void> PlatformDriver::destroy_event(EventId event) {
  auto handle = event_handle(event);
  if (!handle) return std::move(handle).error();
  if (auto done = platform_destroy_event(*handle); !done) return done;
  events_.erase(raw(event));
  return {};
}

Result<void> PlatformDriver::synchronize_stream(StreamId stream) { return platform_synchronize_stream(stream); }

Result<void> PlatformDriver::synchronize_device() { return platform_synchronize_device(); }

Result<void> PlatformDriver::write(Address at, const void* source, Bytes size) {
  if (!capabilities_.data_access) return refuse(Errc::unsupported, "no data access (capability data_access)");
  if (auto mapped = check_range_mapped(at, size, capabilities_.needs_set_access, "write"); !mapped) return mapped;
  return platform_write(at, source, size);
}

Result<void> PlatformDriver::read(Address at, void* destination, Bytes size) {
  if (!capabilities_.data_access) return refuse(Errc::unsupported, "no data access (capability data_access)");
  if (auto mapped = check_range_mapped(at, size, capabilities_.needs_set_access, "read"); !mapped) return mapped;
  return platform_read(at, destination, size);
}

Result<HostBuffer> PlatformDriver::allocate_host(Bytes size) {
  if (!capabilities_.host_backup) return refuse(Errc::unsupported, "no host buffers (capability host_backup)");
  if (size == 0) return refuse(Errc::invalid_argument, "allocate_host of 0 bytes");
  auto made = platform_allocate_host(size);
  if (!made) return std::move(made).error();
  const std::uint64_t id = next_host_buffer_++;
  made->size = size;
  host_buffers_.emplace(id, *made);
  host_bytes_ += size;
  return HostBuffer{.id = id, .data = made->data, .size = size};
}

Result<void> PlatformDriver::free_host(HostBuffer buffer) {
  if (!capabilities_.host_backup) return refuse(Errc::unsupported, "no host buffers (capability host_backup)");
  auto found = host_buffers_.find(buffer.id);
  if (found == host_buffers_.end()) return refuse(Errc::not_found, fmt::format("no host buffer {}", buffer.id));
  if (auto done = platform_free_host(found->second); !done) return done;
  host_bytes_ -= found->second.size;
  host_buffers_.erase(found);
  return {};
}

Result<const HostBufferRecord*> PlatformDriver::copy_buffer(const HostBuffer& buffer, Bytes size,
                                                             std::string_view what) const {
  if (!capabilities_.host_backup) return refuse(Errc::unsupported, "no host buffers (capability host_backup)");
  if (size == 0) return refuse(Errc::invalid_argument, fmt::format("{} of 0 bytes", what));
  auto found = host_buffers_.find(buffer.id);
  if (found == host_buffers_.end()) {
    return refuse(Errc::not_found, fmt::format("{}: no host buffer {}", what, buffer.id));
  }
  if (size > found->second.size) {
    return refuse(Errc::invalid_argument, fmt::format("{} of {} bytes: host buffer {} holds {}", what, size,
                                                      buffer.id, found->second.size));
  }
  return &found->second;
}

Result<void> PlatformDriver::copy_to_host(HostBuffer destination, Address source, Bytes size) {
  auto record = copy_buffer(destination, size, "copy_to_host");
  if (!record) return std::move(record).error();
  if (auto mapped = check_range_mapped(source, size, capabilities_.needs_set_access, "copy_to_host"); !mapped) {
    return mapped;
  }
  return platform_copy_to_host(**record, source, size);
}

Result<void> PlatformDriver::copy_to_device(Address destination, HostBuffer source, Bytes size) {
  auto record = copy_buffer(source, size, "copy_to_device");
  if (!record) return std::move(record).error();
  if (auto mapped = check_range_mapped(destination, size, capabilities_.needs_set_access, "copy_to_device");
      !mapped) {
    return mapped;
  }
  return platform_copy_to_device(destination, **record, size);
}

Result<ExportedChunk> PlatformDriver::export_chunk(ChunkId page) {
  if (!capabilities_.shareable_chunks) {
    return refuse(Errc::unsupported, "export_chunk: this driver cannot share chunks (capability shareable_chunks)");
  }
  auto found = pages_.find(raw(page));
  if (found == pages_.end()) return refuse(Errc::not_found, fmt::format("export_chunk: no page {}", raw(page)));
  auto exported = platform_export_chunk(found->second.handle, found->second.size);
  if (!exported) return exported;
  exported->size = found->second.size;
  return exported;
}

Result<ChunkId> PlatformDriver::import_chunk(int descriptor, Bytes offset, Bytes size) {
  if (!capabilities_.shareable_chunks) {
    return refuse(Errc::unsupported, "import_chunk: this driver cannot share chunks (capability shareable_chunks)");
  }
  if (descriptor < 0) {
    return refuse(Errc::invalid_argument, fmt::format("import_chunk: descriptor {} is not a file descriptor", descriptor));
  }
  if (size == 0 || !is_aligned(size, granularity_) || !is_aligned(offset, granularity_)) {
    return refuse(Errc::invalid_argument,
                  fmt::format("import_chunk of {} bytes at offset {}: not granule multiples (the granule is {}; "
                              "was the chunk exported by a driver of another granule?)",
                              size, offset, granularity_));
  }
  auto handle = platform_import_chunk(descriptor, offset, size);
  if (!handle) return std::move(handle).error();
  const ChunkId page{next_page_++};
  pages_.emplace(raw(page), PageRecord{.handle = *handle, .size = size, .mappings = 0, .imported = true, .parts = {}});
  page_bytes_ += size;
  imported_bytes_ += size;
  return page;
}

Result<ExportedChunk> PlatformDriver::platform_export_chunk(PlatformHandle, Bytes) {
  return refuse(Errc::unsupported, "export_chunk is not implemented");
}

Result<PlatformHandle> PlatformDriver::platform_import_chunk(int, Bytes, Bytes) {
  return refuse(Errc::unsupported, "import_chunk is not implemented");
}

Result<HostBufferRecord> PlatformDriver::platform_allocate_host(Bytes) {
  return refuse(Errc::unsupported, "allocate_host is not implemented");
}

Result<void> PlatformDriver::platform_free_host(const HostBufferRecord&) {
  return refuse(Errc::unsupported, "free_host is not implemented");
}

Result<void> PlatformDriver::platform_copy_to_host(const HostBufferRecord&, Address, Bytes) {
  return refuse(Errc::unsupported, "copy_to_host is not implemented");
}

Result<void> PlatformDriver::platform_copy_to_device(Address, const HostBufferRecord&, Bytes) {
  return refuse(Errc::unsupported, "copy_to_device is not implemented");
}

Result<void> PlatformDriver::platform_write(Address, const void*, Bytes) {
  return refuse(Errc::unsupported, "write is not implemented");
}

Result<void> PlatformDriver::platform_read(Address, void*, Bytes) {
  return refuse(Errc::unsupported, "read is not implemented");
}

}  // namespace tessera::detail
