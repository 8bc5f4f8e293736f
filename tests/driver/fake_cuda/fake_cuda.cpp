// A fake libcuda for tests: the CUDA driver calls the cuda driver uses, exported under their real symbol
// names and served from host memory, so that the cuda driver's own code (symbol loading, context handling,
// error mapping, every platform call) runs on machines without a GPU.
//
// Physical memory is a memfd per allocation handle, a reservation is a PROT_NONE mapping, cuMemMap maps
// the memfd over it (still inaccessible), cuMemSetAccess makes it read-write and cuMemUnmap puts PROT_NONE
// back. Calls that need a context fail with CUDA_ERROR_INVALID_CONTEXT unless the primary context is
// current on the calling thread, as on the real driver. Tests steer it with the fake_cuda_* functions.
//
// Host buffers (cuMemHostAlloc, cuMemFreeHost) are anonymous mappings, kept in a table: cuMemFreeHost of
// a pointer not in it is CUDA_ERROR_INVALID_VALUE, and a copy that would run past the end of the buffer it
// starts in is refused the same way (real CUDA would corrupt memory instead). A host limit steers out of
// memory.
//
// Stream capture: cuStreamBeginCapture_v2 and cuStreamEndCapture mark a stream capturing and not, and
// cuStreamIsCapturing answers from that mark (NONE 0, ACTIVE 1, INVALIDATED 2), as the CUDA runtime's
// cudaStreamBeginCapture would; no graph is built (EndCapture hands back a token). The legacy stream (0)
// cannot capture, as on CUDA. Built with FAKE_CUDA_NO_STREAM_CAPTURE, cuStreamIsCapturing is not exported:
// a libcuda without it.
//
// Sharing: cuMemExportToShareableHandle answers a duplicate of the allocation's memfd for an allocation
// created with the POSIX file descriptor handle type requested (else CUDA_ERROR_INVALID_VALUE, as CUDA refuses
// it); cuMemImportFromShareableHandle takes a descriptor of another fake allocation's memfd (anything else is
// CUDA_ERROR_INVALID_VALUE) and keeps a duplicate of it, so the memory lives while either side holds it.
// Imported memory is not counted against the limit. Built with FAKE_CUDA_NO_SHARING, neither is exported.
//
// Built with the CUDA driver's declarations of our own (the CUDA values: 0 success, 1 invalid value,
// 2 out of memory, 3 not initialized, 100 no device, 101 invalid device, 201 invalid context, 400 invalid
// handle, 401 illegal state, 600 not ready, 900 capture unsupported, 901 capture invalidated, 903 capture
// unmatched).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>

namespace {

constexpr int ok = 0;
constexpr int invalid_value = 1;
constexpr int out_of_memory = 2;
constexpr int not_initialized = 3;
constexpr int invalid_device = 101;
constexpr int invalid_context = 201;
constexpr int invalid_handle = 400;
constexpr int illegal_state = 401;
constexpr int stream_capture_unsupported = 900;
constexpr int stream_capture_invalidated = 901;
constexpr int stream_capture_unmatched = 903;
constexpr int capture_status_active = 1;       // CU_STREAM_CAPTURE_STATUS_ACTIVE
constexpr int capture_status_invalidated = 2;  // CU_STREAM_CAPTURE_STATUS_INVALIDATED
constexpr std::size_t granule = std::size_t{2} << 20;

struct Location {
  int type;
  int id;
};
struct AllocationProp {
  int type;
  int requestedHandleTypes;
  Location location;
  void* win32HandleMetaData;
  unsigned char allocFlags[8];
};
struct AccessDesc {
  Location location;
  int flags;
};

struct Allocation {
  int fd = -1;
  std::size_t size = 0;
  bool shareable = false;  // created with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR requested, or imported
  bool imported = false;
};

struct State {
  int init_result = ok;
  int device_count = 1;
  int vmm_supported = 1;
  std::size_t total = std::size_t{256} << 20;
  std::size_t limit = std::size_t{256} << 20;  // physical bytes cuMemCreate grants before out of memory
  std::size_t used = 0;
  bool initialized = false;
  int primary_references = 0;
  std::map<unsigned long long, Allocation> allocations;
  unsigned long long next_handle = 1;
  int events = 0;
  std::map<void*, std::size_t> host_buffers;  // cuMemHostAlloc's: pointer -> size
  std::size_t host_limit = std::size_t{1} << 40;  // bytes cuMemHostAlloc grants in all
  std::size_t host_used = 0;
  std::map<void*, int> capturing;  // stream -> its capture status, for streams between begin and end capture
  int is_capturing_result = ok;    // what cuStreamIsCapturing answers instead of the status, when not ok
  int is_capturing_calls = 0;
};

std::mutex mutex;
State state;
int primary_context_object;  // its address is the primary context
thread_local void* current_context = nullptr;

void* primary() { return &primary_context_object; }

// The gate of every call but cuInit and the error-text calls.
int ready() { return state.initialized ? ok : not_initialized; }
int ready_in_context() {
  if (!state.initialized) return not_initialized;
  return current_context == primary() ? ok : invalid_context;
}

}  // namespace

