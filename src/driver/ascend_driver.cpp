// ascend: the CANN ACL runtime's virtual memory management, loaded at run time from libascendcl.so.
//
// UNVERIFIED ON HARDWARE. Nothing in this project has run this backend on an Ascend NPU: it is written
// from the published ACL declarations and documentation only. Its code runs in the tests over a stand-in
// libascendcl (tests/driver/fake_ascend) that serves these calls from host memory under ACL's documented
// rules; that shows it keeps the documented contract, not that a device agrees. Treat its first run on a
// device as a test, not a deployment.
//
// Where each fact comes from (no CANN header is needed to build; everything is declared below):
//   [rt.h]    acl_rt.h of CANN's open runtime, include/external/acl/acl_rt.h
//             (ACL 1.17.0, commit 0bbc1964): every function type below; aclrtMemcpyKind (HOST_TO_DEVICE 1,
//             DEVICE_TO_HOST 2); aclrtMemAttr (ACL_HBM_MEM 1, ACL_HBM_MEM_HUGE 4); aclrtMemLocationType
//             (DEVICE 1); aclrtMemLocation {uint32_t id; type}; aclrtPhysicalMemProp {handleType,
//             allocationType, memAttr, location, uint64_t reserve}; aclrtMemHandleType NONE 0;
//             aclrtMemAllocationType PINNED 0; aclrtMemGranularityOptions MINIMUM 0;
//             aclrtEventRecordedStatus (NOT_READY 0, COMPLETE 1); aclrtEventStatus (COMPLETE 0, NOT_READY 1);
//             aclrtDrvMemHandle, aclrtEvent, aclrtStream, aclrtContext are void*.
//   [err.h]   the same repository, include/external/acl/error_codes/rt_error_codes.h:
//             ACL_ERROR_RT_MEMORY_ALLOCATION 207001, ACL_ERROR_RT_NO_DEVICE 207004.
//   [base.h]  acl_base.h: aclError is int, ACL_SUCCESS 0, ACL_ERROR_REPEAT_INITIALIZE 100002;
//             acl.h: aclInit(const char*), const char* aclGetRecentErrMsg().
//   [doc]     Huawei's CANN API reference (hiascend.com, "aclrtPhysicalMemProp", "aclrtReserveMemAddress",
//             "aclrtMemGetAllocationGranularity"): the same struct layout; handleType must be NONE,
//             allocationType PINNED, location DEVICE; aclrtReserveMemAddress's alignment and expectPtr are
//             reserved and must be 0 / null.
//   [host]    the CANN API reference, "aclrtMallocHost", "aclrtFreeHost", "aclrtMemcpy": aclError
//             aclrtMallocHost(void **hostPtr, size_t size), page-locked host memory, size not 0; aclError
//             aclrtFreeHost(void *hostPtr), only for aclrtMallocHost's memory, no implicit synchronization;
//             aclrtMemcpy(dst, destMax, src, count, kind) is synchronous and count must not exceed destMax.
//   [usage]   reserve flags 1 = huge pages (what torch_npu and other VMM users pass);
//             aclrtMapMem maps whole handles only; no set-access call; torch_npu synchronizes the device
//             before unmapping.
#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "driver/dynamic_library.hpp"
#include "driver/platform_driver.hpp"
#include "tessera/drivers.hpp"

