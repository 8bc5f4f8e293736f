// The allocation entry points and hooks that PyTorch's CUDAPluggableAllocator and torch_npu's
// NPUPluggableAllocator load (tessera_c.h). Every one is an exception barrier and records on the calling
// thread whether it failed (last_error.hpp): failures become a null result where there is one, a code and a
// message.
#include <fmt/format.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string_view>

#include "capi/graph_capture.hpp"
#include "capi/guard.hpp"
#include "capi/last_error.hpp"
#include "capi/registry.hpp"
#include "tessera/tessera_c.h"

namespace tessera::capi {
namespace {

StreamId to_stream(void* stream) { return StreamId{reinterpret_cast<std::uintptr_t>(stream)}; }
void* to_pointer(Address address) { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(address)); }
Address to_address(void* ptr) { return static_cast<Address>(reinterpret_cast<std::uintptr_t>(ptr)); }

// The allocator refused: the call's failure, named with its arguments.
[[gnu::cold, gnu::noinline]] void allocation_failed(std::string_view function, std::size_t size, int device,
                                                    const Error& error) {
  set_last_error(error.code, fmt::format("{}({} bytes, device {}): {}", function, size, device, describe(error)));
}

// Everything but the fast path: a 0-byte request, a device whose allocator is not created yet, a number out
// of range, a fork's child, and every allocation while graph capture is refused (it asks the driver first).
[[gnu::noinline]] void* allocate_slow(std::string_view function, Platform platform, std::size_t size, int device,
                                      void* stream) noexcept {
  return guarded(function, static_cast<void*>(nullptr), [&]() -> void* {
    if (size == 0) return nullptr;  // as PyTorch's own allocators answer a 0-byte request: no failure
    auto found = device_for(device, platform);
    if (!found) {
      set_last_error(found.error().code,
                     fmt::format("{}({} bytes, device {}): {}", function, size, device, found.error().message));
      return nullptr;
    }
    if (refusing_graph_capture() && !may_allocate_on(function, platform, size, device, **found, stream)) {
      return nullptr;
    }
    auto address = (*found)->allocator->allocate(size, to_stream(stream));
    if (address) return to_pointer(*address);
    allocation_failed(function, size, device, address.error());
    return nullptr;
  });
}

// The fast path, for a device whose allocator exists: the call's record begun, two atomic loads (the device,
// and tessera_refuse_graph_capture's switch, relaxed), the allocator's call, and an exception barrier that
// costs nothing until something throws. No closure and no call but the allocator's: this is the path PyTorch
// takes for every tensor.
[[gnu::always_inline]] inline void* allocate(std::string_view function, Platform platform, std::size_t size,
                                             int device, void* stream) noexcept {
  begin_call();
  Device* usable = usable_device(device);
  if (usable == nullptr || size == 0 || refusing_graph_capture()) [[unlikely]] {
    return allocate_slow(function, platform, size, device, stream);
  }
  try {
    auto address = usable->allocator->allocate(size, to_stream(stream));
    if (address) [[likely]] return to_pointer(*address);
    allocation_failed(function, size, device, address.error());
  } catch (...) {
    record_current_exception(function);
  }
  return nullptr;
}

// For PyTorch: a failure is an exception that its C++ code carries up to Python as a RuntimeError.
// The throw is out of line, so that the path PyTorch takes is tessera_alloc's and one test more.
[[noreturn, gnu::noinline]] void throw_last_error(std::string_view oom_prefix) {
  const char* message = tessera_last_error();
  if (thread_error_code() == TESSERA_ERROR_OUT_OF_MEMORY) {
    throw std::runtime_error(fmt::format("{} {}", oom_prefix, message));
  }
  throw std::runtime_error(message);
}

[[gnu::always_inline]] inline void* allocate_or_throw(std::string_view function, std::string_view oom_prefix,
                                                      Platform platform, std::size_t size, int device,
                                                      void* stream) {
  void* block = allocate(function, platform, size, device, stream);
  if (block != nullptr || !call_failed()) [[likely]] return block;  // null without a failure: 0 bytes asked
  throw_last_error(oom_prefix);
}

// Whether `address` is a live block of `device`'s allocator (the slow path of a refused free).
bool holds_live_block(const Device& device, Address address) {
  for (const SnapshotSegment& segment : device.allocator->snapshot().segments) {
    if (address < segment.address || address >= segment.address + segment.total_size) continue;
    for (const SnapshotBlock& block : segment.blocks) {
      if (block.address == address && block.state == SnapshotBlock::State::active_allocated) return true;
    }
  }
  return false;
}

// A free that no allocator took (`owner`, where there is one, refused it with `refusal`): why, recorded.
[[gnu::cold, gnu::noinline]] void free_refused(std::string_view function, void* ptr, int device, Device* owner,
                                               const Error* refusal) {
  if (refusal != nullptr) {
    if (refusal->code != Errc::not_found) {
      set_last_error(refusal->code, fmt::format("{}({}, device {}): {}", function, ptr, device, describe(*refusal)));
      return;
    }
    owner->bad_frees.fetch_add(1, std::memory_order_relaxed);
  }
  const Address address = to_address(ptr);
  std::optional<int> elsewhere;
  for (Device* other : existing_devices()) {
    if (other != owner && holds_live_block(*other, address)) elsewhere = other->index;
  }
  // A live block named with the wrong device is a bad argument; no live block at all is not found.
  if (elsewhere) {
    set_last_error(Errc::invalid_argument,
                   fmt::format("{}({}, device {}): the block was allocated on device {}, not device {}; nothing "
                               "was freed",
                               function, ptr, device, *elsewhere, device));
  } else {
    set_last_error(Errc::not_found,
                   fmt::format("{}({}, device {}): not a live block of Tessera on device {} (a double free, or "
                               "memory from another allocator); nothing was freed",
                               function, ptr, device, device));
  }
}

// Everything but the fast path: a null pointer, a device number out of range or without an allocator, a
// fork's child.
[[gnu::noinline]] void release_slow(std::string_view function, void* ptr, int device) noexcept {
  guarded_void(function, [&] {
    if (ptr == nullptr) return;
    if (device < 0 || device >= max_devices) {  // not "not a live block": no device of that number exists
      set_last_error(Errc::invalid_argument, fmt::format("{}({}, device {}): {}; nothing was freed", function, ptr,
                                                         device, device_out_of_range(device).message));
      return;
    }
    Device* owner = existing_device(device);
    if (owner == nullptr) {
      free_refused(function, ptr, device, nullptr, nullptr);
      return;
    }
    if (auto refused = unusable_after_fork(*owner)) {
      set_last_error(refused->code,
                     fmt::format("{}({}, device {}): {}; nothing was freed", function, ptr, device, refused->message));
      return;
    }
    auto freed = owner->allocator->deallocate(to_address(ptr));
    if (!freed) free_refused(function, ptr, device, owner, &freed.error());
  });
}

// The fast path, as allocate's.
[[gnu::always_inline]] inline void release(std::string_view function, void* ptr, int device) noexcept {
  begin_call();
  Device* owner = usable_device(device);
  if (owner == nullptr || ptr == nullptr) [[unlikely]] {
    release_slow(function, ptr, device);
    return;
  }
  try {
    auto freed = owner->allocator->deallocate(to_address(ptr));
    if (freed) [[likely]] return;
    free_refused(function, ptr, device, owner, &freed.error());
  } catch (...) {
    record_current_exception(function);
  }
}

// Every device is tried; the first failure is the one recorded.
void empty_all_caches(std::string_view function) {
  guarded_void(function, [&] {
    for (Device* device : existing_devices()) {
      if (auto refused = unusable_after_fork(*device)) {
        if (!call_failed()) set_last_error(refused->code, fmt::format("{}: {}", function, refused->message));
        continue;
      }
      if (auto emptied = device->allocator->empty_cache(); !emptied && !call_failed()) {
        set_last_error(emptied.error().code,
                       fmt::format("{}: device {}: {}", function, device->index, describe(emptied.error())));
      }
    }
  });
}

void set_fraction(std::string_view function, Platform platform, double fraction, int device) {
  guarded_void(function, [&] {
    auto found = device_for(device, platform);
    if (!found) {
      set_last_error(found.error().code,
                     fmt::format("{}({}, device {}): {}", function, fraction, device, found.error().message));
      return;
    }
    if (auto set = (*found)->allocator->set_memory_fraction(fraction); !set) {
      set_last_error(set.error().code,
                     fmt::format("{}({}, device {}): {}", function, fraction, device, describe(set.error())));
    }
  });
}

void add_stream(std::string_view function, void* ptr, void* stream) {
  guarded_void(function, [&] {
    if (ptr == nullptr) return;
    for (Device* device : existing_devices()) {
      auto recorded = device->allocator->record_stream(to_address(ptr), to_stream(stream));
      if (recorded) return;
      if (recorded.error().code != Errc::not_found) {
        set_last_error(recorded.error().code,
                       fmt::format("{}({}, stream {}): {}", function, ptr, stream, describe(recorded.error())));
        return;
      }
    }
    set_last_error(Errc::not_found,
                   fmt::format("{}({}, stream {}): not a live block of Tessera on any device", function, ptr, stream));
  });
}

// The hook PyTorch calls when it installs the allocator: checks the driver and configuration now, so that a
// mistake is reported before the first allocation fails.
void check_settings(std::string_view function) {
  guarded_void(function, [&] {
    if (auto checked = configure(nullptr, nullptr); !checked) {
      set_last_error(checked.error().code, fmt::format("{}: {}", function, checked.error().message));
    }
  });
}

}  // namespace
}  // namespace tessera::capi

