// tessera_last_error_code() and tessera_last_error(): the outcome of this thread's last call, reset by every
// call (last_error.hpp); plus a copy of the latest message for the process, because PyTorch allocates on
// threads of its own (the autograd engine's device threads) and a person may want to see why.
#include "capi/last_error.hpp"

#include <mutex>

#include "tessera/tessera_c.h"

namespace tessera::capi {

thread_local constinit int this_thread_code = TESSERA_OK;

namespace {

thread_local std::string this_thread_error;  // meaningful only while the code is not TESSERA_OK
thread_local std::string any_thread_copy;    // what tessera_last_error_any_thread() returned last on this thread

std::mutex process_mutex;
std::string& process_error() {
  static auto* message = new std::string;  // never destroyed: frees may fail during static destruction
  return *message;
}

}  // namespace

// No default case, and a missing enumerator is an error even without TESSERA_WERROR: a new Errc must get its
// own C code (appended to tessera_error_code) before the library builds.
#pragma GCC diagnostic push
#pragma GCC diagnostic error "-Wswitch"
tessera_error_code code_of(Errc errc) noexcept {
  switch (errc) {
    case Errc::out_of_memory: return TESSERA_ERROR_OUT_OF_MEMORY;
    case Errc::invalid_argument: return TESSERA_ERROR_INVALID_ARGUMENT;
    case Errc::not_found: return TESSERA_ERROR_NOT_FOUND;
    case Errc::not_mapped: return TESSERA_ERROR_NOT_MAPPED;
    case Errc::already_mapped: return TESSERA_ERROR_ALREADY_MAPPED;
    case Errc::still_mapped: return TESSERA_ERROR_STILL_MAPPED;
    case Errc::map_limit: return TESSERA_ERROR_MAP_LIMIT;
    case Errc::unavailable: return TESSERA_ERROR_UNAVAILABLE;
    case Errc::unsupported: return TESSERA_ERROR_UNSUPPORTED;
    case Errc::platform: return TESSERA_ERROR_PLATFORM;
  }
  return TESSERA_ERROR_INTERNAL;  // a value outside the enumeration: memory corruption
}
#pragma GCC diagnostic pop

void lock_last_error() noexcept { process_mutex.lock(); }
void unlock_last_error() noexcept { process_mutex.unlock(); }

void set_last_error(tessera_error_code code, std::string message) noexcept {
  this_thread_code = code == TESSERA_OK ? TESSERA_ERROR_INTERNAL : code;  // a failure is never OK
  try {
    std::lock_guard lock(process_mutex);
    process_error() = message;
  } catch (...) {  // out of host memory: the thread's message matters more
  }
  this_thread_error = std::move(message);  // noexcept
}

}  // namespace tessera::capi

using namespace tessera::capi;

extern "C" {

// The error functions leave the thread's state as it is: reading the error must not clear it.

int tessera_last_error_code(void) { return thread_error_code(); }

const char* tessera_last_error(void) {
  if (!call_failed()) return "";
  // Empty only when host memory ran out while the failure was recorded.
  return this_thread_error.empty() ? "tessera: a failure whose message could not be kept (out of host memory)"
                                   : this_thread_error.c_str();
}

const char* tessera_last_error_any_thread(void) {
  try {
    std::lock_guard lock(process_mutex);
    any_thread_copy = process_error();
  } catch (...) {
    return "";
  }
  return any_thread_copy.c_str();
}

void tessera_clear_error(void) {
  begin_call();
  this_thread_error.clear();
  std::lock_guard lock(process_mutex);
  process_error().clear();
}

}  // extern "C"
