// host: real virtual memory on Linux, the way ZGC runs its heap. A memfd is the device's physical memory;
// a page is a range of it; a reservation is a PROT_NONE anonymous mmap; map is a MAP_FIXED|MAP_SHARED mmap
// of the page's range into the reservation; unmap puts PROT_NONE anonymous memory back; releasing a page
// punches a hole in the memfd so the kernel frees it. Because the data lives in the memfd, bytes written
// through one mapping are there after the page is unmapped and mapped elsewhere — what every test uses to
// prove that remapping never corrupts live data, without an accelerator.
//
// Kernel mappings: each mapping of a non-adjacent memfd range costs one or two entries against
// vm.max_map_count (65530 by default); mappings of adjacent offsets at adjacent addresses merge into one.
// Pages are therefore carved next-fit from the memfd, so that pages created one after another are
// adjacent and merge when the allocator maps them side by side. Near the limit the driver counts the real
// entries, and at the limit it refuses with Errc::map_limit naming the sysctl. Counting reads all of
// /proc/self/maps, so a count buys a budget: the room it showed, spent two entries a call (what one map or
// unmap can add at most) before the next count — a handful of counts between 90% and the limit, not one
// per call.
//
// Sharing (HostDriverOptions::shareable_chunks): each chunk is then a memfd of its own, named by a handle with
// chunk_file_bit set; export_chunk answers a duplicate of its descriptor, import_chunk keeps a duplicate of the
// importer's and maps it at the offset given. The kernel frees a chunk's memory once no descriptor and no
// mapping of it is left in any process — CUDA's rule for an exported allocation.
//
// fork(): the memfd is shared, so a child would write the parent's pages. Before the fork the driver copies
// the memfd (its data only: holes stay holes), and the child maps everything it has mapped from the copy:
// child and parent then share nothing, and the child sees the memory as it was when fork() was called.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "driver/platform_driver.hpp"
#include "driver/simulated_streams.hpp"
#include "support/fork_guard.hpp"
#include "tessera/drivers.hpp"

namespace tessera {

namespace {

using detail::PlatformHandle;

constexpr int read_write = PROT_READ | PROT_WRITE;
constexpr PlatformHandle chunk_file_bit = PlatformHandle{1} << 63;  // a chunk that is a file of its own

// What a descriptor names, for messages: the target of its /proc/self/fd link ("/memfd:NAME (deleted)").
std::string descriptor_target(int descriptor) {
  std::string path = fmt::format("/proc/self/fd/{}", descriptor);
  std::array<char, 512> target{};
  const ssize_t length = readlink(path.c_str(), target.data(), target.size() - 1);
  return length < 0 ? std::string("nothing readable") : std::string(target.data(), static_cast<std::size_t>(length));
}
constexpr int anonymous_none = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;

void* to_pointer(Address address) { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(address)); }
Address to_address(const void* pointer) { return reinterpret_cast<std::uintptr_t>(pointer); }

Error errno_error(Errc code, std::string_view call, int error_number, std::string detail = {}) {
  return make_error(code,
                    fmt::format("host driver: {} failed: {}{}", call, std::strerror(error_number),
                                detail.empty() ? "" : "; " + detail),
                    error_number);
}

std::size_t read_kernel_map_limit() {
  std::ifstream limit("/proc/sys/vm/max_map_count");
  std::size_t value = 0;
  if (limit >> value) return value;
  return 65530;  // the kernel's default, when /proc is not readable
}

std::size_t count_process_mappings() {
  std::ifstream maps("/proc/self/maps");
  std::size_t lines = 0;
  std::string line;
  while (std::getline(maps, line)) ++lines;
  return lines;
}

// Ranges of the memfd not used by any page, carved next-fit.
class MemfdSpace {
 public:
  explicit MemfdSpace(Bytes size) { free_.emplace(0, size); }

