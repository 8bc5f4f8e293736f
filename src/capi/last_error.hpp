// The outcome of the last call on each thread, behind tessera_last_error_code() and tessera_last_error()
// (tessera_c.h, "Errors"), and the process's most recent failure message behind
// tessera_last_error_any_thread().
#pragma once

#include <string>

#include "tessera/result.hpp"
#include "tessera/tessera_c.h"

namespace tessera::capi {

// The code of the call in progress on this thread, then of its last call; read and written only through the
// functions below. Initial-exec, as the thread's tag (tags.hpp): resetting it is one store from the thread
// pointer, cheap enough for every allocation and free.
extern thread_local constinit int this_thread_code __attribute__((tls_model("initial-exec")));

// The first thing every entry point does (but the error functions): the call in progress has not failed.
inline void begin_call() noexcept { this_thread_code = TESSERA_OK; }
// Whether the call in progress on this thread has recorded a failure.
inline bool call_failed() noexcept { return this_thread_code != TESSERA_OK; }
inline int thread_error_code() noexcept { return this_thread_code; }

// The C code of a C++ error category.
tessera_error_code code_of(Errc errc) noexcept;

// Records the failure of the call in progress: this thread's code and message, and the process's most recent
// message. Never throws: when even the message cannot be kept, the code still is.
void set_last_error(tessera_error_code code, std::string message) noexcept;
inline void set_last_error(Errc errc, std::string message) noexcept {
  set_last_error(code_of(errc), std::move(message));
}

// The lock of the process's message, for the fork handler (registry.cpp).
void lock_last_error() noexcept;
void unlock_last_error() noexcept;

}  // namespace tessera::capi
