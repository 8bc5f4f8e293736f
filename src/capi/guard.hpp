// The exception barrier of every C entry point: nothing thrown inside the library crosses into C (or into
// PyTorch, which calls us from C++ without expecting exceptions). It also begins the call's record
// (last_error.hpp): the thread's code is reset first, and a throw becomes the failure value, the code
// TESSERA_ERROR_HOST_OUT_OF_MEMORY (std::bad_alloc) or TESSERA_ERROR_INTERNAL (anything else), and a message.
#pragma once

#include <exception>
#include <new>
#include <string>
#include <string_view>
#include <utility>

#include "capi/last_error.hpp"

namespace tessera::capi {

// A throw's record. The code is kept even when the message cannot be built.
inline void record_exception(tessera_error_code code, std::string_view function, const char* what) noexcept {
  std::string message;
  try {
    message.append(function).append(": ").append(what);
  } catch (...) {
  }
  set_last_error(code, std::move(message));
}

template <class T, class Body>
T guarded(std::string_view function, T on_failure, Body&& body) noexcept {
  begin_call();
  try {
    return std::forward<Body>(body)();
  } catch (const std::bad_alloc&) {
    record_exception(TESSERA_ERROR_HOST_OUT_OF_MEMORY, function, "out of host memory");
  } catch (const std::exception& error) {
    record_exception(TESSERA_ERROR_INTERNAL, function, error.what());
  } catch (...) {
    record_exception(TESSERA_ERROR_INTERNAL, function, "unknown exception");
  }
  return on_failure;
}

template <class Body>
void guarded_void(std::string_view function, Body&& body) noexcept {
  (void)guarded(function, 0, [&] {
    std::forward<Body>(body)();
    return 0;
  });
}

}  // namespace tessera::capi
