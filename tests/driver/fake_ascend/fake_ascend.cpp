// A stand-in libascendcl for tests: the ACL runtime calls the ascend driver resolves, exported under their
// real symbol names and served from host memory, so that the ascend driver's own code (symbol loading,
// aclInit's repeat, the per-thread context, every VMM call, error mapping) runs on machines without an NPU.
// It is no proof that the driver works on an Ascend device: it checks the driver against ACL's contract as
// the CANN declarations and documentation state it, nothing more.
//
// Physical memory is a memfd per handle; a reservation is a PROT_NONE mapping; aclrtMapMem maps the whole
// memfd read-write over it (ACL has no set-access call, none is exported); aclrtUnmapMem puts PROT_NONE
// back. Data written survives unmapping and mapping the handle again, as on the device.
//
// What it enforces, beyond the fake libcuda, because ACL differs from CUDA:
//   - aclrtReserveMemAddress: alignment and expectPtr are reserved and must be 0 / null; flags is the page
//     type, 0 normal or 1 huge; the size a granule multiple. The address returned is granule-aligned and
//     never more (always an odd multiple of 2 MiB), so a caller wanting more alignment must make it itself.
//   - aclrtMallocPhysical: the aclrtPhysicalMemProp fields (handleType NONE, allocationType PINNED, memAttr
//     ACL_HBM_MEM_HUGE or ACL_HBM_MEM_NORMAL, location {device, DEVICE}), flags 0, a granule multiple, and a
//     physical limit answered with ACL_ERROR_RT_MEMORY_ALLOCATION.
//   - aclrtMapMem: offset 0 and the handle's whole size only; a handle mapped once at a time; the handle's
//     page type (memAttr HUGE or NORMAL) must match the reservation's flags (1 or 0).
//   - aclrtReleaseMemAddress refuses a reservation that still holds a mapping, aclrtFreePhysical a handle
//     still mapped, aclrtUnmapMem an address where no mapping starts. The last two are stricter than anything
//     ACL documents; the driver's ledger never asks for either.
//   - aclrtMallocHost: size not 0 [doc]; a host limit answered with ACL_ERROR_RT_MEMORY_ALLOCATION.
//     aclrtFreeHost frees only what aclrtMallocHost returned [doc], else ACL_ERROR_INVALID_PARAM.
//   - aclrtMemcpy: count <= destMax [doc]; the device side wholly mapped; a host side inside an
//     aclrtMallocHost buffer must end inside it, destMax included (real ACL would overrun the buffer).
//   - Every call but aclInit, aclGetRecentErrMsg and the device calls needs aclInit, and every memory, event
//     and stream call needs a current context on the calling thread (aclrtSetDevice or
//     aclrtSetCurrentContext), as on the runtime: a thread without one gets ACL_ERROR_RT_CONTEXT_NULL.
//
// Where each fact comes from (the headers of CANN's runtime, include/external/acl/):
//   acl_base.h: aclError int; ACL_SUCCESS 0; ACL_ERROR_INVALID_PARAM 100000, the parameter error of the ACL
//     layer's own argument checks (null pointers, a zero size, a non-zero reserved flags); ACL_ERROR_UNINITIALIZE
//     100001; ACL_ERROR_REPEAT_INITIALIZE 100002. acl.h: aclInit(const char*), aclGetRecentErrMsg().
//   error_codes/rt_error_codes.h: ACL_ERROR_RT_PARAM_INVALID 107000, the runtime's parameter error (what the
//     ACL layer passes on for arguments it does not check itself: a size other than the handle's, an address
//     outside a reservation); ACL_ERROR_RT_INVALID_DEVICEID 107001; ACL_ERROR_RT_CONTEXT_NULL 107002;
//     ACL_ERROR_RT_MEMORY_ALLOCATION 207001.
//   acl_rt.h: every function signature below; aclrtMemAttr (ACL_HBM_MEM 1, ACL_HBM_MEM_HUGE 4,
//     ACL_HBM_MEM_NORMAL 5); aclrtPhysicalMemProp {handleType, allocationType, memAttr, aclrtMemLocation
//     {uint32_t id; type}, uint64_t reserve}; ACL_MEM_HANDLE_TYPE_NONE 0, ACL_MEM_ALLOCATION_TYPE_PINNED 0,
//     ACL_MEM_LOCATION_TYPE_DEVICE 1; aclrtMemGranularityOptions MINIMUM 0, RECOMMENDED 1; aclrtMemcpyKind
//     HOST_TO_DEVICE 1, DEVICE_TO_HOST 2; aclrtEventRecordedStatus NOT_READY 0, COMPLETE 1; the deprecated
//     aclrtEventStatus COMPLETE 0, NOT_READY 1.
//   The CANN API reference ("aclrtReserveMemAddress", "aclrtMapMem", "aclrtMemGetAllocationGranularity"):
//     reserved arguments 0 / null, whole handles mapped, a granularity of 2 MiB ("currently only 2M").
//   The CANN API reference ("aclrtMallocHost", "aclrtFreeHost", "aclrtMemcpy"): aclError
//     aclrtMallocHost(void **hostPtr, size_t size), size must not be 0, page-locked host memory;
//     aclError aclrtFreeHost(void *hostPtr) frees only aclrtMallocHost's memory; aclrtMemcpy's count must
//     not exceed destMax.
// Built with FAKE_ASCEND_OLD_EVENT_QUERY it exports the deprecated aclrtQueryEvent instead of
// aclrtQueryEventStatus, as older CANN does. Tests steer it with the fake_ascend_* functions.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <set>
#include <string>

