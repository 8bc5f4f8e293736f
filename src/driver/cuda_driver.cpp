// cuda: the CUDA driver API's virtual memory management, loaded at run time from libcuda.so.1.
//
// No CUDA header is needed to build: the few types and constants used are declared below (namespace cu).
// When cuda.h is present at build time (TESSERA_HAVE_CUDA_H), every declaration is checked against it:
// struct sizes and offsets, constant values, the exact function types, and the versioned symbol names that
// the header maps the public names to (cuMemGetInfo -> cuMemGetInfo_v2).
//
// Context: all calls run in the device's primary context, the one the CUDA runtime and PyTorch use, so that
// the events and streams Tessera sees belong to the same context. Each call makes it current for its
// duration if the calling thread has another context (or none) current; that is one cuCtxGetCurrent per
// call in the common case.
//
// Stream order is the allocator's business: before it unmaps or releases memory it proves with events (or
// a stream or device synchronization) that the device is done with it. This driver never synchronizes on
// its own.
#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "driver/dynamic_library.hpp"
#include "driver/platform_driver.hpp"
#include "tessera/drivers.hpp"

#ifdef TESSERA_HAVE_CUDA_H
#include <cuda.h>
#endif

namespace tessera {
namespace {

namespace cu {

// The types Tessera passes to the CUDA driver, with the layouts of cuda.h (checked against CUDA 13.0's;
// the allocation property struct is 32 bytes with allocFlags last, as since CUDA 11).
struct Types {
  using Result = int;  // CUresult: an enum, passed as int on every ABI CUDA supports
  using Device = int;  // CUdevice
  using Context = void*;  // CUcontext, CUstream, CUevent: opaque pointers
  using Stream = void*;
  using Event = void*;
  using DevicePtr = unsigned long long;         // CUdeviceptr on 64-bit platforms
  using AllocationHandle = unsigned long long;  // CUmemGenericAllocationHandle
  using DeviceAttribute = int;                  // CUdevice_attribute
  using GranularityFlags = int;                 // CUmemAllocationGranularity_flags
  using StreamCaptureStatus = int;              // CUstreamCaptureStatus
  using HandleType = int;                       // CUmemAllocationHandleType

