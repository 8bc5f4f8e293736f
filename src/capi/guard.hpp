// The exception barrier of every C entry point: nothing thrown inside the library crosses into C (or into
// PyTorch, which calls us from C++ without expecting exceptions). A throw becomes the failure value and a
// message for tessera_last_error().
#pragma once

#include <exception>
#include <new>
#include <string>
#include <string_view>
#include <utility>

#include "capi/last_error.hpp"

namespace tessera::capi {

template <class T, class Body>
T guarded(std::string_view function, T on_failure, Body&& body) noexcept {
  try {
    return std::forward<Body>(body)();
  } catch (const std::bad_alloc&) {
    try {
      set_last_error(std::string(function) + ": out of host memory");
    } catch (...) {
    }
  } catch (const std::exception& error) {
    try {
      set_last_error(std::string(function) + ": " + error.what());
    } catch (...) {
    }
  } catch (...) {
    try {
      set_last_error(std::string(function) + ": unknown exception");
    } catch (...) {
    }
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
