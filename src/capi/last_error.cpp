// tessera_last_error(): a thread-local message, as errno is thread-local, plus a copy for the process,
// because PyTorch allocates on threads of its own (the autograd engine's device threads) and reports the
// failure on another.
#include "capi/last_error.hpp"

#include <mutex>

#include "capi/guard.hpp"
#include "tessera/tessera_c.h"

namespace tessera::capi {
namespace {

thread_local std::string this_thread_error;
thread_local std::string any_thread_copy;  // what tessera_last_error_any_thread() returned last on this thread

std::mutex process_mutex;
std::string& process_error() {
  static auto* message = new std::string;  // never destroyed: frees may fail during static destruction
  return *message;
}

}  // namespace

void lock_last_error() noexcept { process_mutex.lock(); }
void unlock_last_error() noexcept { process_mutex.unlock(); }

void set_last_error(std::string message) {
  {
    std::lock_guard lock(process_mutex);
    process_error() = message;
  }
  this_thread_error = std::move(message);
}

}  // namespace tessera::capi

using namespace tessera::capi;

extern "C" {

const char* tessera_last_error(void) { return this_thread_error.c_str(); }

const char* tessera_last_error_any_thread(void) {
  return guarded("tessera_last_error_any_thread", static_cast<const char*>(""), [] {
    {
      std::lock_guard lock(process_mutex);
      any_thread_copy = process_error();
    }
    return any_thread_copy.c_str();
  });
}

void tessera_clear_error(void) {
  std::lock_guard lock(process_mutex);
  process_error().clear();
  this_thread_error.clear();
}

}  // extern "C"