using namespace tessera::capi;

extern "C" {

void* tessera_alloc(size_t size, int device, void* stream) {
  return allocate("tessera_alloc", Platform::cuda, size, device, stream);
}
void* tessera_torch_alloc(size_t size, int device, void* stream) {
  return allocate_or_throw("tessera_torch_alloc", "CUDA out of memory.", Platform::cuda, size, device, stream);
}
void tessera_free(void* ptr, size_t /*size*/, int device, void* /*stream*/) { release("tessera_free", ptr, device); }
void tessera_init(int /*device_count*/) { check_settings("tessera_init"); }
void tessera_empty_cache(void) { empty_all_caches("tessera_empty_cache"); }
void tessera_set_memory_fraction(double fraction, int device) {
  set_fraction("tessera_set_memory_fraction", Platform::cuda, fraction, device);
}
void tessera_record_stream(void* ptr, void* stream) { add_stream("tessera_record_stream", ptr, stream); }

void* tessera_npu_alloc(size_t size, int device, void* stream) {
  return allocate("tessera_npu_alloc", Platform::ascend, size, device, stream);
}
void* tessera_torch_npu_alloc(size_t size, int device, void* stream) {
  return allocate_or_throw("tessera_torch_npu_alloc", "NPU out of memory.", Platform::ascend, size, device, stream);
}
void tessera_npu_free(void* ptr, size_t /*size*/, int device, void* /*stream*/) {
  release("tessera_npu_free", ptr, device);
}
void tessera_npu_init(int /*device_count*/) { check_settings("tessera_npu_init"); }
void tessera_npu_empty_cache(bool /*check_error*/) { empty_all_caches("tessera_npu_empty_cache"); }
void tessera_npu_set_memory_fraction(double fraction, int device) {
  set_fraction("tessera_npu_set_memory_fraction", Platform::ascend, fraction, device);
}
void tessera_npu_record_stream(void* ptr, void* stream) { add_stream("tessera_npu_record_stream", ptr, stream); }

}  // extern "C"