  struct MemLocation {  // CUmemLocation
    int type;           // CUmemLocationType
    int id;
  };
  struct MemAllocationProp {  // CUmemAllocationProp
    int type;                 // CUmemAllocationType
    int requestedHandleTypes;  // CUmemAllocationHandleType
    MemLocation location;
    void* win32HandleMetaData;
    struct AllocFlags {
      unsigned char compressionType;
      unsigned char gpuDirectRDMACapable;
      unsigned short usage;
      unsigned char reserved[4];
    } allocFlags;
  };
  struct MemAccessDesc {  // CUmemAccessDesc
    MemLocation location;
    int flags;  // CUmemAccess_flags
  };
};

// The 64-bit layouts, checked even without cuda.h.
static_assert(sizeof(Types::MemLocation) == 8 && sizeof(Types::MemAccessDesc) == 12 &&
              sizeof(Types::MemAllocationProp) == 32 && offsetof(Types::MemAllocationProp, allocFlags) == 24);

using Result = Types::Result;

// Values from cuda.h.
inline constexpr Result success = 0;                    // CUDA_SUCCESS
inline constexpr Result error_out_of_memory = 2;        // CUDA_ERROR_OUT_OF_MEMORY
inline constexpr Result error_not_initialized = 3;      // CUDA_ERROR_NOT_INITIALIZED
inline constexpr Result error_stub_library = 34;        // CUDA_ERROR_STUB_LIBRARY
inline constexpr Result error_no_device = 100;          // CUDA_ERROR_NO_DEVICE
inline constexpr Result error_not_ready = 600;          // CUDA_ERROR_NOT_READY
inline constexpr Result error_unknown = 999;            // CUDA_ERROR_UNKNOWN
inline constexpr int mem_allocation_type_pinned = 1;    // CU_MEM_ALLOCATION_TYPE_PINNED
inline constexpr int mem_handle_type_none = 0;          // CU_MEM_HANDLE_TYPE_NONE
inline constexpr int mem_handle_type_posix_file_descriptor = 1;  // CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
inline constexpr int mem_location_type_device = 1;      // CU_MEM_LOCATION_TYPE_DEVICE
inline constexpr int mem_access_flags_prot_readwrite = 3;  // CU_MEM_ACCESS_FLAGS_PROT_READWRITE
inline constexpr int mem_alloc_granularity_minimum = 0;    // CU_MEM_ALLOC_GRANULARITY_MINIMUM
inline constexpr unsigned event_disable_timing = 0x2;     // CU_EVENT_DISABLE_TIMING
inline constexpr int device_attribute_virtual_memory_management_supported = 102;
inline constexpr int device_attribute_handle_type_posix_file_descriptor_supported = 103;
inline constexpr int stream_capture_status_none = 0;  // CU_STREAM_CAPTURE_STATUS_NONE (1 ACTIVE, 2 INVALIDATED)

// The function types, written once over a set of types so that the same declarations can be checked
// against cuda.h's (Signatures<HeaderTypes> below).
template <class T>
struct Signatures {
  using R = typename T::Result;
  using Init = R(unsigned int);
  using DeviceGetCount = R(int*);
  using DeviceGet = R(typename T::Device*, int);
  using DeviceGetAttribute = R(int*, typename T::DeviceAttribute, typename T::Device);
  using DevicePrimaryCtxRetain = R(typename T::Context*, typename T::Device);
  using DevicePrimaryCtxRelease = R(typename T::Device);
  using CtxGetCurrent = R(typename T::Context*);
  using CtxSetCurrent = R(typename T::Context);
  using CtxSynchronize = R();
  using MemGetInfo = R(std::size_t*, std::size_t*);
  using MemGetAllocationGranularity = R(std::size_t*, const typename T::MemAllocationProp*,
                                        typename T::GranularityFlags);
  using MemAddressReserve = R(typename T::DevicePtr*, std::size_t, std::size_t, typename T::DevicePtr,
                              unsigned long long);
  using MemAddressFree = R(typename T::DevicePtr, std::size_t);
  using MemCreate = R(typename T::AllocationHandle*, std::size_t, const typename T::MemAllocationProp*,
                      unsigned long long);
  using MemRelease = R(typename T::AllocationHandle);
  using MemMap = R(typename T::DevicePtr, std::size_t, std::size_t, typename T::AllocationHandle, unsigned long long);
  using MemUnmap = R(typename T::DevicePtr, std::size_t);
  using MemSetAccess = R(typename T::DevicePtr, std::size_t, const typename T::MemAccessDesc*, std::size_t);
  using MemcpyHtoD = R(typename T::DevicePtr, const void*, std::size_t);
  using MemcpyDtoH = R(void*, typename T::DevicePtr, std::size_t);
  using MemHostAlloc = R(void**, std::size_t, unsigned int);
  using MemFreeHost = R(void*);
  using EventCreate = R(typename T::Event*, unsigned int);
  using EventRecord = R(typename T::Event, typename T::Stream);
  using EventQuery = R(typename T::Event);
  using EventSynchronize = R(typename T::Event);
  using EventDestroy = R(typename T::Event);
  using StreamSynchronize = R(typename T::Stream);
  using StreamIsCapturing = R(typename T::Stream, typename T::StreamCaptureStatus*);
  using MemExportToShareableHandle = R(void*, typename T::AllocationHandle, typename T::HandleType, unsigned long long);
  using MemImportFromShareableHandle = R(typename T::AllocationHandle*, void*, typename T::HandleType);
  using GetErrorName = R(R, const char**);
  using GetErrorString = R(R, const char**);
};

using Fn = Signatures<Types>;

// The exported symbol of each call. cuda.h maps several public names to versioned symbols (cuMemGetInfo ->
// cuMemGetInfo_v2); dlsym must ask for the symbol, or it gets the old ABI (32-bit sizes for cuMemGetInfo).
namespace symbol {
inline constexpr const char* init = "cuInit";
inline constexpr const char* device_get_count = "cuDeviceGetCount";
inline constexpr const char* device_get = "cuDeviceGet";
inline constexpr const char* device_get_attribute = "cuDeviceGetAttribute";
inline constexpr const char* device_primary_ctx_retain = "cuDevicePrimaryCtxRetain";
inline constexpr const char* device_primary_ctx_release = "cuDevicePrimaryCtxRelease_v2";
inline constexpr const char* ctx_get_current = "cuCtxGetCurrent";
inline constexpr const char* ctx_set_current = "cuCtxSetCurrent";
inline constexpr const char* ctx_synchronize = "cuCtxSynchronize";
inline constexpr const char* mem_get_info = "cuMemGetInfo_v2";
inline constexpr const char* mem_get_allocation_granularity = "cuMemGetAllocationGranularity";
inline constexpr const char* mem_address_reserve = "cuMemAddressReserve";
inline constexpr const char* mem_address_free = "cuMemAddressFree";
inline constexpr const char* mem_create = "cuMemCreate";
inline constexpr const char* mem_release = "cuMemRelease";
inline constexpr const char* mem_map = "cuMemMap";
inline constexpr const char* mem_unmap = "cuMemUnmap";
inline constexpr const char* mem_set_access = "cuMemSetAccess";
inline constexpr const char* memcpy_htod = "cuMemcpyHtoD_v2";
inline constexpr const char* memcpy_dtoh = "cuMemcpyDtoH_v2";
inline constexpr const char* mem_host_alloc = "cuMemHostAlloc";  // unversioned in cuda.h
inline constexpr const char* mem_free_host = "cuMemFreeHost";
inline constexpr const char* event_create = "cuEventCreate";
inline constexpr const char* event_record = "cuEventRecord";
inline constexpr const char* event_query = "cuEventQuery";
inline constexpr const char* event_synchronize = "cuEventSynchronize";
inline constexpr const char* event_destroy = "cuEventDestroy_v2";
inline constexpr const char* stream_synchronize = "cuStreamSynchronize";
inline constexpr const char* stream_is_capturing = "cuStreamIsCapturing";
inline constexpr const char* mem_export_to_shareable_handle = "cuMemExportToShareableHandle";
inline constexpr const char* mem_import_from_shareable_handle = "cuMemImportFromShareableHandle";
inline constexpr const char* get_error_name = "cuGetErrorName";
inline constexpr const char* get_error_string = "cuGetErrorString";
}  // namespace symbol

}  // namespace cu

#ifdef TESSERA_HAVE_CUDA_H
// Every fact above, checked against the real header.
struct HeaderTypes {
  using Result = CUresult;
  using Device = CUdevice;
  using Context = CUcontext;
  using Stream = CUstream;
  using Event = CUevent;
  using DevicePtr = CUdeviceptr;
  using AllocationHandle = CUmemGenericAllocationHandle;
  using DeviceAttribute = CUdevice_attribute;
  using GranularityFlags = CUmemAllocationGranularity_flags;
  using StreamCaptureStatus = CUstreamCaptureStatus;
  using HandleType = CUmemAllocationHandleType;
  using MemLocation = CUmemLocation;
  using MemAllocationProp = CUmemAllocationProp;
  using MemAccessDesc = CUmemAccessDesc;
};
using Header = cu::Types;
static_assert(sizeof(CUresult) == sizeof(Header::Result));
static_assert(sizeof(CUdevice_attribute) == sizeof(Header::DeviceAttribute));
static_assert(sizeof(CUmemAllocationGranularity_flags) == sizeof(Header::GranularityFlags));
static_assert(sizeof(CUstreamCaptureStatus) == sizeof(Header::StreamCaptureStatus));
static_assert(std::is_same_v<CUdevice, Header::Device>);
static_assert(std::is_same_v<CUdeviceptr, Header::DevicePtr>);
static_assert(std::is_same_v<CUmemGenericAllocationHandle, Header::AllocationHandle>);
static_assert(sizeof(CUcontext) == sizeof(Header::Context) && sizeof(CUstream) == sizeof(Header::Stream) &&
              sizeof(CUevent) == sizeof(Header::Event));

#define TESSERA_SAME_FIELD(real, ours, field)                            \
  static_assert(offsetof(real, field) == offsetof(ours, field) &&     \
                sizeof(real::field) == sizeof(ours::field), #real "::" #field)
static_assert(sizeof(CUmemLocation) == sizeof(Header::MemLocation));
TESSERA_SAME_FIELD(CUmemLocation, Header::MemLocation, type);
TESSERA_SAME_FIELD(CUmemLocation, Header::MemLocation, id);
static_assert(sizeof(CUmemAllocationProp) == sizeof(Header::MemAllocationProp));
static_assert(alignof(CUmemAllocationProp) == alignof(Header::MemAllocationProp));
TESSERA_SAME_FIELD(CUmemAllocationProp, Header::MemAllocationProp, type);
TESSERA_SAME_FIELD(CUmemAllocationProp, Header::MemAllocationProp, requestedHandleTypes);
TESSERA_SAME_FIELD(CUmemAllocationProp, Header::MemAllocationProp, location);
TESSERA_SAME_FIELD(CUmemAllocationProp, Header::MemAllocationProp, win32HandleMetaData);
TESSERA_SAME_FIELD(CUmemAllocationProp, Header::MemAllocationProp, allocFlags);
static_assert(offsetof(CUmemAllocationProp, allocFlags.usage) == offsetof(Header::MemAllocationProp, allocFlags.usage));
static_assert(offsetof(CUmemAllocationProp, allocFlags.reserved) ==
              offsetof(Header::MemAllocationProp, allocFlags.reserved));
static_assert(sizeof(CUmemAccessDesc) == sizeof(Header::MemAccessDesc));
TESSERA_SAME_FIELD(CUmemAccessDesc, Header::MemAccessDesc, location);
TESSERA_SAME_FIELD(CUmemAccessDesc, Header::MemAccessDesc, flags);
#undef TESSERA_SAME_FIELD

static_assert(CUDA_SUCCESS == cu::success);
static_assert(CUDA_ERROR_OUT_OF_MEMORY == cu::error_out_of_memory);
static_assert(CUDA_ERROR_STUB_LIBRARY == cu::error_stub_library);
static_assert(CUDA_ERROR_NO_DEVICE == cu::error_no_device);
static_assert(CUDA_ERROR_NOT_READY == cu::error_not_ready);
static_assert(CUDA_ERROR_NOT_INITIALIZED == cu::error_not_initialized);
static_assert(CUDA_ERROR_UNKNOWN == cu::error_unknown);
static_assert(CU_MEM_ALLOCATION_TYPE_PINNED == cu::mem_allocation_type_pinned);
static_assert(CU_MEM_HANDLE_TYPE_NONE == cu::mem_handle_type_none);
static_assert(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR == cu::mem_handle_type_posix_file_descriptor);
static_assert(sizeof(CUmemAllocationHandleType) == sizeof(Header::HandleType));
static_assert(CU_MEM_LOCATION_TYPE_DEVICE == cu::mem_location_type_device);
static_assert(CU_MEM_ACCESS_FLAGS_PROT_READWRITE == cu::mem_access_flags_prot_readwrite);
static_assert(CU_MEM_ALLOC_GRANULARITY_MINIMUM == cu::mem_alloc_granularity_minimum);
static_assert(CU_EVENT_DISABLE_TIMING == cu::event_disable_timing);
static_assert(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED ==
              cu::device_attribute_virtual_memory_management_supported);
static_assert(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED ==
              cu::device_attribute_handle_type_posix_file_descriptor_supported);
static_assert(CU_STREAM_CAPTURE_STATUS_NONE == cu::stream_capture_status_none);

// The header maps each public name (a macro for versioned calls) to the symbol dlsym is asked for, and the
// symbol has the function type declared above.
#define TESSERA_EXPANDED_NAME(name) TESSERA_NAME_TEXT(name)
#define TESSERA_NAME_TEXT(name) #name
#define TESSERA_SAME_CALL(public_name, member, Type)                                                      \
  static_assert(std::string_view(TESSERA_EXPANDED_NAME(public_name)) == cu::symbol::member,                \
                "symbol of " #public_name);                                                                \
  static_assert(std::is_same_v<decltype(public_name), cu::Signatures<HeaderTypes>::Type>, "type of " #public_name)
TESSERA_SAME_CALL(cuInit, init, Init);
TESSERA_SAME_CALL(cuDeviceGetCount, device_get_count, DeviceGetCount);
TESSERA_SAME_CALL(cuDeviceGet, device_get, DeviceGet);
TESSERA_SAME_CALL(cuDeviceGetAttribute, device_get_attribute, DeviceGetAttribute);
TESSERA_SAME_CALL(cuDevicePrimaryCtxRetain, device_primary_ctx_retain, DevicePrimaryCtxRetain);
TESSERA_SAME_CALL(cuDevicePrimaryCtxRelease, device_primary_ctx_release, DevicePrimaryCtxRelease);
TESSERA_SAME_CALL(cuCtxGetCurrent, ctx_get_current, CtxGetCurrent);
TESSERA_SAME_CALL(cuCtxSetCurrent, ctx_set_current, CtxSetCurrent);
TESSERA_SAME_CALL(cuCtxSynchronize, ctx_synchronize, CtxSynchronize);
TESSERA_SAME_CALL(cuMemGetInfo, mem_get_info, MemGetInfo);
TESSERA_SAME_CALL(cuMemGetAllocationGranularity, mem_get_allocation_granularity, MemGetAllocationGranularity);
TESSERA_SAME_CALL(cuMemAddressReserve, mem_address_reserve, MemAddressReserve);
TESSERA_SAME_CALL(cuMemAddressFree, mem_address_free, MemAddressFree);
TESSERA_SAME_CALL(cuMemCreate, mem_create, MemCreate);
TESSERA_SAME_CALL(cuMemRelease, mem_release, MemRelease);
TESSERA_SAME_CALL(cuMemMap, mem_map, MemMap);
TESSERA_SAME_CALL(cuMemUnmap, mem_unmap, MemUnmap);
TESSERA_SAME_CALL(cuMemSetAccess, mem_set_access, MemSetAccess);
TESSERA_SAME_CALL(cuMemcpyHtoD, memcpy_htod, MemcpyHtoD);
TESSERA_SAME_CALL(cuMemcpyDtoH, memcpy_dtoh, MemcpyDtoH);
TESSERA_SAME_CALL(cuMemHostAlloc, mem_host_alloc, MemHostAlloc);
TESSERA_SAME_CALL(cuMemFreeHost, mem_free_host, MemFreeHost);
TESSERA_SAME_CALL(cuEventCreate, event_create, EventCreate);
TESSERA_SAME_CALL(cuEventRecord, event_record, EventRecord);
TESSERA_SAME_CALL(cuEventQuery, event_query, EventQuery);
TESSERA_SAME_CALL(cuEventSynchronize, event_synchronize, EventSynchronize);
TESSERA_SAME_CALL(cuEventDestroy, event_destroy, EventDestroy);
TESSERA_SAME_CALL(cuStreamSynchronize, stream_synchronize, StreamSynchronize);
TESSERA_SAME_CALL(cuStreamIsCapturing, stream_is_capturing, StreamIsCapturing);
TESSERA_SAME_CALL(cuMemExportToShareableHandle, mem_export_to_shareable_handle, MemExportToShareableHandle);
TESSERA_SAME_CALL(cuMemImportFromShareableHandle, mem_import_from_shareable_handle, MemImportFromShareableHandle);
TESSERA_SAME_CALL(cuGetErrorName, get_error_name, GetErrorName);
TESSERA_SAME_CALL(cuGetErrorString, get_error_string, GetErrorString);
#undef TESSERA_SAME_CALL
#undef TESSERA_NAME_TEXT
#undef TESSERA_EXPANDED_NAME
#endif  // TESSERA_HAVE_CUDA_H

// The library and the entry points Tessera calls, resolved once.
struct Api {
  detail::DynamicLibrary library;
  cu::Fn::Init* init = nullptr;
  cu::Fn::DeviceGetCount* device_get_count = nullptr;
  cu::Fn::DeviceGet* device_get = nullptr;
  cu::Fn::DeviceGetAttribute* device_get_attribute = nullptr;
  cu::Fn::DevicePrimaryCtxRetain* device_primary_ctx_retain = nullptr;
  cu::Fn::DevicePrimaryCtxRelease* device_primary_ctx_release = nullptr;
  cu::Fn::CtxGetCurrent* ctx_get_current = nullptr;
  cu::Fn::CtxSetCurrent* ctx_set_current = nullptr;
  cu::Fn::CtxSynchronize* ctx_synchronize = nullptr;
  cu::Fn::MemGetInfo* mem_get_info = nullptr;
  cu::Fn::MemGetAllocationGranularity* mem_get_allocation_granularity = nullptr;
  cu::Fn::MemAddressReserve* mem_address_reserve = nullptr;
  cu::Fn::MemAddressFree* mem_address_free = nullptr;
  cu::Fn::MemCreate* mem_create = nullptr;
  cu::Fn::MemRelease* mem_release = nullptr;
  cu::Fn::MemMap* mem_map = nullptr;
  cu::Fn::MemUnmap* mem_unmap = nullptr;
  cu::Fn::MemSetAccess* mem_set_access = nullptr;
  cu::Fn::MemcpyHtoD* memcpy_htod = nullptr;
  cu::Fn::MemcpyDtoH* memcpy_dtoh = nullptr;
  cu::Fn::MemHostAlloc* mem_host_alloc = nullptr;
  cu::Fn::MemFreeHost* mem_free_host = nullptr;
  cu::Fn::EventCreate* event_create = nullptr;
  cu::Fn::EventRecord* event_record = nullptr;
  cu::Fn::EventQuery* event_query = nullptr;
  cu::Fn::EventSynchronize* event_synchronize = nullptr;
  cu::Fn::EventDestroy* event_destroy = nullptr;
  cu::Fn::StreamSynchronize* stream_synchronize = nullptr;
  cu::Fn::StreamIsCapturing* stream_is_capturing = nullptr;  // optional: null where the library lacks it
  // Optional too: without them chunks cannot be shared (no capability shareable_chunks).
  cu::Fn::MemExportToShareableHandle* mem_export_to_shareable_handle = nullptr;
  cu::Fn::MemImportFromShareableHandle* mem_import_from_shareable_handle = nullptr;
  cu::Fn::GetErrorName* get_error_name = nullptr;
  cu::Fn::GetErrorString* get_error_string = nullptr;
  detail::CreatorProcess creator{};  // the process that loaded the library

  explicit Api(detail::DynamicLibrary opened) : library(std::move(opened)) {}

  // "CUDA_ERROR_OUT_OF_MEMORY (out of memory)", or the bare number when the library cannot name it.
  std::string describe(cu::Result result) const {
    const char* name = nullptr;
    const char* text = nullptr;
    if (get_error_name == nullptr || get_error_name(result, &name) != cu::success) name = nullptr;
    if (get_error_string == nullptr || get_error_string(result, &text) != cu::success) text = nullptr;
    if (name == nullptr) name = known_name(result);  // the toolkit's stub library names nothing
    if (name != nullptr && text != nullptr) return fmt::format("{} ({})", name, text);
    if (name != nullptr) return fmt::format("{} (CUresult {})", name, result);
    return fmt::format("CUresult {}", result);
  }

  // The codes worth naming even when the library cannot.
  static const char* known_name(cu::Result result) {
    switch (result) {
      case cu::error_out_of_memory: return "CUDA_ERROR_OUT_OF_MEMORY";
      case cu::error_not_initialized: return "CUDA_ERROR_NOT_INITIALIZED";
      case cu::error_stub_library: return "CUDA_ERROR_STUB_LIBRARY";
      case cu::error_no_device: return "CUDA_ERROR_NO_DEVICE";
      case cu::error_not_ready: return "CUDA_ERROR_NOT_READY";
      case cu::error_unknown: return "CUDA_ERROR_UNKNOWN";
      default: return nullptr;
    }
  }
};

// Untyped lookup and a cast here rather than DynamicLibrary::symbol<F>: the same thing, without a
// Result<function pointer>.
template <class F>
Result<void> bind(const Api& api, F*& slot, const char* name) {
  auto found = api.library.address(name);
  if (!found) return std::move(found).error();
  slot = reinterpret_cast<F*>(*found);
  return {};
}

Result<std::unique_ptr<Api>> load_api(detail::DynamicLibrary library) {
  auto api = std::make_unique<Api>(std::move(library));
  namespace s = cu::symbol;
  // The error-text calls first, so that every later failure can be described.
  for (auto done : {bind(*api, api->get_error_name, s::get_error_name),
                    bind(*api, api->get_error_string, s::get_error_string), bind(*api, api->init, s::init),
                    bind(*api, api->device_get_count, s::device_get_count),
                    bind(*api, api->device_get, s::device_get),
                    bind(*api, api->device_get_attribute, s::device_get_attribute),
                    bind(*api, api->device_primary_ctx_retain, s::device_primary_ctx_retain),
                    bind(*api, api->device_primary_ctx_release, s::device_primary_ctx_release),
                    bind(*api, api->ctx_get_current, s::ctx_get_current),
                    bind(*api, api->ctx_set_current, s::ctx_set_current),
                    bind(*api, api->ctx_synchronize, s::ctx_synchronize),
                    bind(*api, api->mem_get_info, s::mem_get_info),
                    bind(*api, api->mem_get_allocation_granularity, s::mem_get_allocation_granularity),
                    bind(*api, api->mem_address_reserve, s::mem_address_reserve),
                    bind(*api, api->mem_address_free, s::mem_address_free),
                    bind(*api, api->mem_create, s::mem_create), bind(*api, api->mem_release, s::mem_release),
                    bind(*api, api->mem_map, s::mem_map), bind(*api, api->mem_unmap, s::mem_unmap),
                    bind(*api, api->mem_set_access, s::mem_set_access),
                    bind(*api, api->memcpy_htod, s::memcpy_htod), bind(*api, api->memcpy_dtoh, s::memcpy_dtoh),
                    bind(*api, api->mem_host_alloc, s::mem_host_alloc),
                    bind(*api, api->mem_free_host, s::mem_free_host),
                    bind(*api, api->event_create, s::event_create),
                    bind(*api, api->event_record, s::event_record),
                    bind(*api, api->event_query, s::event_query),
                    bind(*api, api->event_synchronize, s::event_synchronize),
                    bind(*api, api->event_destroy, s::event_destroy),
                    bind(*api, api->stream_synchronize, s::stream_synchronize)}) {
    if (!done) {
      return make_error(Errc::unavailable,
                        fmt::format("cuda driver: {}; it is not the CUDA driver library, or one too old for "
                                    "Tessera, which needs the virtual memory management API of CUDA 10.2 or later",
                                    done.error().message));
    }
  }
  // Only the refusal of graph capture needs it (tessera_refuse_graph_capture), so a library without it still
  // serves memory; the query then says what is missing.
  (void)bind(*api, api->stream_is_capturing, s::stream_is_capturing);
  (void)bind(*api, api->mem_export_to_shareable_handle, s::mem_export_to_shareable_handle);
  (void)bind(*api, api->mem_import_from_shareable_handle, s::mem_import_from_shareable_handle);
  return api;
}

// The allocation and access properties of one device; a chunk that may be shared asks for a POSIX file
// descriptor handle, which cuMemExportToShareableHandle needs.
cu::Types::MemAllocationProp page_properties(int ordinal, bool shareable = false) {
  cu::Types::MemAllocationProp prop{};
  prop.type = cu::mem_allocation_type_pinned;
  prop.requestedHandleTypes = shareable ? cu::mem_handle_type_posix_file_descriptor : cu::mem_handle_type_none;
  prop.location.type = cu::mem_location_type_device;
  prop.location.id = ordinal;
  return prop;
}

Error call_failed(const Api& api, std::string_view call, cu::Result result) {
  const Errc code = result == cu::error_out_of_memory ? Errc::out_of_memory : Errc::platform;
  return make_error(code, fmt::format("cuda driver: {} failed: {}", call, api.describe(result)), result);
}

// Makes `context` current on the calling thread for one call, and puts back the thread's own context
// after. A thread that had none keeps ours: the next call is then a single cuCtxGetCurrent.
class ContextScope {
 public:
  ContextScope(const Api& api, cu::Types::Context context) : api_(api) {
    if (!api.creator.is_current()) {
      status_ = api.creator.forked_child_error("cuda");
      return;
    }
    if (auto got = api.ctx_get_current(&previous_); got != cu::success) {
      status_ = call_failed(api, "cuCtxGetCurrent", got);
      return;
    }
    if (previous_ == context) return;
    if (auto set = api.ctx_set_current(context); set != cu::success) {
      status_ = call_failed(api, "cuCtxSetCurrent", set);
      return;
    }
    switched_ = true;
  }
  ~ContextScope() {
    if (switched_ && previous_ != nullptr) api_.ctx_set_current(previous_);
  }
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

  const Result<void>& status() const noexcept { return status_; }

 private:
  const Api& api_;
  cu::Types::Context previous_ = nullptr;
  bool switched_ = false;
  Result<void> status_;
};

constexpr DriverCapabilities cuda_capabilities(bool shareable) {
  return {.needs_set_access = true,
          .page_multi_mapping = true,
          .data_access = true,
          .host_pointers = false,
          .asynchronous = true,
          .partial_map = true,
          .survives_fork = false,
          .host_backup = true,
          .shareable_chunks = shareable,
          .reusable_events = true};
}

cu::Types::Event to_event(detail::PlatformHandle handle) {
  return reinterpret_cast<cu::Types::Event>(static_cast<std::uintptr_t>(handle));
}

cu::Types::Stream to_stream(StreamId stream) {
  return reinterpret_cast<cu::Types::Stream>(static_cast<std::uintptr_t>(stream));
}

class CudaDriver final : public detail::PlatformDriver {
 public:
  CudaDriver(std::unique_ptr<Api> api, cu::Types::Device device, int ordinal, cu::Types::Context context,
             Bytes granularity, Bytes capacity, bool shareable)
      : PlatformDriver("cuda", cuda_capabilities(shareable), granularity, capacity),
        api_(std::move(api)),
        device_(device),
        ordinal_(ordinal),
        context_(context) {}

  // Balances the retain of make_cuda_driver. Errors are ignored: at process exit the driver may already
  // be shut down, and nothing can be done about it here.
  ~CudaDriver() override {
    if (!api_->creator.is_current()) return;
    {
      ContextScope scope(*api_, context_);  // host buffers the caller leaked go with the driver
      if (scope.status()) {
        for (const auto& [id, buffer] : host_buffers()) api_->mem_free_host(buffer.data);
      }
    }
    api_->device_primary_ctx_release(device_);
  }

  CudaDriver(const CudaDriver&) = delete;
  CudaDriver& operator=(const CudaDriver&) = delete;

  // Reads nothing of the ledger, so any thread may ask while other calls run (driver.hpp); the context
  // switch is per thread. An invalidated capture counts: the stream is still capturing until it ends.
  Result<bool> stream_is_capturing(StreamId stream) override {
    if (api_->stream_is_capturing == nullptr) {
      return make_error(Errc::unsupported,
                        fmt::format("cuda driver: {} has no cuStreamIsCapturing (CUDA 10.0 has it), so whether "
                                    "stream {:#x} is capturing a graph cannot be told",
                                    api_->library.name(), static_cast<std::uintptr_t>(stream)));
    }
    ContextScope scope(*api_, context_);
    if (!scope.status()) return scope.status().error();
    cu::Types::StreamCaptureStatus status = cu::stream_capture_status_none;
    if (auto r = api_->stream_is_capturing(to_stream(stream), &status); r != cu::success) {
      return fail(fmt::format("cuStreamIsCapturing(stream {:#x})", static_cast<std::uintptr_t>(stream)), r);
    }
    return status != cu::stream_capture_status_none;
  }

 protected:
  Result<Address> platform_reserve(Bytes size, Bytes alignment) override {
    ContextScope scope(*api_, context_);
    if (!scope.status()) return scope.status().error();
    cu::Types::DevicePtr base = 0;
    if (auto r = api_->mem_address_reserve(&base, size, alignment, 0, 0); r != cu::success) {
      return fail(fmt::format("cuMemAddressReserve({} bytes, alignment {})", size, alignment), r);
    }
    return Address{base};
  }

  Result<void> platform_release_reservation(Address base, Bytes size) override {
    ContextScope scope(*api_, context_);
    if (!scope.status()) return scope.status();
    return check(api_->mem_address_free(base, size),
                 [&] { return fmt::format("cuMemAddressFree({:#x}, {} bytes)", base, size); });
  }

  Result<detail::PlatformHandle> platform_create_chunk(Bytes size) override {
    ContextScope scope(*api_, context_);
    if (!scope.status()) return scope.status().error();
    const auto prop = page_properties(ordinal_, capabilities().shareable_chunks);
    cu::Types::AllocationHandle handle = 0;
    if (auto r = api_->mem_create(&handle, size, &prop, 0); r != cu::success) {
      return fail(fmt::format("cuMemCreate({} bytes on device {})", size, ordinal_), r);
    }
    return detail::PlatformHandle{handle};
  }

  Result<void> platform_release_chunk(detail::PlatformHandle handle, Bytes size) override {
    ContextScope scope(*api_, context_);
    if (!scope.status()) return scope.status();
    return check(api_->mem_release(handle), [&] { return fmt::format("cuMemRelease(page of {} bytes)", size); });
  }

  // Sharing: the chunk was created with a POSIX file descriptor handle requested (page_properties).
  Result<ExportedChunk> platform_export_chunk(detail::PlatformHandle handle, Bytes size) override {
    ContextScope scope(*api_, context_);
    if (!scope.status()) return scope.status().error();
    int descriptor = -1;
    if (auto r = api_->mem_export_to_shareable_handle(&descriptor, handle, cu::mem_handle_type_posix_file_descriptor, 0);
        r != cu::success) {
      return fail(fmt::format("cuMemExportToShareableHandle(chunk of {} bytes, POSIX file descriptor)", size), r);
    }
    return ExportedChunk{.descriptor = descriptor, .offset = 0, .size = size};
  }

  // CUDA takes the descriptor's value as a pointer-sized argument; it does not take the descriptor over.
  Result<detail::PlatformHandle> platform_import_chunk(int descriptor, Bytes offset, Bytes size) override {
    if (offset != 0) {
      return make_error(Errc::invalid_argument,
                        fmt::format("cuda driver: import_chunk at offset {}: a CUDA chunk's descriptor names the "
                                    "chunk alone (offset 0)",
                                    offset));
    }
    ContextScope scope(*api_, context_);
    if (!scope.status()) return scope.status().error();
    cu::Types::AllocationHandle handle = 0;
    void* raw = reinterpret_cast<void*>(static_cast<std::uintptr_t>(descriptor));
    if (auto r = api_->mem_import_from_shareable_handle(&handle, raw, cu::mem_handle_type_posix_file_descriptor);
        r != cu::success) {
      Error error = fail(fmt::format("cuMemImportFromShareableHandle(descriptor {}, {} bytes)", descriptor, size), r);
      error.code = Errc::invalid_argument;  // a descriptor the driver does not recognise is bad input
      return error;
    }
    return detail::PlatformHandle{handle};
  }

  Result<void> platform_map(Address at, detail::PlatformHandle handle, Bytes offset, Bytes size) override {
    ContextScope scope(*api_, context_);
    if (!scope.status()) return scope.status();
    return check(api_->mem_map(at, size, offset, handle, 0),
                 [&] { return fmt::format("cuMemMap({:#x}, {} bytes at offset {})", at, size, offset); });
  }

  // Read-write for this device only. Peers would need one descriptor each; Tessera serves one device.
  Result<void> platform_set_access(Address at, Bytes size) override {
    ContextScope scope(*api_, context_);
    if (!scope.status()) return scope.status();
    cu::Types::MemAccessDesc access{};
    access.location.type = cu::mem_location_type_device;
    access.location.id = ordinal_;
    access.flags = cu::mem_access_flags_prot_readwrite;
    return check(api_->mem_set_access(at, size, &access, 1),
                 [&] { return fmt::format("cuMemSetAccess({:#x}, {} bytes, read-write)", at, size); });
  }

  Result<void> platform_unmap(Address at, Bytes size) override {
    ContextScope scope(*api_, context_);
    if (!scope.status()) return scope.status();
    return check(api_->mem_unmap(at, size), [&] { return fmt::format("cuMemUnmap({:#x}, {} bytes)", at, size); });
  }

  // Timing is off: Tessera only asks whether work is done, and timing-free events are cheaper to record
  // and query.
  Result<detail::PlatformHandle> platform_create_event() override {
    ContextScope scope(*api_, context_);
    if (!scope.status()) return scope.status().error();
    cu::Types::Event event = nullptr;
    if (auto r = api_->event_create(&event, cu::event_disable_timing); r != cu::success) {
      return fail("cuEventCreate", r);
    }
    return detail::PlatformHandle{reinterpret_cast<std::uintptr_t>(event)};
  }

  Result<void> platform_record_event(detail::PlatformHandle event, StreamId stream) override {
    ContextScope scope(*api_, context_);
    if (!scope.status()) return scope.status();
    return check(api_->event_record(to_event(event), to_stream(stream)), [&] {
      return fmt::format("cuEventRecord(stream {:#x})", static_cast<std::uintptr_t>(stream));
    });
  }

  Result<bool> platform_query_event(detail::PlatformHandle event) override {
    ContextScope scope(*api_, context_);
    if (!scope.status()) return scope.status().error();
    const auto r = api_->event_query(to_event(event));
    if (r == cu::success) return true;
    if (r == cu::error_not_ready) return false;
    return fail("cuEventQuery", r);
  }

  Result<void> platform_synchronize_event(detail::PlatformHandle event) override {
    ContextScope scope(*api_, context_);
    if (!scope.status()) return scope.status();
    return check(api_->event_synchronize(to_event(event)), [] { return std::string("cuEventSynchronize"); });
  }

  Result<void> platform_destroy_event(detail::PlatformHandle event) override {
    ContextScope scope(*api_, context_);
    if (!scope.status()) return scope.status();
    return check(api_->event_destroy(to_event(event)), [] { return std::string("cuEventDestroy"); });
  }

  Result<void> platform_synchronize_stream(StreamId stream) override {
    ContextScope scope(*api_, context_);
    if (!scope.status()) return scope.status();
    return check(api_->stream_synchronize(to_stream(stream)), [&] {
      return fmt::format("cuStreamSynchronize(stream {:#x})", static_cast<std::uintptr_t>(stream));
    });
  }

  Result<void> platform_synchronize_device() override {
    ContextScope scope(*api_, context_);
    if (!scope.status()) return scope.status();
    return check(api_->ctx_synchronize(), [] { return std::string("cuCtxSynchronize"); });
  }

  // Synchronous copies (pageable host memory): they return when the bytes have arrived.
  Result<void> platform_write(Address at, const void* source, Bytes size) override {
    ContextScope scope(*api_, context_);
    if (!scope.status()) return scope.status();
    return check(api_->memcpy_htod(at, source, size),
                 [&] { return fmt::format("cuMemcpyHtoD({:#x}, {} bytes)", at, size); });
  }

  Result<void> platform_read(Address at, void* destination, Bytes size) override {
    ContextScope scope(*api_, context_);
    if (!scope.status()) return scope.status();
    return check(api_->memcpy_dtoh(destination, at, size),
                 [&] { return fmt::format("cuMemcpyDtoH({:#x}, {} bytes)", at, size); });
  }

  // Backups: page-locked host memory from cuMemHostAlloc (flags 0: pinned for the primary context, which
  // every call of this driver runs in), and the same synchronous copies as write()/read(), which run at
  // full speed from pinned memory.
  Result<detail::HostBufferRecord> platform_allocate_host(Bytes size) override {
    ContextScope scope(*api_, context_);
    if (!scope.status()) return scope.status().error();
    void* data = nullptr;
    if (auto r = api_->mem_host_alloc(&data, size, 0); r != cu::success) {
      return fail(fmt::format("cuMemHostAlloc({} bytes)", size), r);
    }
    return detail::HostBufferRecord{.handle = reinterpret_cast<std::uintptr_t>(data), .data = data, .size = size};
  }

  Result<void> platform_free_host(const detail::HostBufferRecord& buffer) override {
    ContextScope scope(*api_, context_);
    if (!scope.status()) return scope.status();
    return check(api_->mem_free_host(buffer.data),
                 [&] { return fmt::format("cuMemFreeHost(buffer of {} bytes)", buffer.size); });
  }

  Result<void> platform_copy_to_host(const detail::HostBufferRecord& destination, Address source,
                                     Bytes size) override {
    ContextScope scope(*api_, context_);
    if (!scope.status()) return scope.status();
    return check(api_->memcpy_dtoh(destination.data, source, size),
                 [&] { return fmt::format("cuMemcpyDtoH({:#x} to a host buffer, {} bytes)", source, size); });
  }

  Result<void> platform_copy_to_device(Address destination, const detail::HostBufferRecord& source,
                                       Bytes size) override {
    ContextScope scope(*api_, context_);
    if (!scope.status()) return scope.status();
    return check(api_->memcpy_htod(destination, source.data, size),
                 [&] { return fmt::format("cuMemcpyHtoD(a host buffer to {:#x}, {} bytes)", destination, size); });
  }

 private:
  Error fail(std::string_view call, cu::Result result) const { return call_failed(*api_, call, result); }

  // The message is built only on failure: these calls sit on the allocator's hot path.
  template <class Describe>
  Result<void> check(cu::Result result, Describe&& describe_call) const {
    if (result == cu::success) return {};
    return call_failed(*api_, describe_call(), result);
  }

  std::unique_ptr<Api> api_;
  cu::Types::Device device_;
  int ordinal_;
  cu::Types::Context context_;
};

constexpr std::string_view no_gpu_hint = "use the host or sim driver on machines without a GPU";

Error unavailable(std::string message, cu::Result result = 0) {
  return make_error(Errc::unavailable, std::move(message), result);
}

}  // namespace

Result<std::unique_ptr<Driver>> make_cuda_driver(const CudaDriverOptions& options) {
  // Kept loaded for the life of the process: libcuda runs threads of its own once initialised.
  auto library = detail::DynamicLibrary::open(options.library, /*keep_loaded=*/true);
  if (!library) {
    return unavailable(fmt::format("cuda driver: {}; the CUDA driver (libcuda, installed with the NVIDIA driver) "
                                   "is needed for the cuda driver — {}",
                                   library.error().message, no_gpu_hint));
  }
  auto loaded = load_api(std::move(*library));
  if (!loaded) return std::move(loaded).error();
  std::unique_ptr<Api> api = std::move(*loaded);
  const std::string& name = api->library.name();

  if (auto r = api->init(0); r != cu::success) {
    std::string why;
    if (r == cu::error_no_device) {
      why = fmt::format("no CUDA device is present — {}", no_gpu_hint);
    } else if (r == cu::error_stub_library) {
      why = fmt::format("{} is the CUDA toolkit's stub library, not the NVIDIA driver — {}", name, no_gpu_hint);
    } else {
      why = "the NVIDIA driver is installed but not usable (check nvidia-smi)";
    }
    return unavailable(fmt::format("cuda driver: cuInit failed with {}: {}", api->describe(r), why), r);
  }

  int count = 0;
  if (auto r = api->device_get_count(&count); r != cu::success) {
    return unavailable(fmt::format("cuda driver: cuDeviceGetCount failed: {}", api->describe(r)), r);
  }
  if (count == 0) return unavailable(fmt::format("cuda driver: no CUDA device is present — {}", no_gpu_hint));
  if (options.device < 0 || options.device >= count) {
    return unavailable(fmt::format("cuda driver: there is no CUDA device {}; this machine has {} (0 to {})",
                                   options.device, count, count - 1));
  }

  cu::Types::Device device = 0;
  if (auto r = api->device_get(&device, options.device); r != cu::success) {
    return unavailable(fmt::format("cuda driver: cuDeviceGet({}) failed: {}", options.device, api->describe(r)), r);
  }
  int vmm = 0;
  if (auto r = api->device_get_attribute(&vmm, cu::device_attribute_virtual_memory_management_supported, device);
      r != cu::success) {
    return call_failed(*api, "cuDeviceGetAttribute(VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)", r);
  }
  if (vmm == 0) {
    return make_error(Errc::unsupported, fmt::format("cuda driver: CUDA device {} does not support virtual memory "
                                                     "management (cuMemCreate, cuMemMap), which Tessera needs",
                                                     options.device));
  }

  cu::Types::Context context = nullptr;
  if (auto r = api->device_primary_ctx_retain(&context, device); r != cu::success) {
    return call_failed(*api, fmt::format("cuDevicePrimaryCtxRetain(device {})", options.device), r);
  }
  // From here on a failure must give the retained context back.
  auto fail_released = [&](Error error) {
    api->device_primary_ctx_release(device);
    return error;
  };
  cu::Types::Context current = nullptr;
  if (auto r = api->ctx_get_current(&current); r != cu::success) {
    return fail_released(call_failed(*api, "cuCtxGetCurrent", r));
  }
  // The calling thread gets the primary context only if it has none: a framework that made its own
  // context current keeps it (each call of the driver switches to the primary context for its duration).
  if (current == nullptr) {
    if (auto r = api->ctx_set_current(context); r != cu::success) {
      return fail_released(call_failed(*api, "cuCtxSetCurrent", r));
    }
  }

  // Sharing needs both calls and a device that offers POSIX file descriptor handles (cuMemCreate refuses a
  // handle type the device lacks); asked for without them, the driver still serves memory and refuses
  // exports (capability off).
  int descriptor_handles = 0;
  const bool shareable =
      options.shareable_chunks && api->mem_export_to_shareable_handle != nullptr &&
      api->mem_import_from_shareable_handle != nullptr &&
      api->device_get_attribute(&descriptor_handles, cu::device_attribute_handle_type_posix_file_descriptor_supported,
                                device) == cu::success &&
      descriptor_handles != 0;
  std::size_t granularity = 0;
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  {
    ContextScope scope(*api, context);
    if (!scope.status()) return fail_released(scope.status().error());
    // MINIMUM, not RECOMMENDED: the granule is the unit every page size, reservation and mapping address
    // must be a multiple of, and MINIMUM is what cuMemCreate and cuMemMap require. RECOMMENDED is a
    // performance hint (equal to MINIMUM, 2 MiB, on current GPUs); where it is larger it would force every
    // page up to it and waste memory. Tessera gets the speed of large mappings by choosing page sizes of
    // several granules itself.
    const auto prop = page_properties(options.device);
    if (auto r = api->mem_get_allocation_granularity(&granularity, &prop, cu::mem_alloc_granularity_minimum);
        r != cu::success) {
      return fail_released(call_failed(*api, "cuMemGetAllocationGranularity(MINIMUM)", r));
    }
    if (!is_power_of_two(granularity)) {
      return fail_released(make_error(
          Errc::unsupported,
          fmt::format("cuda driver: the allocation granularity {} of device {} is not a power of two", granularity,
                      options.device)));
    }
    if (auto r = api->mem_get_info(&free_bytes, &total_bytes); r != cu::success) {
      return fail_released(call_failed(*api, "cuMemGetInfo", r));
    }
  }

  return std::unique_ptr<Driver>(
      std::make_unique<CudaDriver>(std::move(api), device, options.device, context, granularity, total_bytes,
                                   shareable));
}

}  // namespace tessera