namespace tessera {
namespace {

namespace acl {

using Error = int;  // aclError [base.h]
using Context = void*;
using Stream = void*;
using Event = void*;
using DrvMemHandle = void*;  // aclrtDrvMemHandle [rt.h]

struct MemLocation {  // aclrtMemLocation [rt.h]
  std::uint32_t id;
  int type;  // aclrtMemLocationType
};

struct PhysicalMemProp {  // aclrtPhysicalMemProp [rt.h], [doc]
  int handleType;         // aclrtMemHandleType
  int allocationType;     // aclrtMemAllocationType
  int memAttr;            // aclrtMemAttr
  MemLocation location;
  std::uint64_t reserve;
};
// C enums are int-sized on the ABIs CANN supports (aarch64, x86_64 Linux): 4 + 4 + 4 + 8, then the
// uint64_t at offset 24.
static_assert(sizeof(MemLocation) == 8 && sizeof(PhysicalMemProp) == 32 &&
              offsetof(PhysicalMemProp, location) == 12 && offsetof(PhysicalMemProp, reserve) == 24);

inline constexpr Error success = 0;                          // ACL_SUCCESS [base.h]
inline constexpr Error error_repeat_initialize = 100002;     // ACL_ERROR_REPEAT_INITIALIZE [base.h]
inline constexpr Error error_rt_memory_allocation = 207001;  // ACL_ERROR_RT_MEMORY_ALLOCATION [err.h]
inline constexpr Error error_rt_no_device = 207004;          // ACL_ERROR_RT_NO_DEVICE [err.h]
inline constexpr int mem_handle_type_none = 0;               // ACL_MEM_HANDLE_TYPE_NONE [rt.h]
inline constexpr int mem_allocation_type_pinned = 0;         // ACL_MEM_ALLOCATION_TYPE_PINNED [rt.h]
inline constexpr int hbm_mem = 1;                            // ACL_HBM_MEM [rt.h]
inline constexpr int hbm_mem_huge = 4;                       // ACL_HBM_MEM_HUGE [rt.h]
inline constexpr int mem_location_type_device = 1;           // ACL_MEM_LOCATION_TYPE_DEVICE [rt.h]
inline constexpr int mem_alloc_granularity_minimum = 0;      // ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM [rt.h]
inline constexpr int memcpy_host_to_device = 1;              // ACL_MEMCPY_HOST_TO_DEVICE [rt.h]
inline constexpr int memcpy_device_to_host = 2;              // ACL_MEMCPY_DEVICE_TO_HOST [rt.h]
inline constexpr int event_recorded_status_complete = 1;     // ACL_EVENT_RECORDED_STATUS_COMPLETE [rt.h]
inline constexpr int event_status_complete = 0;              // ACL_EVENT_STATUS_COMPLETE [rt.h]
inline constexpr std::uint64_t reserve_flag_huge = 1;        // [usage]

// Function types [rt.h], [base.h]. Enum parameters are passed as int.
using Init = Error(const char* config_path);
using SetDevice = Error(std::int32_t device);
using ResetDevice = Error(std::int32_t device);
using GetDeviceCount = Error(std::uint32_t* count);
using GetCurrentContext = Error(Context* context);
using SetCurrentContext = Error(Context context);
using GetMemInfo = Error(int attr, std::size_t* free, std::size_t* total);
using MemGetAllocationGranularity = Error(PhysicalMemProp* prop, int option, std::size_t* granularity);
using ReserveMemAddress = Error(void** virtual_pointer, std::size_t size, std::size_t alignment,
                                void* expect_pointer, std::uint64_t flags);
using ReleaseMemAddress = Error(void* virtual_pointer);
using MallocPhysical = Error(DrvMemHandle* handle, std::size_t size, const PhysicalMemProp* prop,
                             std::uint64_t flags);
using FreePhysical = Error(DrvMemHandle handle);
using MapMem = Error(void* virtual_pointer, std::size_t size, std::size_t offset, DrvMemHandle handle,
                     std::uint64_t flags);
using UnmapMem = Error(void* virtual_pointer);
using CreateEvent = Error(Event* event);
using RecordEvent = Error(Event event, Stream stream);
using QueryEventStatus = Error(Event event, int* status);  // aclrtEventRecordedStatus*
using QueryEvent = Error(Event event, int* status);        // aclrtEventStatus* (deprecated form)
using SynchronizeEvent = Error(Event event);
using DestroyEvent = Error(Event event);
using SynchronizeStream = Error(Stream stream);
using SynchronizeDevice = Error();
using Memcpy = Error(void* destination, std::size_t destination_max, const void* source, std::size_t count,
                     int kind);
using MallocHost = Error(void** host_pointer, std::size_t size);  // [host]
using FreeHost = Error(void* host_pointer);                      // [host]
using GetRecentErrMsg = const char*();

}  // namespace acl

struct Api {
  detail::DynamicLibrary library;
  acl::Init* init = nullptr;
  acl::SetDevice* set_device = nullptr;
  acl::ResetDevice* reset_device = nullptr;
  acl::GetDeviceCount* get_device_count = nullptr;
  acl::GetCurrentContext* get_current_context = nullptr;
  acl::SetCurrentContext* set_current_context = nullptr;
  acl::GetMemInfo* get_mem_info = nullptr;
  acl::MemGetAllocationGranularity* mem_get_allocation_granularity = nullptr;
  acl::ReserveMemAddress* reserve_mem_address = nullptr;
  acl::ReleaseMemAddress* release_mem_address = nullptr;
  acl::MallocPhysical* malloc_physical = nullptr;
  acl::FreePhysical* free_physical = nullptr;
  acl::MapMem* map_mem = nullptr;
  acl::UnmapMem* unmap_mem = nullptr;
  acl::CreateEvent* create_event = nullptr;
  acl::RecordEvent* record_event = nullptr;
  acl::QueryEventStatus* query_event_status = nullptr;  // newer CANN
  acl::QueryEvent* query_event = nullptr;               // older CANN, when the above is missing
  acl::SynchronizeEvent* synchronize_event = nullptr;
  acl::DestroyEvent* destroy_event = nullptr;
  acl::SynchronizeStream* synchronize_stream = nullptr;
  acl::SynchronizeDevice* synchronize_device = nullptr;
  acl::Memcpy* copy = nullptr;
  acl::MallocHost* malloc_host = nullptr;
  acl::FreeHost* free_host = nullptr;
  acl::GetRecentErrMsg* get_recent_err_msg = nullptr;  // optional
  detail::CreatorProcess creator{};  // the process that loaded the library

