// The exception barrier's record of a throw (guard.hpp).
#include "capi/guard.hpp"

#include <exception>
#include <new>
#include <string>
#include <utility>

namespace tessera::capi {
namespace {

// The code is kept even when the message cannot be built.
void record(tessera_error_code code, std::string_view function, const char* what) noexcept {
  std::string message;
  try {
    message.append(function).append(": ").append(what);
  } catch (...) {
  }
  set_last_error(code, std::move(message));
}

}  // namespace

void record_current_exception(std::string_view function) noexcept {
  try {
    throw;
  } catch (const std::bad_alloc&) {
    record(TESSERA_ERROR_HOST_OUT_OF_MEMORY, function, "out of host memory");
  } catch (const std::exception& error) {
    record(TESSERA_ERROR_INTERNAL, function, error.what());
  } catch (...) {
    record(TESSERA_ERROR_INTERNAL, function, "unknown exception");
  }
}

}  // namespace tessera::capi