namespace {

constexpr int ok = 0;                              // ACL_SUCCESS
constexpr int invalid_param = 100000;              // ACL_ERROR_INVALID_PARAM
constexpr int uninitialized = 100001;              // ACL_ERROR_UNINITIALIZE
constexpr int repeat_initialize = 100002;          // ACL_ERROR_REPEAT_INITIALIZE
constexpr int rt_param_invalid = 107000;           // ACL_ERROR_RT_PARAM_INVALID
constexpr int rt_invalid_device = 107001;          // ACL_ERROR_RT_INVALID_DEVICEID
constexpr int rt_context_null = 107002;            // ACL_ERROR_RT_CONTEXT_NULL
constexpr int rt_memory_allocation = 207001;       // ACL_ERROR_RT_MEMORY_ALLOCATION
constexpr int hbm_mem = 1;                         // ACL_HBM_MEM
constexpr int hbm_mem_huge = 4;                    // ACL_HBM_MEM_HUGE
constexpr int hbm_mem_normal = 5;                  // ACL_HBM_MEM_NORMAL
constexpr int location_device = 1;                 // ACL_MEM_LOCATION_TYPE_DEVICE
constexpr int memcpy_host_to_device = 1;           // ACL_MEMCPY_HOST_TO_DEVICE
constexpr int memcpy_device_to_host = 2;           // ACL_MEMCPY_DEVICE_TO_HOST
constexpr int event_recorded_not_ready = 0;        // ACL_EVENT_RECORDED_STATUS_NOT_READY
constexpr int event_recorded_complete = 1;         // ACL_EVENT_RECORDED_STATUS_COMPLETE
constexpr int event_status_complete = 0;           // ACL_EVENT_STATUS_COMPLETE
constexpr int event_status_not_ready = 1;          // ACL_EVENT_STATUS_NOT_READY
constexpr std::uint64_t reserve_normal = 0;        // aclrtReserveMemAddress flags: normal pages
constexpr std::uint64_t reserve_huge = 1;          // aclrtReserveMemAddress flags: huge pages
constexpr std::size_t granule = std::size_t{2} << 20;
constexpr int max_devices = 8;

struct MemLocation {  // aclrtMemLocation
  std::uint32_t id;
  int type;
};
struct PhysicalMemProp {  // aclrtPhysicalMemProp
  int handleType;
  int allocationType;
  int memAttr;
  MemLocation location;
  std::uint64_t reserve;
};

struct Physical {
  int fd = -1;
  std::size_t size = 0;
  int mem_attr = 0;
  bool mapped = false;
};
struct Reservation {
  std::size_t size = 0;
  std::uint64_t page_type = 0;
};
struct Mapping {
  std::size_t size = 0;
  Physical* handle = nullptr;
};
struct Event {
  bool recorded = false;
  bool complete = false;
  void* stream = nullptr;
};

struct State {
  int init_result = ok;
  bool initialized = false;
  int device_count = 1;
  int references[max_devices] = {};  // aclrtSetDevice minus aclrtResetDevice, per device
  std::size_t total = std::size_t{256} << 20;
  std::size_t limit = std::size_t{256} << 20;  // physical bytes aclrtMallocPhysical grants
  std::size_t used = 0;
  bool events_pending = false;  // recorded events stay NOT_READY until synchronized
  std::set<Physical*> handles;
  std::map<std::uintptr_t, Reservation> reservations;  // by base
  std::map<std::uintptr_t, Mapping> mappings;          // by start
  std::set<Event*> events;
  std::map<std::uintptr_t, std::size_t> host_buffers;  // aclrtMallocHost's: address -> size
  std::size_t host_limit = std::size_t{1} << 40;       // bytes aclrtMallocHost grants in all
  std::size_t host_used = 0;
};

std::mutex mutex;
State state;
int device_contexts[max_devices];  // the address of each is that device's default context
thread_local void* current_context = nullptr;
thread_local std::string recent_message;    // the last failure on this thread
thread_local std::string reported_message;  // what aclGetRecentErrMsg handed out last

int fail(int code, const char* call, const char* why) {
  recent_message = std::string(call) + ": " + why;
  return code;
}

int context_device(const void* context) {
  for (int device = 0; device < max_devices; ++device) {
    if (context == &device_contexts[device]) return device;
  }
  return -1;
}

int ready(const char* call) { return state.initialized ? ok : fail(uninitialized, call, "aclInit was not called"); }
int ready_in_context(const char* call) {
  if (!state.initialized) return fail(uninitialized, call, "aclInit was not called");
  if (current_context == nullptr) return fail(rt_context_null, call, "no current context on this thread");
  return ok;
}

Physical* find_handle(void* handle) {
  auto* physical = static_cast<Physical*>(handle);
  return state.handles.count(physical) != 0 ? physical : nullptr;
}

// The reservation that holds [at, at + size), if one does.
const Reservation* holding(std::uintptr_t at, std::size_t size) {
  auto after = state.reservations.upper_bound(at);
  if (after == state.reservations.begin()) return nullptr;
  auto found = std::prev(after);
  return at + size <= found->first + found->second.size ? &found->second : nullptr;
}

// Whether [at, at + size) lies wholly in mappings laid end to end.
bool mapped_range(std::uintptr_t at, std::size_t size) {
  const std::uintptr_t end = at + size;
  while (at < end) {
    auto after = state.mappings.upper_bound(at);
    if (after == state.mappings.begin()) return false;
    auto found = std::prev(after);
    const std::uintptr_t mapping_end = found->first + found->second.size;
    if (at >= mapping_end) return false;
    at = mapping_end;
  }
  return true;
}

// Whether a host range [at, at + size) that starts inside an aclrtMallocHost buffer runs past its end.
bool overruns_host_buffer(std::uintptr_t at, std::size_t size) {
  auto after = state.host_buffers.upper_bound(at);
  if (after == state.host_buffers.begin()) return false;
  const auto& [start, length] = *std::prev(after);
  return at < start + length && size > length - (at - start);
}

// aclrtPhysicalMemProp as the documentation allows it; the code and reason of a refusal.
bool good_properties(const PhysicalMemProp* prop, int& why_code, const char*& why) {
  if (prop->handleType != 0 || prop->allocationType != 0 || prop->location.type != location_device) {
    why_code = invalid_param;
    why = "handleType must be NONE, allocationType PINNED, location.type DEVICE";
    return false;
  }
  if (prop->memAttr != hbm_mem_huge && prop->memAttr != hbm_mem_normal) {
    why_code = invalid_param;
    why = "memAttr must be ACL_HBM_MEM_HUGE or ACL_HBM_MEM_NORMAL";
    return false;
  }
  if (prop->location.id >= static_cast<std::uint32_t>(state.device_count)) {
    why_code = rt_invalid_device;
    why = "location.id is no device";
    return false;
  }
  return true;
}

Event* find_event(void* event) {
  auto* found = static_cast<Event*>(event);
  return state.events.count(found) != 0 ? found : nullptr;
}

}  // namespace