  std::optional<Bytes> take(Bytes size) {
    auto take_from = [&](std::map<Bytes, Bytes>::iterator range) {
      const Bytes offset = range->first;
      const Bytes length = range->second;
      free_.erase(range);
      if (length > size) free_.emplace(offset + size, length - size);
      cursor_ = offset + size;
      return offset;
    };
    // The range holding the cursor, then every range after it, then from the start.
    auto start = free_.upper_bound(cursor_);
    if (start != free_.begin()) {
      auto holding = std::prev(start);
      if (holding->first + holding->second > cursor_ && holding->first + holding->second - cursor_ >= size) {
        // Split so that the page starts at the cursor, next to the page created before it.
        const Bytes before = cursor_ - holding->first;
        const Bytes offset = holding->first;
        const Bytes length = holding->second;
        free_.erase(holding);
        if (before > 0) free_.emplace(offset, before);
        auto rest = free_.emplace(cursor_, length - before).first;
        return take_from(rest);
      }
    }
    for (auto range = start; range != free_.end(); ++range) {
      if (range->second >= size) return take_from(range);
    }
    for (auto range = free_.begin(); range != start; ++range) {
      if (range->second >= size) return take_from(range);
    }
    return std::nullopt;
  }

  void give_back(Bytes offset, Bytes size) {
    auto inserted = free_.emplace(offset, size).first;
    auto next = std::next(inserted);
    if (next != free_.end() && inserted->first + inserted->second == next->first) {
      inserted->second += next->second;
      free_.erase(next);
    }
    if (inserted != free_.begin()) {
      auto previous = std::prev(inserted);
      if (previous->first + previous->second == inserted->first) {
        previous->second += inserted->second;
        free_.erase(inserted);
      }
    }
  }

 private:
  std::map<Bytes, Bytes> free_;  // offset -> length
  Bytes cursor_ = 0;
};

// A copy of the memfd's data ranges into a new memfd of the same size (holes stay holes); -1 and errno on
// failure.
int copy_memfd(int memfd, Bytes size) {
  const int copy = memfd_create("tessera-host-device", MFD_CLOEXEC);
  if (copy < 0) return -1;
  auto fail = [&] {
    const int error_number = errno;
    close(copy);
    errno = error_number;
    return -1;
  };
  if (ftruncate(copy, static_cast<off_t>(size)) != 0) return fail();
  std::vector<char> buffer;  // where copy_file_range cannot copy between the two files
  off_t data = 0;
  while (static_cast<Bytes>(data) < size) {
    data = lseek(memfd, data, SEEK_DATA);
    if (data < 0) {
      if (errno == ENXIO) break;  // no data after this offset
      return fail();
    }
    const off_t hole = lseek(memfd, data, SEEK_HOLE);
    if (hole < 0) return fail();
    while (data < hole) {
      const auto length = static_cast<std::size_t>(hole - data);
      off_t in = data;
      off_t out = data;
      ssize_t copied = copy_file_range(memfd, &in, copy, &out, length, 0);
      if (copied <= 0) {
        buffer.resize(std::size_t{1} << 20);
        copied = pread(memfd, buffer.data(), std::min(buffer.size(), length), data);
        if (copied == 0) errno = EIO;
        if (copied <= 0 || pwrite(copy, buffer.data(), static_cast<std::size_t>(copied), data) != copied) return fail();
      }
      data += copied;
    }
  }
  return copy;
}

class HostDriver final : public detail::PlatformDriver, private detail::ForkMember {
 public:
  HostDriver(const HostDriverOptions& options, int memfd, Bytes memfd_size)
      : PlatformDriver("host",
                       DriverCapabilities{.needs_set_access = options.require_set_access,
                                          .page_multi_mapping = true,
                                          .data_access = true,
                                          .host_pointers = true,
                                          .asynchronous = false,
                                          .partial_map = true,
                                          .survives_fork = !options.shareable_chunks,
                                          .host_backup = true,
                                          .shareable_chunks = options.shareable_chunks,
                                          .reusable_events = true},
                       options.granularity, options.capacity),
        memfd_(memfd),
        memfd_size_(memfd_size),
        space_(memfd_size),
        count_mappings_(options.count_mappings ? options.count_mappings : count_process_mappings),
        map_limit_(options.max_map_count != 0 ? options.max_map_count : read_kernel_map_limit()),
        mappings_at_start_(count_mappings_()),
        fork_membership_(*this, detail::ForkRank::driver) {}