extern "C" {

// ---- test controls ----
void fake_cuda_reset() {
  std::lock_guard lock(mutex);
  for (auto& [handle, allocation] : state.allocations) close(allocation.fd);
  for (auto& [data, size] : state.host_buffers) munmap(data, size);
  state = State{};
  current_context = nullptr;
}
void fake_cuda_set_init_result(int result) {
  std::lock_guard lock(mutex);
  state.init_result = result;
}
void fake_cuda_set_device_count(int count) {
  std::lock_guard lock(mutex);
  state.device_count = count;
}
void fake_cuda_set_vmm_supported(int supported) {
  std::lock_guard lock(mutex);
  state.vmm_supported = supported;
}
void fake_cuda_set_physical_limit(std::size_t bytes) {
  std::lock_guard lock(mutex);
  state.limit = bytes;
}
int fake_cuda_primary_references() {
  std::lock_guard lock(mutex);
  return state.primary_references;
}
std::size_t fake_cuda_live_allocations() {
  std::lock_guard lock(mutex);
  return state.allocations.size();
}
std::size_t fake_cuda_live_host_buffers() {
  std::lock_guard lock(mutex);
  return state.host_buffers.size();
}
void fake_cuda_set_host_limit(std::size_t bytes) {
  std::lock_guard lock(mutex);
  state.host_limit = bytes;
}
int fake_cuda_live_events() {
  std::lock_guard lock(mutex);
  return state.events;
}
void* fake_cuda_current_context() { return current_context; }
// A capture gone wrong (as after a call the capture does not allow): the stream stays capturing, INVALIDATED.
int fake_cuda_invalidate_capture(void* stream) {
  std::lock_guard lock(mutex);
  auto found = state.capturing.find(stream);
  if (found == state.capturing.end()) return invalid_value;
  found->second = capture_status_invalidated;
  return ok;
}
// cuStreamIsCapturing fails with `result` (ok: answers again), and how often it was called.
void fake_cuda_set_is_capturing_result(int result) {
  std::lock_guard lock(mutex);
  state.is_capturing_result = result;
}
int fake_cuda_is_capturing_calls() {
  std::lock_guard lock(mutex);
  return state.is_capturing_calls;
}
void fake_cuda_set_current_context(void* context) { current_context = context; }

// ---- the CUDA driver API ----
int cuGetErrorName(int error, const char** name) {
  switch (error) {
    case ok: *name = "CUDA_SUCCESS"; return ok;
    case invalid_value: *name = "CUDA_ERROR_INVALID_VALUE"; return ok;
    case out_of_memory: *name = "CUDA_ERROR_OUT_OF_MEMORY"; return ok;
    case not_initialized: *name = "CUDA_ERROR_NOT_INITIALIZED"; return ok;
    case 100: *name = "CUDA_ERROR_NO_DEVICE"; return ok;
    case invalid_device: *name = "CUDA_ERROR_INVALID_DEVICE"; return ok;
    case invalid_context: *name = "CUDA_ERROR_INVALID_CONTEXT"; return ok;
    case invalid_handle: *name = "CUDA_ERROR_INVALID_HANDLE"; return ok;
    case illegal_state: *name = "CUDA_ERROR_ILLEGAL_STATE"; return ok;
    case 600: *name = "CUDA_ERROR_NOT_READY"; return ok;
    case stream_capture_unsupported: *name = "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"; return ok;
    case stream_capture_invalidated: *name = "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"; return ok;
    case stream_capture_unmatched: *name = "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED"; return ok;
    default: return invalid_value;
  }
}

int cuGetErrorString(int error, const char** text) {
  switch (error) {
    case out_of_memory: *text = "out of memory"; return ok;
    case 100: *text = "no CUDA-capable device is detected"; return ok;
    case invalid_context: *text = "invalid device context"; return ok;
    default: {
      const char* name = nullptr;
      if (cuGetErrorName(error, &name) != ok) return invalid_value;
      *text = name;
      return ok;
    }
  }
}

int cuInit(unsigned int flags) {
  std::lock_guard lock(mutex);
  if (flags != 0) return invalid_value;
  if (state.init_result != ok) return state.init_result;
  state.initialized = true;
  return ok;
}

int cuDeviceGetCount(int* count) {
  std::lock_guard lock(mutex);
  if (int r = ready(); r != ok) return r;
  *count = state.device_count;
  return ok;
}

int cuDeviceGet(int* device, int ordinal) {
  std::lock_guard lock(mutex);
  if (int r = ready(); r != ok) return r;
  if (ordinal < 0 || ordinal >= state.device_count) return invalid_device;
  *device = ordinal;
  return ok;
}

int cuDeviceGetAttribute(int* value, int attribute, int device) {
  std::lock_guard lock(mutex);
  if (int r = ready(); r != ok) return r;
  if (device < 0 || device >= state.device_count) return invalid_device;
  *value = attribute == 102 ? state.vmm_supported : 0;  // 102: VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
#ifndef FAKE_CUDA_NO_SHARING
  if (attribute == 103) *value = 1;  // 103: HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED
#endif
  return ok;
}

int cuDevicePrimaryCtxRetain(void** context, int device) {
  std::lock_guard lock(mutex);
  if (int r = ready(); r != ok) return r;
  if (device < 0 || device >= state.device_count) return invalid_device;
  state.primary_references += 1;
  *context = primary();
  return ok;
}

int cuDevicePrimaryCtxRelease_v2(int device) {
  std::lock_guard lock(mutex);
  if (int r = ready(); r != ok) return r;
  if (device < 0 || device >= state.device_count || state.primary_references == 0) return invalid_device;
  state.primary_references -= 1;
  return ok;
}

int cuCtxGetCurrent(void** context) {
  std::lock_guard lock(mutex);
  if (int r = ready(); r != ok) return r;
  *context = current_context;
  return ok;
}

int cuCtxSetCurrent(void* context) {
  std::lock_guard lock(mutex);
  if (int r = ready(); r != ok) return r;
  current_context = context;
  return ok;
}

int cuCtxSynchronize() {
  std::lock_guard lock(mutex);
  return ready_in_context();
}

int cuMemGetInfo_v2(std::size_t* free_bytes, std::size_t* total_bytes) {
  std::lock_guard lock(mutex);
  if (int r = ready_in_context(); r != ok) return r;
  *free_bytes = state.limit > state.used ? state.limit - state.used : 0;
  *total_bytes = state.total;
  return ok;
}

int cuMemGetAllocationGranularity(std::size_t* granularity, const AllocationProp* prop, int option) {
  std::lock_guard lock(mutex);
  if (int r = ready(); r != ok) return r;
  if (prop == nullptr || prop->type != 1 || prop->location.type != 1 || option < 0 || option > 1) {
    return invalid_value;
  }
  *granularity = granule;
  return ok;
}

int cuMemAddressReserve(unsigned long long* base, std::size_t size, std::size_t alignment, unsigned long long,
                        unsigned long long) {
  std::lock_guard lock(mutex);
  if (int r = ready(); r != ok) return r;
  if (alignment == 0) alignment = granule;
  if (size == 0 || size % granule != 0 || alignment % granule != 0) return invalid_value;
  void* raw = mmap(nullptr, size + alignment, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return out_of_memory;
  const auto start = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t aligned = (start + alignment - 1) / alignment * alignment;
  if (aligned > start) munmap(raw, aligned - start);
  const std::uintptr_t end = start + size + alignment;
  if (end > aligned + size) munmap(reinterpret_cast<void*>(aligned + size), end - (aligned + size));
  *base = aligned;
  return ok;
}

int cuMemAddressFree(unsigned long long base, std::size_t size) {
  std::lock_guard lock(mutex);
  if (int r = ready(); r != ok) return r;
  return munmap(reinterpret_cast<void*>(static_cast<std::uintptr_t>(base)), size) == 0 ? ok : invalid_value;
}

int cuMemCreate(unsigned long long* handle, std::size_t size, const AllocationProp* prop, unsigned long long flags) {
  std::lock_guard lock(mutex);
  if (int r = ready(); r != ok) return r;
  if (prop == nullptr || prop->type != 1 || prop->location.type != 1 || flags != 0) return invalid_value;
  if (prop->location.id < 0 || prop->location.id >= state.device_count) return invalid_device;
  if (size == 0 || size % granule != 0) return invalid_value;
  if (state.used + size > state.limit) return out_of_memory;
  const int fd = memfd_create("fake-cuda", 0);
  if (fd < 0) return out_of_memory;
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    close(fd);
    return out_of_memory;
  }
  *handle = state.next_handle++;
  state.allocations.emplace(*handle, Allocation{fd, size, prop->requestedHandleTypes == 1, false});
  state.used += size;
  return ok;
}

// As on CUDA, memory stays reachable through its mappings after release (the mapping holds the memfd).
int cuMemRelease(unsigned long long handle) {
  std::lock_guard lock(mutex);
  if (int r = ready(); r != ok) return r;
  auto found = state.allocations.find(handle);
  if (found == state.allocations.end()) return invalid_handle;
  close(found->second.fd);
  if (!found->second.imported) state.used -= found->second.size;
  state.allocations.erase(found);
  return ok;
}

#ifndef FAKE_CUDA_NO_SHARING
int cuMemExportToShareableHandle(void* shareable, unsigned long long handle, int type, unsigned long long flags) {
  std::lock_guard lock(mutex);
  if (int r = ready(); r != ok) return r;
  auto found = state.allocations.find(handle);
  if (found == state.allocations.end()) return invalid_handle;
  if (shareable == nullptr || type != 1 || flags != 0 || !found->second.shareable) return invalid_value;
  const int copy = fcntl(found->second.fd, F_DUPFD_CLOEXEC, 0);
  if (copy < 0) return out_of_memory;
  *static_cast<int*>(shareable) = copy;
  return ok;
}

int cuMemImportFromShareableHandle(unsigned long long* handle, void* shareable, int type) {
  std::lock_guard lock(mutex);
  if (int r = ready(); r != ok) return r;
  if (handle == nullptr || type != 1) return invalid_value;
  const int fd = static_cast<int>(reinterpret_cast<std::uintptr_t>(shareable));
  char link[64];
  char target[256] = {};
  std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  struct stat status {};
  if (fstat(fd, &status) != 0 || readlink(link, target, sizeof target - 1) < 0 ||
      std::strncmp(target, "/memfd:fake-cuda", 16) != 0) {
    return invalid_value;
  }
  const int copy = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (copy < 0) return out_of_memory;
  *handle = state.next_handle++;
  state.allocations.emplace(*handle, Allocation{copy, static_cast<std::size_t>(status.st_size), true, true});
  return ok;
}
#endif

int cuMemMap(unsigned long long at, std::size_t size, std::size_t offset, unsigned long long handle,
             unsigned long long flags) {
  std::lock_guard lock(mutex);
  if (int r = ready(); r != ok) return r;
  auto found = state.allocations.find(handle);
  if (found == state.allocations.end()) return invalid_handle;
  if (flags != 0 || offset + size > found->second.size || at % granule != 0) return invalid_value;
  void* placed = mmap(reinterpret_cast<void*>(static_cast<std::uintptr_t>(at)), size, PROT_NONE,
                      MAP_SHARED | MAP_FIXED, found->second.fd, static_cast<off_t>(offset));
  return placed == MAP_FAILED ? invalid_value : ok;
}

int cuMemSetAccess(unsigned long long at, std::size_t size, const AccessDesc* descriptors, std::size_t count) {
  std::lock_guard lock(mutex);
  if (int r = ready(); r != ok) return r;
  if (descriptors == nullptr || count != 1 || descriptors[0].location.type != 1) return invalid_value;
  const int protection = descriptors[0].flags == 3 ? PROT_READ | PROT_WRITE : PROT_NONE;
  return mprotect(reinterpret_cast<void*>(static_cast<std::uintptr_t>(at)), size, protection) == 0 ? ok
                                                                                                   : invalid_value;
}

int cuMemUnmap(unsigned long long at, std::size_t size) {
  std::lock_guard lock(mutex);
  if (int r = ready(); r != ok) return r;
  void* placed = mmap(reinterpret_cast<void*>(static_cast<std::uintptr_t>(at)), size, PROT_NONE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  return placed == MAP_FAILED ? invalid_value : ok;
}

// A host range that starts inside a cuMemHostAlloc buffer must end inside it; other host memory is
// pageable memory the fake cannot check.
static bool overruns_host_buffer(const void* host, std::size_t size) {
  const auto* at = static_cast<const char*>(host);
  auto after = state.host_buffers.upper_bound(const_cast<void*>(host));
  if (after == state.host_buffers.begin()) return false;
  const auto& [data, length] = *std::prev(after);
  const auto* start = static_cast<const char*>(data);
  return at < start + length && size > length - static_cast<std::size_t>(at - start);
}

int cuMemHostAlloc(void** pointer, std::size_t size, unsigned int flags) {
  std::lock_guard lock(mutex);
  if (int r = ready_in_context(); r != ok) return r;
  if (pointer == nullptr || size == 0 || (flags & ~0x7u) != 0) return invalid_value;  // PORTABLE|DEVICEMAP|WC
  if (size > state.host_limit - state.host_used) return out_of_memory;
  void* data = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (data == MAP_FAILED) return out_of_memory;
  state.host_buffers.emplace(data, size);
  state.host_used += size;
  *pointer = data;
  return ok;
}

int cuMemFreeHost(void* pointer) {
  std::lock_guard lock(mutex);
  if (int r = ready_in_context(); r != ok) return r;
  auto found = state.host_buffers.find(pointer);
  if (found == state.host_buffers.end()) return invalid_value;
  munmap(found->first, found->second);
  state.host_used -= found->second;
  state.host_buffers.erase(found);
  return ok;
}

int cuMemcpyHtoD_v2(unsigned long long destination, const void* source, std::size_t size) {
  std::lock_guard lock(mutex);
  if (int r = ready_in_context(); r != ok) return r;
  if (overruns_host_buffer(source, size)) return invalid_value;
  std::memcpy(reinterpret_cast<void*>(static_cast<std::uintptr_t>(destination)), source, size);
  return ok;
}

int cuMemcpyDtoH_v2(void* destination, unsigned long long source, std::size_t size) {
  std::lock_guard lock(mutex);
  if (int r = ready_in_context(); r != ok) return r;
  if (overruns_host_buffer(destination, size)) return invalid_value;
  std::memcpy(destination, reinterpret_cast<const void*>(static_cast<std::uintptr_t>(source)), size);
  return ok;
}

// Events: work is never pending, so every recorded event is complete.
struct FakeEvent {
  bool recorded = false;
};

int cuEventCreate(void** event, unsigned int) {
  std::lock_guard lock(mutex);
  if (int r = ready_in_context(); r != ok) return r;
  *event = new FakeEvent{};
  state.events += 1;
  return ok;
}

int cuEventRecord(void* event, void*) {
  std::lock_guard lock(mutex);
  if (int r = ready_in_context(); r != ok) return r;
  if (event == nullptr) return invalid_handle;
  static_cast<FakeEvent*>(event)->recorded = true;
  return ok;
}

int cuEventQuery(void* event) {
  std::lock_guard lock(mutex);
  if (int r = ready_in_context(); r != ok) return r;
  return event == nullptr ? invalid_handle : ok;
}

int cuEventSynchronize(void* event) {
  std::lock_guard lock(mutex);
  if (int r = ready_in_context(); r != ok) return r;
  return event == nullptr ? invalid_handle : ok;
}

int cuEventDestroy_v2(void* event) {
  std::lock_guard lock(mutex);
  if (int r = ready_in_context(); r != ok) return r;
  if (event == nullptr) return invalid_handle;
  delete static_cast<FakeEvent*>(event);
  state.events -= 1;
  return ok;
}

int cuStreamSynchronize(void*) {
  std::lock_guard lock(mutex);
  return ready_in_context();
}

// ---- stream capture (the mode, global, thread-local or relaxed, is accepted and not acted on)
int cuStreamBeginCapture_v2(void* stream, int mode) {
  std::lock_guard lock(mutex);
  if (int r = ready_in_context(); r != ok) return r;
  if (mode < 0 || mode > 2) return invalid_value;
  if (stream == nullptr) return stream_capture_unsupported;  // the legacy stream cannot capture
  if (state.capturing.contains(stream)) return illegal_state;
  state.capturing.emplace(stream, capture_status_active);
  return ok;
}

int cuStreamEndCapture(void* stream, void** graph) {
  static int graph_token;
  std::lock_guard lock(mutex);
  if (int r = ready_in_context(); r != ok) return r;
  if (graph == nullptr) return invalid_value;
  auto found = state.capturing.find(stream);
  if (found == state.capturing.end()) return stream_capture_unmatched;
  const bool invalidated = found->second == capture_status_invalidated;
  state.capturing.erase(found);
  *graph = invalidated ? nullptr : &graph_token;
  return invalidated ? stream_capture_invalidated : ok;
}

#ifndef FAKE_CUDA_NO_STREAM_CAPTURE
int cuStreamIsCapturing(void* stream, int* status) {
  std::lock_guard lock(mutex);
  state.is_capturing_calls += 1;
  if (int r = ready_in_context(); r != ok) return r;
  if (status == nullptr) return invalid_value;
  if (state.is_capturing_result != ok) return state.is_capturing_result;
  auto found = state.capturing.find(stream);
  *status = found == state.capturing.end() ? 0 : found->second;
  return ok;
}
#endif

}  // extern "C"