extern "C" {

// ---- test controls ----
// Back to a fresh process's state; only between tests, with no driver alive.
void fake_ascend_reset() {
  std::lock_guard lock(mutex);
  for (Physical* physical : state.handles) {
    close(physical->fd);
    delete physical;
  }
  for (auto& [base, reservation] : state.reservations) munmap(reinterpret_cast<void*>(base), reservation.size);
  for (Event* event : state.events) delete event;
  for (auto& [at, size] : state.host_buffers) munmap(reinterpret_cast<void*>(at), size);
  state = State{};
  current_context = nullptr;
  recent_message.clear();
}
std::size_t fake_ascend_live_host_buffers() {
  std::lock_guard lock(mutex);
  return state.host_buffers.size();
}
void fake_ascend_set_host_limit(std::size_t bytes) {
  std::lock_guard lock(mutex);
  state.host_limit = bytes;
}
void fake_ascend_set_init_result(int result) {
  std::lock_guard lock(mutex);
  state.init_result = result;
}
void fake_ascend_set_device_count(int count) {
  std::lock_guard lock(mutex);
  state.device_count = count < 0 ? 0 : (count > max_devices ? max_devices : count);
}
void fake_ascend_set_physical_limit(std::size_t bytes) {
  std::lock_guard lock(mutex);
  state.limit = bytes;
}
void fake_ascend_set_events_pending(int pending) {
  std::lock_guard lock(mutex);
  state.events_pending = pending != 0;
}
int fake_ascend_device_references(int device) {
  std::lock_guard lock(mutex);
  return device >= 0 && device < max_devices ? state.references[device] : -1;
}
std::size_t fake_ascend_live_handles() {
  std::lock_guard lock(mutex);
  return state.handles.size();
}
std::size_t fake_ascend_live_reservations() {
  std::lock_guard lock(mutex);
  return state.reservations.size();
}
std::size_t fake_ascend_live_mappings() {
  std::lock_guard lock(mutex);
  return state.mappings.size();
}
std::size_t fake_ascend_live_events() {
  std::lock_guard lock(mutex);
  return state.events.size();
}
void* fake_ascend_current_context() { return current_context; }

// ---- acl.h ----
int aclInit(const char* /*configPath*/) {
  std::lock_guard lock(mutex);
  if (state.init_result != ok) return fail(state.init_result, "aclInit", "the test made aclInit fail");
  if (state.initialized) return repeat_initialize;  // ACL's answer to a second aclInit in a process
  state.initialized = true;
  return ok;
}

// The message of the last failure on this thread, then cleared; null when there is none.
const char* aclGetRecentErrMsg() {
  if (recent_message.empty()) return nullptr;
  reported_message = std::move(recent_message);
  recent_message.clear();
  return reported_message.c_str();
}

// ---- acl_rt.h: devices and contexts ----
int aclrtGetDeviceCount(std::uint32_t* count) {
  std::lock_guard lock(mutex);
  if (int r = ready("aclrtGetDeviceCount"); r != ok) return r;
  if (count == nullptr) return fail(invalid_param, "aclrtGetDeviceCount", "count is null");
  *count = static_cast<std::uint32_t>(state.device_count);
  return ok;
}

// Makes the device's default context current on this thread; counted, as ACL counts them.
int aclrtSetDevice(std::int32_t deviceId) {
  std::lock_guard lock(mutex);
  if (int r = ready("aclrtSetDevice"); r != ok) return r;
  if (deviceId < 0 || deviceId >= state.device_count) return fail(rt_invalid_device, "aclrtSetDevice", "no such device");
  state.references[deviceId] += 1;
  current_context = &device_contexts[deviceId];
  return ok;
}

// At the last reset the default context goes away; the caller's thread loses it as current.
int aclrtResetDevice(std::int32_t deviceId) {
  std::lock_guard lock(mutex);
  if (int r = ready("aclrtResetDevice"); r != ok) return r;
  if (deviceId < 0 || deviceId >= state.device_count || state.references[deviceId] == 0) {
    return fail(rt_invalid_device, "aclrtResetDevice", "the device was not set");
  }
  state.references[deviceId] -= 1;
  if (state.references[deviceId] == 0 && current_context == &device_contexts[deviceId]) current_context = nullptr;
  return ok;
}

int aclrtGetCurrentContext(void** context) {
  std::lock_guard lock(mutex);
  if (int r = ready("aclrtGetCurrentContext"); r != ok) return r;
  if (context == nullptr) return fail(invalid_param, "aclrtGetCurrentContext", "context is null");
  if (current_context == nullptr) return fail(rt_context_null, "aclrtGetCurrentContext", "no current context");
  *context = current_context;
  return ok;
}

int aclrtSetCurrentContext(void* context) {
  std::lock_guard lock(mutex);
  if (int r = ready("aclrtSetCurrentContext"); r != ok) return r;
  if (context == nullptr) return fail(invalid_param, "aclrtSetCurrentContext", "context is null");
  const int device = context_device(context);
  if (device < 0 || state.references[device] == 0) {
    return fail(rt_param_invalid, "aclrtSetCurrentContext", "not a live context");
  }
  current_context = context;
  return ok;
}

int aclrtSynchronizeDevice() {
  std::lock_guard lock(mutex);
  if (int r = ready_in_context("aclrtSynchronizeDevice"); r != ok) return r;
  for (Event* event : state.events) event->complete = true;
  return ok;
}

// ---- acl_rt.h: memory ----
int aclrtGetMemInfo(int attr, std::size_t* free, std::size_t* total) {
  std::lock_guard lock(mutex);
  if (int r = ready_in_context("aclrtGetMemInfo"); r != ok) return r;
  if (free == nullptr || total == nullptr) return fail(invalid_param, "aclrtGetMemInfo", "an output is null");
  if (attr != hbm_mem && attr != hbm_mem_huge) return fail(invalid_param, "aclrtGetMemInfo", "the stand-in has HBM only");
  *free = state.limit > state.used ? state.limit - state.used : 0;
  *total = state.total;
  return ok;
}

int aclrtMemGetAllocationGranularity(PhysicalMemProp* prop, int option, std::size_t* granularity) {
  std::lock_guard lock(mutex);
  if (int r = ready("aclrtMemGetAllocationGranularity"); r != ok) return r;
  if (prop == nullptr || granularity == nullptr) {
    return fail(invalid_param, "aclrtMemGetAllocationGranularity", "prop or granularity is null");
  }
  if (option != 0 && option != 1) return fail(invalid_param, "aclrtMemGetAllocationGranularity", "bad option");
  int code = ok;
  const char* why = nullptr;
  if (!good_properties(prop, code, why)) return fail(code, "aclrtMemGetAllocationGranularity", why);
  *granularity = granule;
  return ok;
}

int aclrtReserveMemAddress(void** virPtr, std::size_t size, std::size_t alignment, void* expectPtr,
                           std::uint64_t flags) {
  std::lock_guard lock(mutex);
  if (int r = ready_in_context("aclrtReserveMemAddress"); r != ok) return r;
  if (virPtr == nullptr || size == 0) return fail(invalid_param, "aclrtReserveMemAddress", "null pointer or size 0");
  if (alignment != 0 || expectPtr != nullptr) {
    return fail(invalid_param, "aclrtReserveMemAddress", "alignment and expectPtr are reserved: 0 and null");
  }
  if (flags != reserve_normal && flags != reserve_huge) {
    return fail(invalid_param, "aclrtReserveMemAddress", "flags is the page type: 0 normal, 1 huge");
  }
  if (size % granule != 0) return fail(rt_param_invalid, "aclrtReserveMemAddress", "size is no multiple of 2 MiB");
  // Granule-aligned and no more: an address that is 2 MiB past a 4 MiB boundary.
  const std::size_t span = size + 2 * granule;
  void* raw = mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return fail(rt_memory_allocation, "aclrtReserveMemAddress", "no address space");
  const auto start = reinterpret_cast<std::uintptr_t>(raw);
  std::uintptr_t base = (start + granule - 1) / granule * granule;
  if (base % (2 * granule) == 0) base += granule;
  if (base > start) munmap(raw, base - start);
  if (start + span > base + size) munmap(reinterpret_cast<void*>(base + size), start + span - (base + size));
  state.reservations.emplace(base, Reservation{size, flags});
  *virPtr = reinterpret_cast<void*>(base);
  return ok;
}

int aclrtReleaseMemAddress(void* virPtr) {
  std::lock_guard lock(mutex);
  if (int r = ready_in_context("aclrtReleaseMemAddress"); r != ok) return r;
  if (virPtr == nullptr) return fail(invalid_param, "aclrtReleaseMemAddress", "null pointer");
  auto found = state.reservations.find(reinterpret_cast<std::uintptr_t>(virPtr));
  if (found == state.reservations.end()) return fail(rt_param_invalid, "aclrtReleaseMemAddress", "no reservation starts there");
  const std::uintptr_t end = found->first + found->second.size;
  auto mapping = state.mappings.lower_bound(found->first);
  if (mapping != state.mappings.end() && mapping->first < end) {
    return fail(rt_param_invalid, "aclrtReleaseMemAddress", "the reservation still holds a mapping");
  }
  munmap(virPtr, found->second.size);
  state.reservations.erase(found);
  return ok;
}

int aclrtMallocPhysical(void** handle, std::size_t size, const PhysicalMemProp* prop, std::uint64_t flags) {
  std::lock_guard lock(mutex);
  if (int r = ready_in_context("aclrtMallocPhysical"); r != ok) return r;
  if (handle == nullptr || prop == nullptr || size == 0) {
    return fail(invalid_param, "aclrtMallocPhysical", "null pointer or size 0");
  }
  if (flags != 0) return fail(invalid_param, "aclrtMallocPhysical", "flags is reserved: 0");
  int code = ok;
  const char* why = nullptr;
  if (!good_properties(prop, code, why)) return fail(code, "aclrtMallocPhysical", why);
  if (size % granule != 0) return fail(rt_param_invalid, "aclrtMallocPhysical", "size is no multiple of 2 MiB");
  if (state.used + size > state.limit) return fail(rt_memory_allocation, "aclrtMallocPhysical", "out of device memory");
  const int fd = memfd_create("fake-ascend", 0);
  if (fd < 0) return fail(rt_memory_allocation, "aclrtMallocPhysical", "memfd_create failed");
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    close(fd);
    return fail(rt_memory_allocation, "aclrtMallocPhysical", "ftruncate failed");
  }
  auto* physical = new Physical{fd, size, prop->memAttr, false};
  state.handles.insert(physical);
  state.used += size;
  *handle = physical;
  return ok;
}

