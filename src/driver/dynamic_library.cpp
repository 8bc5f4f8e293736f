#include "driver/dynamic_library.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

namespace tessera::detail {

namespace {

// dlerror() returns the last error once and then null; never hand a null pointer to fmt.
std::string last_dl_error(const char* fallback) {
  const char* message = dlerror();
  return message != nullptr ? std::string(message) : std::string(fallback);
}

}  // namespace

Result<DynamicLibrary> DynamicLibrary::open(const std::string& name, bool keep_loaded) {
  if (name.empty()) return make_error(Errc::unavailable, "cannot load a library with an empty name");
  int flags = RTLD_NOW | RTLD_LOCAL;
  if (keep_loaded) flags |= RTLD_NODELETE;
  dlerror();  // clear any stale error so the message below is this call's
  void* handle = dlopen(name.c_str(), flags);
  if (handle == nullptr) {
    return make_error(Errc::unavailable,
                      fmt::format("cannot load {} ({})", name, last_dl_error("dlopen gave no reason")));
  }
  return DynamicLibrary(handle, name);
}

DynamicLibrary& DynamicLibrary::operator=(DynamicLibrary&& other) noexcept {
  if (this != &other) {
    close();
    handle_ = std::exchange(other.handle_, nullptr);
    name_ = std::move(other.name_);
  }
  return *this;
}

DynamicLibrary::~DynamicLibrary() { close(); }

void DynamicLibrary::close() noexcept {
  if (handle_ != nullptr) {
    dlclose(handle_);  // a failure here leaves the library loaded, which is harmless
    handle_ = nullptr;
  }
}

Result<void*> DynamicLibrary::address(const char* symbol_name) const {
  if (handle_ == nullptr) {
    return make_error(Errc::unavailable, fmt::format("cannot look up {}: library {} is not open", symbol_name, name_));
  }
  // A symbol's value may legitimately be null, so the error is told apart by dlerror(), not by the result.
  dlerror();
  void* address = dlsym(handle_, symbol_name);
  const char* failure = dlerror();
  if (failure != nullptr || address == nullptr) {
    return make_error(Errc::unavailable,
                      fmt::format("{} has no symbol {} ({})", name_, symbol_name,
                                  failure != nullptr ? failure : "it resolves to null"));
  }
  return address;
}

}  // namespace tessera::detail
