// Sharing a live block with another process through the C ABI (tessera_c.h, "Sharing a block with another
// process"): the allocator's export, import and close, the handle as bytes (core/export_handle.hpp), and the
// descriptors' ways between processes (support/descriptor_passing.hpp).
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <span>

#include "capi/guard.hpp"
#include "capi/last_error.hpp"
#include "capi/registry.hpp"
#include "core/export_handle.hpp"
#include "support/descriptor_passing.hpp"

namespace tessera::capi {
namespace {

Address address_of(const void* pointer) { return reinterpret_cast<std::uintptr_t>(pointer); }

int fail(std::string_view function, const Error& error) {
  // The one setting a caller of the C ABI controls: say it where the driver cannot share.
  const std::string_view hint =
      error.code == Errc::unsupported ? " (set TESSERA_SHAREABLE=1 before the device's allocator is made)" : "";
  set_last_error(error.code, fmt::format("{}: {}{}", function, error.message, hint));
  return -1;
}

}  // namespace
}  // namespace tessera::capi

using namespace tessera;
using namespace tessera::capi;

extern "C" {

int tessera_export(int device, void* ptr, void* handle, size_t handle_capacity, size_t* handle_size,
                   int* descriptors, size_t descriptor_capacity, size_t* descriptor_count) {
  constexpr std::string_view function = "tessera_export";
  return guarded(function, -1, [&] {
    if (handle_size == nullptr || descriptor_count == nullptr || (handle == nullptr && handle_capacity > 0) ||
        (descriptors == nullptr && descriptor_capacity > 0)) {
      return fail(function, make_error(Errc::invalid_argument, "handle_size and descriptor_count are required, and "
                                                               "a buffer for each capacity given"));
    }
    Device* found = existing_device(device);
    if (found == nullptr) {
      return fail(function, make_error(Errc::not_found, fmt::format("device {} has no allocator, so {:#x} is not "
                                                                    "its block",
                                                                    device, address_of(ptr))));
    }
    auto exported = found->allocator->export_block(address_of(ptr));
    if (!exported) return fail(function, exported.error());
    // The descriptors are this call's until they are handed over: closed on every way out but success, a
    // std::bad_alloc from the encoding included.
    struct CloseUnlessHanded {
      const ExportedBlock& block;
      bool handed = false;
      ~CloseUnlessHanded() {
        if (handed) return;
        for (const ExportedChunk& chunk : block.chunks) close(chunk.descriptor);
        if (block.liveness >= 0) close(block.liveness);
      }
    } guard{*exported};
    const std::vector<std::byte> bytes = core::encode_export(*exported);
    const std::vector<int> made = core::export_descriptors(*exported);
    *handle_size = bytes.size();
    *descriptor_count = made.size();
    if (bytes.size() > handle_capacity || made.size() > descriptor_capacity) {
      return fail(function, make_error(Errc::invalid_argument,
                                       fmt::format("the handle needs {} bytes and {} descriptors; room was given for "
                                                   "{} and {} (the block stays exported; call again with room)",
                                                   bytes.size(), made.size(), handle_capacity, descriptor_capacity)));
    }
    std::memcpy(handle, bytes.data(), bytes.size());
    std::copy(made.begin(), made.end(), descriptors);
    guard.handed = true;
    return 0;
  });
}

void* tessera_import(int device, const void* handle, size_t handle_size, const int* descriptors,
                     size_t descriptor_count) {
  constexpr std::string_view function = "tessera_import";
  return guarded(function, static_cast<void*>(nullptr), [&]() -> void* {
    if ((handle == nullptr && handle_size > 0) || (descriptors == nullptr && descriptor_count > 0)) {
      fail(function, make_error(Errc::invalid_argument, "a size or count without its buffer"));
      return nullptr;
    }
    auto block = core::decode_export(std::span(static_cast<const std::byte*>(handle), handle_size),
                                     std::span(descriptors, descriptor_count));
    if (!block) {
      fail(function, block.error());
      return nullptr;
    }
    auto found = device_for(device, Platform::cuda);
    if (!found) {
      fail(function, found.error());
      return nullptr;
    }
    auto imported = (*found)->allocator->import_block(*block);
    if (!imported) {
      fail(function, imported.error());
      return nullptr;
    }
    return reinterpret_cast<void*>(static_cast<std::uintptr_t>(*imported));
  });
}

int tessera_close_import(int device, void* ptr) {
  constexpr std::string_view function = "tessera_close_import";
  return guarded(function, -1, [&] {
    Device* found = existing_device(device);
    if (found == nullptr) {
      return fail(function, make_error(Errc::not_found, fmt::format("device {} has no allocator, so {:#x} is none of "
                                                                    "its imports",
                                                                    device, address_of(ptr))));
    }
    if (auto done = found->allocator->close_import(address_of(ptr)); !done) return fail(function, done.error());
    return 0;
  });
}

int tessera_send_handle(int socket, const void* handle, size_t handle_size, const int* descriptors,
                        size_t descriptor_count) {
  constexpr std::string_view function = "tessera_send_handle";
  return guarded(function, -1, [&] {
    if ((handle == nullptr && handle_size > 0) || (descriptors == nullptr && descriptor_count > 0)) {
      return fail(function, make_error(Errc::invalid_argument, "a size or count without its buffer"));
    }
    auto sent = send_descriptors(socket, std::span(static_cast<const std::byte*>(handle), handle_size),
                                 std::span(descriptors, descriptor_count));
    return sent ? 0 : fail(function, sent.error());
  });
}

int tessera_receive_handle(int socket, void* handle, size_t handle_capacity, size_t* handle_size, int* descriptors,
                           size_t descriptor_capacity, size_t* descriptor_count) {
  constexpr std::string_view function = "tessera_receive_handle";
  return guarded(function, -1, [&] {
    if (handle == nullptr || handle_size == nullptr || descriptor_count == nullptr ||
        (descriptors == nullptr && descriptor_capacity > 0)) {
      return fail(function, make_error(Errc::invalid_argument, "handle, handle_size and descriptor_count are required"));
    }
    auto received = receive_descriptors(socket, handle_capacity, descriptor_capacity);
    if (!received) return fail(function, received.error());
    std::memcpy(handle, received->bytes.data(), received->bytes.size());
    std::copy(received->descriptors.begin(), received->descriptors.end(), descriptors);
    *handle_size = received->bytes.size();
    *descriptor_count = received->descriptors.size();
    return 0;
  });
}

int tessera_take_descriptor(int pid, int descriptor) {
  constexpr std::string_view function = "tessera_take_descriptor";
  return guarded(function, -1, [&] {
    auto taken = take_descriptor(static_cast<pid_t>(pid), descriptor);
    return taken ? *taken : fail(function, taken.error());
  });
}

}  // extern "C"