int aclrtFreePhysical(void* handle) {
  std::lock_guard lock(mutex);
  if (int r = ready_in_context("aclrtFreePhysical"); r != ok) return r;
  if (handle == nullptr) return fail(invalid_param, "aclrtFreePhysical", "null handle");
  Physical* physical = find_handle(handle);
  if (physical == nullptr) return fail(rt_param_invalid, "aclrtFreePhysical", "no such handle");
  if (physical->mapped) return fail(rt_param_invalid, "aclrtFreePhysical", "the handle is still mapped");
  close(physical->fd);
  state.used -= physical->size;
  state.handles.erase(physical);
  delete physical;
  return ok;
}

int aclrtMapMem(void* virPtr, std::size_t size, std::size_t offset, void* handle, std::uint64_t flags) {
  std::lock_guard lock(mutex);
  if (int r = ready_in_context("aclrtMapMem"); r != ok) return r;
  if (virPtr == nullptr || handle == nullptr || size == 0) {
    return fail(invalid_param, "aclrtMapMem", "null pointer, null handle or size 0");
  }
  if (flags != 0) return fail(invalid_param, "aclrtMapMem", "flags is reserved: 0");
  Physical* physical = find_handle(handle);
  if (physical == nullptr) return fail(rt_param_invalid, "aclrtMapMem", "no such handle");
  if (offset != 0 || size != physical->size) {
    return fail(rt_param_invalid, "aclrtMapMem", "maps a whole handle only: offset 0, the handle's size");
  }
  if (physical->mapped) return fail(rt_param_invalid, "aclrtMapMem", "the handle is already mapped");
  const auto at = reinterpret_cast<std::uintptr_t>(virPtr);
  if (at % granule != 0) return fail(rt_param_invalid, "aclrtMapMem", "the address is not 2 MiB aligned");
  const Reservation* reservation = holding(at, size);
  if (reservation == nullptr) return fail(rt_param_invalid, "aclrtMapMem", "the range is not inside one reservation");
  const std::uint64_t page_type = physical->mem_attr == hbm_mem_huge ? reserve_huge : reserve_normal;
  if (reservation->page_type != page_type) {
    return fail(rt_param_invalid, "aclrtMapMem", "the handle's page type differs from the reservation's");
  }
  auto next = state.mappings.lower_bound(at);
  if (next != state.mappings.end() && next->first < at + size) {
    return fail(rt_param_invalid, "aclrtMapMem", "the range overlaps a mapping");
  }
  if (next != state.mappings.begin() && std::prev(next)->first + std::prev(next)->second.size > at) {
    return fail(rt_param_invalid, "aclrtMapMem", "the range overlaps a mapping");
  }
  if (mmap(virPtr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, physical->fd, 0) == MAP_FAILED) {
    return fail(rt_memory_allocation, "aclrtMapMem", "mmap failed");
  }
  physical->mapped = true;
  state.mappings.emplace(at, Mapping{size, physical});
  return ok;
}