  ~HostDriver() override {
    detail::leave_fork_guard(*this);  // first: a fork from now on must not copy a memfd being closed
    // Whatever the caller leaked goes with the driver: the memfd and every range still mapped from it.
    for (const auto& [address, mapping] : mappings()) munmap(to_pointer(address), mapping.size);
    for (const auto& [base, size] : reservations()) munmap(to_pointer(base), size);
    for (const auto& [id, buffer] : host_buffers()) munmap(buffer.data, buffer.size);
    for (const auto& [handle, file] : files_) close(file.descriptor);
    close(memfd_);
  }

  HostDriver(const HostDriver&) = delete;
  HostDriver& operator=(const HostDriver&) = delete;

  StreamControl* stream_control() noexcept override { return &streams_; }

 protected:
  Result<Address> platform_reserve(Bytes size, Bytes alignment) override {
    void* raw = mmap(nullptr, size + alignment, PROT_NONE, anonymous_none, -1, 0);
    if (raw == MAP_FAILED) {
      return errno_error(Errc::out_of_memory, "mmap (reserve)", errno, "no virtual address space left");
    }
    const Address start = to_address(raw);
    const Address base = align_up(start, alignment);
    if (base > start) munmap(raw, base - start);
    const Address end = start + size + alignment;
    if (end > base + size) munmap(to_pointer(base + size), end - (base + size));
    return base;
  }

  Result<void> platform_release_reservation(Address base, Bytes size) override {
    if (munmap(to_pointer(base), size) != 0) return errno_error(Errc::platform, "munmap (release_reservation)", errno);
    return {};
  }

  Result<PlatformHandle> platform_create_chunk(Bytes size) override {
    if (!fork_copy_failed_.empty()) return make_error(Errc::unavailable, fork_copy_failed_);
    if (capabilities().shareable_chunks) {
      const int file = memfd_create("tessera-host-chunk", MFD_CLOEXEC);
      if (file < 0) return errno_error(Errc::out_of_memory, "memfd_create (create_chunk)", errno);
      if (ftruncate(file, static_cast<off_t>(size)) != 0) {
        const int error_number = errno;
        close(file);
        return errno_error(Errc::out_of_memory, "ftruncate (create_chunk)", error_number);
      }
      return add_file(file, 0);
    }
    auto offset = space_.take(size);
    if (!offset) {
      return make_error(Errc::out_of_memory,
                        fmt::format("host driver: no contiguous range of {} bytes left in the memfd", size));
    }
    return PlatformHandle{*offset};
  }

  Result<void> platform_release_chunk(PlatformHandle offset, Bytes size) override {
    if ((offset & chunk_file_bit) != 0) {
      // Closing is all: the memory goes once no other process holds a descriptor or a mapping of it.
      auto file = files_.find(offset);
      close(file->second.descriptor);
      files_.erase(file);
      return {};
    }
    if (fallocate(memfd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
                  static_cast<off_t>(size)) != 0) {
      return errno_error(Errc::platform, "fallocate (release_chunk)", errno);
    }
    space_.give_back(offset, size);
    return {};
  }

  Result<void> platform_map(Address at, PlatformHandle page_offset, Bytes offset, Bytes size) override {
    if (!fork_copy_failed_.empty()) return make_error(Errc::unavailable, fork_copy_failed_);
    if (auto room = check_map_limit(); !room) return room;
    const int protection = capabilities().needs_set_access ? PROT_NONE : read_write;
    const auto [from, start] = backing(page_offset);
    void* mapped = mmap(to_pointer(at), size, protection, MAP_SHARED | MAP_FIXED, from, static_cast<off_t>(start + offset));
    if (mapped == MAP_FAILED) {
      const int error_number = errno;
      // A failed MAP_FIXED may have removed what was there: put the reservation's PROT_NONE back.
      mmap(to_pointer(at), size, PROT_NONE, anonymous_none | MAP_FIXED, -1, 0);
      if (error_number == ENOMEM) return map_limit_error(count_mappings_());
      return errno_error(Errc::platform, "mmap (map)", error_number);
    }
    return {};
  }