  explicit Api(detail::DynamicLibrary opened) : library(std::move(opened)) {}

  // "aclError 207001: <the runtime's own message>".
  std::string describe(acl::Error error) const {
    const char* recent = get_recent_err_msg != nullptr ? get_recent_err_msg() : nullptr;
    if (recent != nullptr && *recent != '\0') return fmt::format("aclError {}: {}", error, recent);
    return fmt::format("aclError {}", error);
  }
};

template <class F>
Result<void> bind(const Api& api, F*& slot, const char* name) {
  auto found = api.library.address(name);
  if (!found) return std::move(found).error();
  slot = reinterpret_cast<F*>(*found);
  return {};
}

Result<std::unique_ptr<Api>> load_api(detail::DynamicLibrary library) {
  auto api = std::make_unique<Api>(std::move(library));
  (void)bind(*api, api->get_recent_err_msg, "aclGetRecentErrMsg");  // optional: messages only
  if (!bind(*api, api->query_event_status, "aclrtQueryEventStatus")) {
    if (auto old = bind(*api, api->query_event, "aclrtQueryEvent"); !old) {
      return make_error(Errc::unavailable,
                        fmt::format("ascend driver: {} has neither aclrtQueryEventStatus nor aclrtQueryEvent; "
                                    "it is not the CANN runtime library (libascendcl)",
                                    api->library.name()));
    }
  }
  for (auto done : {bind(*api, api->init, "aclInit"), bind(*api, api->set_device, "aclrtSetDevice"),
                    bind(*api, api->reset_device, "aclrtResetDevice"),
                    bind(*api, api->get_device_count, "aclrtGetDeviceCount"),
                    bind(*api, api->get_current_context, "aclrtGetCurrentContext"),
                    bind(*api, api->set_current_context, "aclrtSetCurrentContext"),
                    bind(*api, api->get_mem_info, "aclrtGetMemInfo"),
                    bind(*api, api->mem_get_allocation_granularity, "aclrtMemGetAllocationGranularity"),
                    bind(*api, api->reserve_mem_address, "aclrtReserveMemAddress"),
                    bind(*api, api->release_mem_address, "aclrtReleaseMemAddress"),
                    bind(*api, api->malloc_physical, "aclrtMallocPhysical"),
                    bind(*api, api->free_physical, "aclrtFreePhysical"), bind(*api, api->map_mem, "aclrtMapMem"),
                    bind(*api, api->unmap_mem, "aclrtUnmapMem"), bind(*api, api->create_event, "aclrtCreateEvent"),
                    bind(*api, api->record_event, "aclrtRecordEvent"),
                    bind(*api, api->synchronize_event, "aclrtSynchronizeEvent"),
                    bind(*api, api->destroy_event, "aclrtDestroyEvent"),
                    bind(*api, api->synchronize_stream, "aclrtSynchronizeStream"),
                    bind(*api, api->synchronize_device, "aclrtSynchronizeDevice"),
                    bind(*api, api->copy, "aclrtMemcpy"), bind(*api, api->malloc_host, "aclrtMallocHost"),
                    bind(*api, api->free_host, "aclrtFreeHost")}) {
    if (!done) {
      return make_error(Errc::unavailable,
                        fmt::format("ascend driver: {}; it is not the CANN runtime library, or one too old for "
                                    "Tessera, which needs its virtual memory API (aclrtReserveMemAddress, "
                                    "aclrtMallocPhysical, aclrtMapMem)",
                                    done.error().message));
    }
  }
  return api;
}

Error call_failed(const Api& api, std::string_view call, acl::Error error) {
  const Errc code = error == acl::error_rt_memory_allocation ? Errc::out_of_memory : Errc::platform;
  return make_error(code, fmt::format("ascend driver: {} failed with {}", call, api.describe(error)), error);
}

// Huge-page HBM on one device, the only kind the VMM calls accept [doc].
acl::PhysicalMemProp page_properties(int device) {
  acl::PhysicalMemProp prop{};
  prop.handleType = acl::mem_handle_type_none;
  prop.allocationType = acl::mem_allocation_type_pinned;
  prop.memAttr = acl::hbm_mem_huge;
  prop.location.id = static_cast<std::uint32_t>(device);
  prop.location.type = acl::mem_location_type_device;
  prop.reserve = 0;
  return prop;
}

// Makes the device's context current for one call (ACL contexts are per thread, like CUDA's), and puts
// the thread's own context back after. A thread without a context keeps ours.
class ContextScope {
 public:
  ContextScope(const Api& api, acl::Context context) : api_(api) {
    if (!api.creator.is_current()) {
      status_ = api.creator.forked_child_error("ascend");
      return;
    }
    // A thread that never set a device has no context and the query fails: treat it as "none".
    if (api.get_current_context(&previous_) != acl::success) previous_ = nullptr;
    if (previous_ == context) return;
    if (auto set = api.set_current_context(context); set != acl::success) {
      status_ = call_failed(api, "aclrtSetCurrentContext", set);
      return;
    }
    switched_ = true;
  }
  ~ContextScope() {
    if (switched_ && previous_ != nullptr) api_.set_current_context(previous_);
  }
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

