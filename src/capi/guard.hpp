// The exception barrier of every C entry point: nothing thrown inside the library crosses into C (or into
// PyTorch, which calls us from C++ without expecting exceptions). It also begins the call's record
// (last_error.hpp): the thread's code is reset first, and a throw becomes the failure value, the code
// TESSERA_ERROR_HOST_OUT_OF_MEMORY (std::bad_alloc) or TESSERA_ERROR_INTERNAL (anything else), and a message.
#pragma once

#include <string_view>
#include <utility>

#include "capi/last_error.hpp"

namespace tessera::capi {

// Records the exception being handled (call it only inside a catch) as the call's failure: the code
// TESSERA_ERROR_HOST_OUT_OF_MEMORY for std::bad_alloc, TESSERA_ERROR_INTERNAL for anything else, and a
// message that names `function`. Out of line and cold: the entry points' fast paths carry only its call.
[[gnu::cold]] void record_current_exception(std::string_view function) noexcept;

template <class T, class Body>
T guarded(std::string_view function, T on_failure, Body&& body) noexcept {
  begin_call();
  try {
    return std::forward<Body>(body)();
  } catch (...) {
    record_current_exception(function);
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