  Result<void> platform_set_access(Address at, Bytes size) override {
    if (mprotect(to_pointer(at), size, read_write) != 0) return errno_error(Errc::platform, "mprotect (set_access)", errno);
    return {};
  }

  Result<void> platform_unmap(Address at, Bytes size) override {
    spend_map_budget();  // putting PROT_NONE inside a merged mapping splits it: up to two entries more
    if (mmap(to_pointer(at), size, PROT_NONE, anonymous_none | MAP_FIXED, -1, 0) == MAP_FAILED) {
      const int error_number = errno;
      if (error_number == ENOMEM) return map_limit_error(count_mappings_());
      return errno_error(Errc::platform, "mmap (unmap)", error_number);
    }
    return {};
  }

  Result<PlatformHandle> platform_create_event() override { return streams_.create_event(); }
  Result<void> platform_record_event(PlatformHandle event, StreamId stream) override {
    streams_.record(event, stream);
    return {};
  }
  Result<bool> platform_query_event(PlatformHandle event) override { return streams_.query(event); }
  Result<void> platform_synchronize_event(PlatformHandle event) override {
    streams_.synchronize_event(event);
    return {};
  }
  Result<void> platform_destroy_event(PlatformHandle event) override {
    streams_.destroy_event(event);
    return {};
  }
  Result<void> platform_synchronize_stream(StreamId stream) override {
    streams_.synchronize_stream(stream);
    return {};
  }
  Result<void> platform_synchronize_device() override {
    streams_.synchronize_all();
    return {};
  }

  Result<void> platform_write(Address at, const void* source, Bytes size) override {
    std::memcpy(to_pointer(at), source, size);
    return {};
  }

  Result<void> platform_read(Address at, void* destination, Bytes size) override {
    std::memcpy(destination, to_pointer(at), size);
    return {};
  }