int aclrtUnmapMem(void* virPtr) {
  std::lock_guard lock(mutex);
  if (int r = ready_in_context("aclrtUnmapMem"); r != ok) return r;
  if (virPtr == nullptr) return fail(invalid_param, "aclrtUnmapMem", "null pointer");
  auto found = state.mappings.find(reinterpret_cast<std::uintptr_t>(virPtr));
  if (found == state.mappings.end()) return fail(rt_param_invalid, "aclrtUnmapMem", "no mapping starts there");
  mmap(virPtr, found->second.size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  found->second.handle->mapped = false;
  state.mappings.erase(found);
  return ok;
}

// Host to device and device to host only, the two the driver uses; the device side must be mapped.
int aclrtMallocHost(void** hostPtr, std::size_t size) {
  std::lock_guard lock(mutex);
  if (int r = ready_in_context("aclrtMallocHost"); r != ok) return r;
  if (hostPtr == nullptr) return fail(invalid_param, "aclrtMallocHost", "null pointer");
  if (size == 0) return fail(invalid_param, "aclrtMallocHost", "size must not be 0");
  if (size > state.host_limit - state.host_used) {
    return fail(rt_memory_allocation, "aclrtMallocHost", "the host limit is reached");
  }
  void* data = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (data == MAP_FAILED) return fail(rt_memory_allocation, "aclrtMallocHost", "mmap failed");
  state.host_buffers.emplace(reinterpret_cast<std::uintptr_t>(data), size);
  state.host_used += size;
  *hostPtr = data;
  return ok;
}

int aclrtFreeHost(void* hostPtr) {
  std::lock_guard lock(mutex);
  if (int r = ready_in_context("aclrtFreeHost"); r != ok) return r;
  auto found = state.host_buffers.find(reinterpret_cast<std::uintptr_t>(hostPtr));
  if (found == state.host_buffers.end()) {
    return fail(invalid_param, "aclrtFreeHost", "not a pointer aclrtMallocHost returned");
  }
  munmap(hostPtr, found->second);
  state.host_used -= found->second;
  state.host_buffers.erase(found);
  return ok;
}

int aclrtMemcpy(void* dst, std::size_t destMax, const void* src, std::size_t count, int kind) {
  std::lock_guard lock(mutex);
  if (int r = ready_in_context("aclrtMemcpy"); r != ok) return r;
  if (dst == nullptr || src == nullptr) return fail(invalid_param, "aclrtMemcpy", "null pointer");
  if (count > destMax) return fail(invalid_param, "aclrtMemcpy", "count exceeds destMax");
  if (kind != memcpy_host_to_device && kind != memcpy_device_to_host) {
    return fail(invalid_param, "aclrtMemcpy", "the stand-in copies host to device and device to host only");
  }
  const void* device = kind == memcpy_host_to_device ? static_cast<const void*>(dst) : src;
  if (!mapped_range(reinterpret_cast<std::uintptr_t>(device), count)) {
    return fail(rt_param_invalid, "aclrtMemcpy", "the device range is not mapped");
  }
  const bool to_host = kind == memcpy_device_to_host;
  if (overruns_host_buffer(reinterpret_cast<std::uintptr_t>(to_host ? dst : src), to_host ? destMax : count)) {
    return fail(invalid_param, "aclrtMemcpy", "the host range runs past the end of its aclrtMallocHost buffer");
  }
  std::memcpy(dst, src, count);
  return ok;
}

// ---- acl_rt.h: events and streams ----
int aclrtCreateEvent(void** event) {
  std::lock_guard lock(mutex);
  if (int r = ready_in_context("aclrtCreateEvent"); r != ok) return r;
  if (event == nullptr) return fail(invalid_param, "aclrtCreateEvent", "null pointer");
  auto* made = new Event{};
  state.events.insert(made);
  *event = made;
  return ok;
}

int aclrtRecordEvent(void* event, void* stream) {
  std::lock_guard lock(mutex);
  if (int r = ready_in_context("aclrtRecordEvent"); r != ok) return r;
  Event* found = find_event(event);
  if (found == nullptr) return fail(invalid_param, "aclrtRecordEvent", "no such event");
  found->recorded = true;
  found->complete = !state.events_pending;
  found->stream = stream;
  return ok;
}

#ifndef FAKE_ASCEND_OLD_EVENT_QUERY
int aclrtQueryEventStatus(void* event, int* status) {
  std::lock_guard lock(mutex);
  if (int r = ready_in_context("aclrtQueryEventStatus"); r != ok) return r;
  Event* found = find_event(event);
  if (found == nullptr || status == nullptr) return fail(invalid_param, "aclrtQueryEventStatus", "no such event");
  *status = found->recorded && found->complete ? event_recorded_complete : event_recorded_not_ready;
  return ok;
}
#else
// Older CANN has only the deprecated aclrtQueryEvent, whose aclrtEventStatus counts the other way round.
int aclrtQueryEvent(void* event, int* status) {
  std::lock_guard lock(mutex);
  if (int r = ready_in_context("aclrtQueryEvent"); r != ok) return r;
  Event* found = find_event(event);
  if (found == nullptr || status == nullptr) return fail(invalid_param, "aclrtQueryEvent", "no such event");
  *status = found->recorded && found->complete ? event_status_complete : event_status_not_ready;
  return ok;
}
#endif

int aclrtSynchronizeEvent(void* event) {
  std::lock_guard lock(mutex);
  if (int r = ready_in_context("aclrtSynchronizeEvent"); r != ok) return r;
  Event* found = find_event(event);
  if (found == nullptr) return fail(invalid_param, "aclrtSynchronizeEvent", "no such event");
  found->complete = true;
  return ok;
}

int aclrtDestroyEvent(void* event) {
  std::lock_guard lock(mutex);
  if (int r = ready_in_context("aclrtDestroyEvent"); r != ok) return r;
  Event* found = find_event(event);
  if (found == nullptr) return fail(invalid_param, "aclrtDestroyEvent", "no such event");
  state.events.erase(found);
  delete found;
  return ok;
}

int aclrtSynchronizeStream(void* stream) {
  std::lock_guard lock(mutex);
  if (int r = ready_in_context("aclrtSynchronizeStream"); r != ok) return r;
  for (Event* event : state.events) {
    if (event->recorded && event->stream == stream) event->complete = true;
  }
  return ok;
}

}  // extern "C"
