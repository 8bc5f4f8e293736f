// A shared library opened at run time (dlopen/dlsym/dlclose), so that the cuda and ascend drivers build
// and run on machines without the vendor's library and answer "unavailable" instead of failing to link.
#pragma once

#include <string>
#include <utility>

#include "tessera/result.hpp"

namespace tessera::detail {

class DynamicLibrary {
 public:
  // Opens `name` (a file name searched the way dlopen searches, or a path). Every symbol is bound now
  // (RTLD_NOW) so that a broken library fails here, not at the first call. With `keep_loaded` the library
  // stays mapped after the last close (RTLD_NODELETE): vendor runtimes such as libcuda start threads that
  // run their code, and unmapping it under them would crash the process.
  // Errc::unavailable naming the library and dlerror() when it cannot be opened.
  static Result<DynamicLibrary> open(const std::string& name, bool keep_loaded = false);

  DynamicLibrary(DynamicLibrary&& other) noexcept
      : handle_(std::exchange(other.handle_, nullptr)), name_(std::move(other.name_)) {}
  DynamicLibrary& operator=(DynamicLibrary&& other) noexcept;
  DynamicLibrary(const DynamicLibrary&) = delete;
  DynamicLibrary& operator=(const DynamicLibrary&) = delete;
  ~DynamicLibrary();

  const std::string& name() const noexcept { return name_; }

  // The address of a function exported by the library, as a pointer of type Fn*, e.g.
  // symbol<int(unsigned)>("cuInit"). Errc::unavailable naming the symbol and the library when it is absent.
  template <class Fn>
  Result<Fn*> symbol(const char* symbol_name) const {
    auto found = address(symbol_name);
    if (!found) return std::move(found).error();
    return reinterpret_cast<Fn*>(*found);  // POSIX: a dlsym result may be converted to a function pointer
  }

  // The untyped address of a symbol, with the same errors as symbol().
  Result<void*> address(const char* symbol_name) const;

 private:
  DynamicLibrary(void* handle, std::string name) : handle_(handle), name_(std::move(name)) {}
  void close() noexcept;

  void* handle_ = nullptr;
  std::string name_;
};

}  // namespace tessera::detail