  // Host buffers: anonymous memory of their own, locked with mlock() where RLIMIT_MEMLOCK allows — the
  // stand-in for pinned memory. Locking is best effort (an unprivileged process may lock a few MiB
  // only); an unlocked buffer works the same, the kernel may merely page it out. A child of fork() keeps a
  // private copy of every buffer (not locked: locks are not inherited), as it keeps the device's memory.
  Result<detail::HostBufferRecord> platform_allocate_host(Bytes size) override {
    void* data = mmap(nullptr, size, read_write, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (data == MAP_FAILED) {
      return errno_error(Errc::out_of_memory, "mmap (allocate_host)", errno,
                         fmt::format("no host memory for a buffer of {} bytes", size));
    }
    (void)madvise(data, size, MADV_HUGEPAGE);
    return detail::HostBufferRecord{.handle = to_address(data), .data = data, .size = size};
  }

  Result<void> platform_free_host(const detail::HostBufferRecord& buffer) override {
    if (munmap(buffer.data, buffer.size) != 0) return errno_error(Errc::platform, "munmap (free_host)", errno);
    return {};
  }

  // A backup writes every byte of its destination, most often memory never touched since it was created: its
  // pages are made present in one call (MADV_POPULATE_WRITE, Linux 5.14) rather than one fault each, as a
  // DMA engine would find them. Best effort: an older kernel takes the faults.
  static void populate(void* at, Bytes size) {
    const auto page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
    const auto start = reinterpret_cast<std::uintptr_t>(at) & ~(page - 1);
    const auto end = (reinterpret_cast<std::uintptr_t>(at) + size + page - 1) & ~(page - 1);
    (void)madvise(reinterpret_cast<void*>(start), end - start, MADV_POPULATE_WRITE);
  }

  // Both copies go through the memfd itself, mapping by mapping, as a copy engine works on physical memory: a
  // read of device memory mapped again since the last pause would otherwise take a page fault per few pages
  // of the mapping, and a restore most often fills pages created since the pause, which a write of whole pages
  // into the file lets the kernel skip zeroing first.
  Result<void> platform_copy_to_host(const detail::HostBufferRecord& destination, Address source,
                                     Bytes size) override {
    populate(destination.data, size);
    if (!fork_copy_failed_.empty()) {  // the memfd is the parent's: only the private mappings are this process's
      std::memcpy(destination.data, to_pointer(source), size);
      return {};
    }
    auto* to = static_cast<char*>(destination.data);
    return for_each_piece(source, size, "copy_to_host", [&](int file, off_t offset, Bytes piece) -> Result<void> {
      while (piece > 0) {
        const ssize_t read = pread(file, to, piece, offset);
        if (read <= 0) {
          if (read < 0 && errno == EINTR) continue;
          return errno_error(Errc::platform, "pread (copy_to_host)", read < 0 ? errno : EIO);
        }
        to += read;
        offset += read;
        piece -= static_cast<Bytes>(read);
      }
      return {};
    });
  }

  Result<void> platform_copy_to_device(Address destination, const detail::HostBufferRecord& source,
                                       Bytes size) override {
    if (!fork_copy_failed_.empty()) {
      std::memcpy(to_pointer(destination), source.data, size);
      return {};
    }
    const auto* from = static_cast<const char*>(source.data);
    return for_each_piece(destination, size, "copy_to_device", [&](int file, off_t offset, Bytes piece) -> Result<void> {
      while (piece > 0) {
        const ssize_t written = pwrite(file, from, piece, offset);
        if (written < 0) {
          if (errno == EINTR) continue;
          return errno_error(Errc::platform, "pwrite (copy_to_device)", errno);
        }
        from += written;
        offset += written;
        piece -= static_cast<Bytes>(written);
      }
      return {};
    });
  }

 private:
  // The file a chunk's handle names and where the chunk starts in it.
  std::pair<int, Bytes> backing(PlatformHandle handle) const {
    if ((handle & chunk_file_bit) == 0) return {memfd_, handle};
    const ChunkFile& file = files_.at(handle);
    return {file.descriptor, file.offset};
  }

  PlatformHandle add_file(int descriptor, Bytes offset) {
    const PlatformHandle handle = chunk_file_bit | next_file_++;
    files_.emplace(handle, ChunkFile{descriptor, offset});
    return handle;
  }

  // Calls copy(file, offset in it, bytes) for each piece of [at, at + size) under one mapping, in order.
  template <class Copy>
  Result<void> for_each_piece(Address at, Bytes size, std::string_view call, Copy&& copy) {
    const Address end = at + size;
    auto mapping = mappings().upper_bound(at);
    if (mapping != mappings().begin()) --mapping;
    for (; at < end; ++mapping) {
      if (mapping == mappings().end() || mapping->first > at) {
        return make_error(Errc::not_mapped, fmt::format("{}: {:#x} is not mapped", call, at));
      }
      const detail::MappingRecord& record = mapping->second;
      const Address mapping_end = mapping->first + record.size;
      if (mapping_end <= at) continue;
      const detail::PageRecord* page = find_page(record.page);
      if (page == nullptr) return make_error(Errc::not_found, fmt::format("{}: a mapping of an unknown page", call));
      const Bytes piece = std::min(end, mapping_end) - at;
      const auto [file, start] = backing(page->handle);
      if (auto done = copy(file, static_cast<off_t>(start + record.offset + (at - mapping->first)), piece); !done) {
        return done;
      }
      at += piece;
    }
    return {};
  }

  static constexpr std::size_t entries_per_call = 2;  // the most one map or unmap adds to the kernel's count

  // Cheap upper bound first (every mapping and reservation costing two entries); near the limit, the budget
  // of the last real count, and a new count only when it is spent.
  Result<void> check_map_limit() {
    const std::size_t bound = mappings_at_start_ + entries_per_call * (mappings().size() + 1) +
                              entries_per_call * reservations().size();
    if (bound * 10 < map_limit_ * 9) return {};
    if (map_budget_ >= entries_per_call) {
      map_budget_ -= entries_per_call;
      return {};
    }
    const std::size_t now = count_mappings_();
    if (now + entries_per_call > map_limit_) return map_limit_error(now);
    map_budget_ = map_limit_ - now - entries_per_call;
    return {};
  }

  void spend_map_budget() noexcept { map_budget_ -= std::min(map_budget_, entries_per_call); }

  Error map_limit_error(std::size_t now) const {
    return make_error(Errc::map_limit,
                      fmt::format("host driver: the kernel's mapping limit is reached ({} mappings, "
                                  "vm.max_map_count = {}); raise it with `sysctl -w vm.max_map_count=N`, "
                                  "or use a larger granule so that fewer pages are mapped",
                                  now, map_limit_),
                      ENOMEM);
  }

  Result<ExportedChunk> platform_export_chunk(PlatformHandle handle, Bytes /*size*/) override {
    if ((handle & chunk_file_bit) == 0) {
      return make_error(Errc::unsupported, "host driver: export_chunk of a chunk made before sharing was on");
    }
    const ChunkFile& file = files_.at(handle);
    const int copy = fcntl(file.descriptor, F_DUPFD_CLOEXEC, 0);
    if (copy < 0) return errno_error(Errc::platform, "fcntl F_DUPFD_CLOEXEC (export_chunk)", errno);
    return ExportedChunk{.descriptor = copy, .offset = file.offset, .size = 0};
  }

  // The descriptor must name a memfd holding the whole chunk: anything else is refused before it is mapped.
  Result<PlatformHandle> platform_import_chunk(int descriptor, Bytes offset, Bytes size) override {
    if (!fork_copy_failed_.empty()) return make_error(Errc::unavailable, fork_copy_failed_);
    struct stat status {};
    if (fstat(descriptor, &status) != 0) {
      return errno_error(Errc::invalid_argument, fmt::format("fstat of descriptor {} (import_chunk)", descriptor), errno);
    }
    const std::string target = descriptor_target(descriptor);
    if (!S_ISREG(status.st_mode) || target.rfind("/memfd:", 0) != 0) {
      return make_error(Errc::invalid_argument,
                        fmt::format("host driver: import_chunk: descriptor {} is not a memfd (it names {})",
                                    descriptor, target));
    }
    if (static_cast<Bytes>(status.st_size) < offset || static_cast<Bytes>(status.st_size) - offset < size) {
      return make_error(Errc::invalid_argument,
                        fmt::format("host driver: import_chunk: descriptor {} ({}) holds {} bytes, fewer than the "
                                    "chunk's {} bytes at offset {}",
                                    descriptor, target, status.st_size, size, offset));
    }
    const int copy = fcntl(descriptor, F_DUPFD_CLOEXEC, 0);
    if (copy < 0) return errno_error(Errc::platform, "fcntl F_DUPFD_CLOEXEC (import_chunk)", errno);
    return add_file(copy, offset);
  }

  // fork(), the parent's half: the child's copy of the memory, made while every allocator's lock is held.
  void prepare_fork() noexcept override {
    child_memfd_ = copy_memfd(memfd_, memfd_size_);
    copy_errno_ = child_memfd_ < 0 ? errno : 0;
  }

  void after_fork_in_parent() noexcept override {
    if (child_memfd_ >= 0) close(child_memfd_);
    child_memfd_ = -1;
  }

  // The child's half: every mapping moves to the copy, at the same address with the same access. Without a
  // copy the child keeps what it inherited as private copy-on-write mappings (its writes stay its own; it
  // may see the parent's later writes on pages it has not written) and gets no new memory.
  void after_fork_in_child() noexcept override {
    const bool copied = child_memfd_ >= 0;
    int remap_errno = 0;
    for (const auto& [address, mapping] : mappings()) {
      const detail::PageRecord* page = find_page(mapping.page);
      // A chunk that is a file of its own stays shared with the parent: a driver that has them does not
      // survive fork (capability survives_fork off), and the C ABI refuses the child's calls.
      if ((page->handle & chunk_file_bit) != 0) continue;
      const int flags = copied ? MAP_SHARED | MAP_FIXED : MAP_PRIVATE | MAP_FIXED;
      const int from = copied ? child_memfd_ : memfd_;
      const int protection = !capabilities().needs_set_access || mapping.accessible ? read_write : PROT_NONE;
      if (mmap(to_pointer(address), mapping.size, protection, flags, from,
               static_cast<off_t>(page->handle + mapping.offset)) == MAP_FAILED) {
        // Never left shared with the parent: a fault in the child rather than a write into the parent.
        remap_errno = errno;
        mmap(to_pointer(address), mapping.size, PROT_NONE, anonymous_none | MAP_FIXED, -1, 0);
      }
    }
    if (!copied || remap_errno != 0) {
      fork_copy_failed_ = fmt::format(
          "host driver: this process was forked and its copy of the device memory failed ({}): it keeps the "
          "blocks it inherited{} but gets no new memory",
          std::strerror(copied ? remap_errno : copy_errno_), remap_errno != 0 ? ", some of them inaccessible," : "");
      if (!copied) return;
    }
    close(memfd_);
    memfd_ = child_memfd_;
    child_memfd_ = -1;
  }

  struct ChunkFile {
    int descriptor;
    Bytes offset;  // where the chunk starts in the file
  };

  int memfd_;
  Bytes memfd_size_;
  std::unordered_map<PlatformHandle, ChunkFile> files_;  // chunks that are files of their own, by handle
  PlatformHandle next_file_ = 1;
  MemfdSpace space_;
  detail::SimulatedStreams streams_;
  std::function<std::size_t()> count_mappings_;
  std::size_t map_limit_;
  std::size_t mappings_at_start_;
  std::size_t map_budget_ = 0;  // kernel entries that may still be added before the next count
  int child_memfd_ = -1;
  int copy_errno_ = 0;
  std::string fork_copy_failed_;  // set in a child whose copy failed
  detail::ForkGuardMembership fork_membership_;  // last: leaves before anything above is destroyed
};

}  // namespace

Result<std::unique_ptr<Driver>> make_host_driver(const HostDriverOptions& options) {
  const auto os_page = static_cast<Bytes>(sysconf(_SC_PAGESIZE));
  if (!is_power_of_two(options.granularity) || options.granularity < os_page) {
    return make_error(Errc::invalid_argument,
                      fmt::format("host driver: granularity {} must be a power of two of at least the OS page "
                                  "size {}",
                                  options.granularity, os_page));
  }
  if (options.capacity == 0 || !is_aligned(options.capacity, options.granularity)) {
    return make_error(Errc::invalid_argument,
                      fmt::format("host driver: capacity {} must be a positive multiple of the granularity {}",
                                  options.capacity, options.granularity));
  }
  // The memfd is sparse: only touched bytes cost memory. Twice the capacity leaves room for the next-fit
  // carving never to fail for want of a contiguous range while the capacity check still passes; more than
  // off_t can hold would wrap.
  constexpr Bytes capacity_max = static_cast<Bytes>(std::numeric_limits<off_t>::max()) / 2;
  if (options.capacity > capacity_max) {
    return make_error(Errc::invalid_argument,
                      fmt::format("host driver: capacity {} is more than a memfd can back (at most {} bytes)",
                                  options.capacity, capacity_max));
  }
  const int memfd = memfd_create("tessera-host-device", MFD_CLOEXEC);
  if (memfd < 0) return errno_error(Errc::unavailable, "memfd_create", errno);
  const Bytes memfd_size = 2 * options.capacity;
  if (ftruncate(memfd, static_cast<off_t>(memfd_size)) != 0) {
    const int error_number = errno;
    close(memfd);
    return errno_error(Errc::unavailable, "ftruncate (memfd)", error_number);
  }
  return std::unique_ptr<Driver>(std::make_unique<HostDriver>(options, memfd, memfd_size));
}

}  // namespace tessera