  const Result<void>& status() const noexcept { return status_; }

 private:
  const Api& api_;
  acl::Context previous_ = nullptr;
  bool switched_ = false;
  Result<void> status_;
};

constexpr DriverCapabilities ascend_capabilities{.needs_set_access = false,
                                                 .page_multi_mapping = false,
                                                 .data_access = true,
                                                 .host_pointers = false,
                                                 .asynchronous = true,
                                                 .host_backup = true};

void* to_pointer(Address address) { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(address)); }
Address to_address(const void* pointer) { return Address{reinterpret_cast<std::uintptr_t>(pointer)}; }
void* to_handle(detail::PlatformHandle handle) { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(handle)); }
detail::PlatformHandle from_handle(const void* handle) {
  return detail::PlatformHandle{reinterpret_cast<std::uintptr_t>(handle)};
}
acl::Stream to_stream(StreamId stream) { return reinterpret_cast<acl::Stream>(static_cast<std::uintptr_t>(stream)); }

class AscendDriver final : public detail::PlatformDriver {
 public:
  AscendDriver(std::unique_ptr<Api> api, int device, acl::Context context, Bytes granularity, Bytes capacity)
      : PlatformDriver("ascend", ascend_capabilities, granularity, capacity),
        api_(std::move(api)),
        device_(device),
        context_(context) {}

  // stream_is_capturing keeps Driver's answer, false: newer CANN can tell (aclmdlRICaptureGetInfo), but the
  // stand-in libascendcl has no capture to check a call against, and this driver calls nothing it has not
  // run over the stand-in. So tessera_refuse_graph_capture refuses nothing on Ascend.

  // Balances make_ascend_driver's aclrtSetDevice (ACL counts them). aclInit is process-wide and shared
  // with torch_npu and others in the process, so aclFinalize is left to the process.
  ~AscendDriver() override {
    if (!api_->creator.is_current()) return;
    {
      ContextScope scope(*api_, context_);  // host buffers the caller leaked go with the driver
      if (scope.status()) {
        for (const auto& [id, buffer] : host_buffers()) api_->free_host(buffer.data);
      }
    }
    api_->reset_device(device_);
  }

  AscendDriver(const AscendDriver&) = delete;
  AscendDriver& operator=(const AscendDriver&) = delete;

 protected:
  // aclrtReserveMemAddress takes no alignment (the argument is reserved and must be 0 [doc]) and returns
  // granule-aligned ranges. A larger alignment is had by reserving alignment - granule bytes more and
  // handing out the aligned address inside; the range is released by its true base.
  Result<Address> platform_reserve(Bytes size, Bytes alignment) override {
    ContextScope scope(*api_, context_);
    if (!scope.status()) return scope.status().error();
    const Bytes extra = alignment > granularity() ? alignment - granularity() : 0;
    void* base = nullptr;
    if (auto e = api_->reserve_mem_address(&base, size + extra, 0, nullptr, acl::reserve_flag_huge);
        e != acl::success) {
      return fail(fmt::format("aclrtReserveMemAddress({} bytes)", size + extra), e);
    }
    const Address start = to_address(base);
    const Address aligned = align_up(start, alignment);
    if (aligned + size > start + size + extra) {  // only when the runtime broke its granule alignment
      api_->release_mem_address(base);
      return make_error(Errc::platform, fmt::format("ascend driver: aclrtReserveMemAddress returned {:#x}, which is "
                                                    "not aligned to the granule {}",
                                                    start, granularity()));
    }
    if (aligned != start) true_bases_.emplace(aligned, base);
    return aligned;
  }

  Result<void> platform_release_reservation(Address base, Bytes) override {
    ContextScope scope(*api_, context_);
    if (!scope.status()) return scope.status();
    auto over = true_bases_.find(base);
    void* pointer = over != true_bases_.end() ? over->second : to_pointer(base);
    if (auto e = api_->release_mem_address(pointer); e != acl::success) {
      return fail(fmt::format("aclrtReleaseMemAddress({:#x})", base), e);
    }
    if (over != true_bases_.end()) true_bases_.erase(over);
    return {};
  }

  Result<detail::PlatformHandle> platform_create_chunk(Bytes size) override {
    ContextScope scope(*api_, context_);
    if (!scope.status()) return scope.status().error();
    const auto prop = page_properties(device_);
    acl::DrvMemHandle handle = nullptr;
    if (auto e = api_->malloc_physical(&handle, size, &prop, 0); e != acl::success) {
      return fail(fmt::format("aclrtMallocPhysical({} bytes on device {})", size, device_), e);
    }
    return from_handle(handle);
  }

  Result<void> platform_release_chunk(detail::PlatformHandle handle, Bytes size) override {
    ContextScope scope(*api_, context_);
    if (!scope.status()) return scope.status();
    if (auto e = api_->free_physical(to_handle(handle)); e != acl::success) {
      return fail(fmt::format("aclrtFreePhysical(page of {} bytes)", size), e);
    }
    return {};
  }

  // The whole handle at once: ACL maps handles whole, which the ledger guarantees (one page, one map).
  Result<void> platform_map(Address at, detail::PlatformHandle handle, Bytes, Bytes size) override {
    ContextScope scope(*api_, context_);
    if (!scope.status()) return scope.status();
    if (auto e = api_->map_mem(to_pointer(at), size, 0, to_handle(handle), 0); e != acl::success) {
      return fail(fmt::format("aclrtMapMem({:#x}, {} bytes)", at, size), e);
    }
    return {};
  }

  // ACL has no access control on mappings: a mapping is usable as soon as it is made.
  Result<void> platform_set_access(Address, Bytes) override { return {}; }

  Result<void> platform_unmap(Address at, Bytes size) override {
    ContextScope scope(*api_, context_);
    if (!scope.status()) return scope.status();
    if (auto e = api_->unmap_mem(to_pointer(at)); e != acl::success) {
      return fail(fmt::format("aclrtUnmapMem({:#x}, {} bytes)", at, size), e);
    }
    return {};
  }

  Result<detail::PlatformHandle> platform_create_event() override {
    ContextScope scope(*api_, context_);
    if (!scope.status()) return scope.status().error();
    acl::Event event = nullptr;
    if (auto e = api_->create_event(&event); e != acl::success) return fail("aclrtCreateEvent", e);
    return from_handle(event);
  }

  Result<void> platform_record_event(detail::PlatformHandle event, StreamId stream) override {
    ContextScope scope(*api_, context_);
    if (!scope.status()) return scope.status();
    if (auto e = api_->record_event(to_handle(event), to_stream(stream)); e != acl::success) {
      return fail(fmt::format("aclrtRecordEvent(stream {:#x})", static_cast<std::uintptr_t>(stream)), e);
    }
    return {};
  }

  Result<bool> platform_query_event(detail::PlatformHandle event) override {
    ContextScope scope(*api_, context_);
    if (!scope.status()) return scope.status().error();
    int status = 0;
    if (api_->query_event_status != nullptr) {
      if (auto e = api_->query_event_status(to_handle(event), &status); e != acl::success) {
        return fail("aclrtQueryEventStatus", e);
      }
      return status == acl::event_recorded_status_complete;
    }
    if (auto e = api_->query_event(to_handle(event), &status); e != acl::success) return fail("aclrtQueryEvent", e);
    return status == acl::event_status_complete;
  }

  Result<void> platform_synchronize_event(detail::PlatformHandle event) override {
    ContextScope scope(*api_, context_);
    if (!scope.status()) return scope.status();
    if (auto e = api_->synchronize_event(to_handle(event)); e != acl::success) return fail("aclrtSynchronizeEvent", e);
    return {};
  }

  Result<void> platform_destroy_event(detail::PlatformHandle event) override {
    ContextScope scope(*api_, context_);
    if (!scope.status()) return scope.status();
    if (auto e = api_->destroy_event(to_handle(event)); e != acl::success) return fail("aclrtDestroyEvent", e);
    return {};
  }

  Result<void> platform_synchronize_stream(StreamId stream) override {
    ContextScope scope(*api_, context_);
    if (!scope.status()) return scope.status();
    if (auto e = api_->synchronize_stream(to_stream(stream)); e != acl::success) {
      return fail(fmt::format("aclrtSynchronizeStream(stream {:#x})", static_cast<std::uintptr_t>(stream)), e);
    }
    return {};
  }

  Result<void> platform_synchronize_device() override {
    ContextScope scope(*api_, context_);
    if (!scope.status()) return scope.status();
    if (auto e = api_->synchronize_device(); e != acl::success) return fail("aclrtSynchronizeDevice", e);
    return {};
  }

  Result<void> platform_write(Address at, const void* source, Bytes size) override {
    ContextScope scope(*api_, context_);
    if (!scope.status()) return scope.status();
    if (auto e = api_->copy(to_pointer(at), size, source, size, acl::memcpy_host_to_device); e != acl::success) {
      return fail(fmt::format("aclrtMemcpy(host to device {:#x}, {} bytes)", at, size), e);
    }
    return {};
  }

  Result<void> platform_read(Address at, void* destination, Bytes size) override {
    ContextScope scope(*api_, context_);
    if (!scope.status()) return scope.status();
    if (auto e = api_->copy(destination, size, to_pointer(at), size, acl::memcpy_device_to_host);
        e != acl::success) {
      return fail(fmt::format("aclrtMemcpy(device {:#x} to host, {} bytes)", at, size), e);
    }
    return {};
  }

  // Backups: page-locked host memory from aclrtMallocHost, copied with the synchronous aclrtMemcpy [host].
  Result<detail::HostBufferRecord> platform_allocate_host(Bytes size) override {
    ContextScope scope(*api_, context_);
    if (!scope.status()) return scope.status().error();
    void* data = nullptr;
    if (auto e = api_->malloc_host(&data, size); e != acl::success) {
      return fail(fmt::format("aclrtMallocHost({} bytes)", size), e);
    }
    return detail::HostBufferRecord{.handle = from_handle(data), .data = data, .size = size};
  }

  Result<void> platform_free_host(const detail::HostBufferRecord& buffer) override {
    ContextScope scope(*api_, context_);
    if (!scope.status()) return scope.status();
    if (auto e = api_->free_host(buffer.data); e != acl::success) {
      return fail(fmt::format("aclrtFreeHost(buffer of {} bytes)", buffer.size), e);
    }
    return {};
  }

  // destMax is the room in the destination: the whole buffer for a copy into it, the range otherwise.
  Result<void> platform_copy_to_host(const detail::HostBufferRecord& destination, Address source,
                                     Bytes size) override {
    ContextScope scope(*api_, context_);
    if (!scope.status()) return scope.status();
    if (auto e = api_->copy(destination.data, destination.size, to_pointer(source), size, acl::memcpy_device_to_host);
        e != acl::success) {
      return fail(fmt::format("aclrtMemcpy(device {:#x} to a host buffer, {} bytes)", source, size), e);
    }
    return {};
  }

  Result<void> platform_copy_to_device(Address destination, const detail::HostBufferRecord& source,
                                       Bytes size) override {
    ContextScope scope(*api_, context_);
    if (!scope.status()) return scope.status();
    if (auto e = api_->copy(to_pointer(destination), size, source.data, size, acl::memcpy_host_to_device);
        e != acl::success) {
      return fail(fmt::format("aclrtMemcpy(a host buffer to device {:#x}, {} bytes)", destination, size), e);
    }
    return {};
  }

 private:
  Error fail(std::string_view call, acl::Error error) const { return call_failed(*api_, call, error); }

  std::unique_ptr<Api> api_;
  int device_;
  acl::Context context_;
  std::unordered_map<Address, void*> true_bases_;  // aligned base -> reserved base, where they differ
};

constexpr std::string_view no_npu_hint = "use the host or sim driver on machines without an Ascend NPU";

Error unavailable(std::string message, acl::Error error = 0) {
  return make_error(Errc::unavailable, std::move(message), error);
}

}  // namespace

Result<std::unique_ptr<Driver>> make_ascend_driver(const AscendDriverOptions& options) {
  auto library = detail::DynamicLibrary::open(options.library, /*keep_loaded=*/true);
  if (!library) {
    return unavailable(fmt::format("ascend driver: {}; the CANN runtime (libascendcl, from the CANN toolkit; "
                                   "source its set_env.sh) is needed for the ascend driver — {}",
                                   library.error().message, no_npu_hint));
  }
  auto loaded = load_api(std::move(*library));
  if (!loaded) return std::move(loaded).error();
  std::unique_ptr<Api> api = std::move(*loaded);

  // aclInit once per process; a framework may have done it already, which ACL reports as a repeat.
  if (auto e = api->init(nullptr); e != acl::success && e != acl::error_repeat_initialize) {
    return unavailable(fmt::format("ascend driver: aclInit failed with {}{}", api->describe(e),
                                   e == acl::error_rt_no_device ? fmt::format(": no Ascend device — {}", no_npu_hint)
                                                                : std::string()),
                       e);
  }
  std::uint32_t count = 0;
  if (auto e = api->get_device_count(&count); e != acl::success) {
    return unavailable(fmt::format("ascend driver: aclrtGetDeviceCount failed with {} — {}", api->describe(e),
                                   no_npu_hint),
                       e);
  }
  if (count == 0) return unavailable(fmt::format("ascend driver: no Ascend device is present — {}", no_npu_hint));
  if (options.device < 0 || static_cast<std::uint32_t>(options.device) >= count) {
    return unavailable(fmt::format("ascend driver: there is no Ascend device {}; this machine has {} (0 to {})",
                                   options.device, count, count - 1));
  }

  if (auto e = api->set_device(options.device); e != acl::success) {
    return call_failed(*api, fmt::format("aclrtSetDevice({})", options.device), e);
  }
  auto fail_reset = [&](Error error) {
    api->reset_device(options.device);
    return error;
  };
  acl::Context context = nullptr;
  if (auto e = api->get_current_context(&context); e != acl::success) {
    return fail_reset(call_failed(*api, "aclrtGetCurrentContext", e));
  }

  auto prop = page_properties(options.device);
  std::size_t granularity = 0;
  if (auto e = api->mem_get_allocation_granularity(&prop, acl::mem_alloc_granularity_minimum, &granularity);
      e != acl::success) {
    return fail_reset(call_failed(*api, "aclrtMemGetAllocationGranularity(MINIMUM)", e));
  }
  if (!is_power_of_two(granularity)) {
    return fail_reset(make_error(Errc::unsupported,
                                 fmt::format("ascend driver: the allocation granularity {} of device {} is not a "
                                             "power of two",
                                             granularity, options.device)));
  }
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  if (auto e = api->get_mem_info(acl::hbm_mem, &free_bytes, &total_bytes); e != acl::success) {
    return fail_reset(call_failed(*api, "aclrtGetMemInfo(ACL_HBM_MEM)", e));
  }

  return std::unique_ptr<Driver>(
      std::make_unique<AscendDriver>(std::move(api), options.device, context, granularity, total_bytes));
}

}  // namespace tessera
