// The message of the last failure, per thread and for the process, behind tessera_last_error().
#pragma once

#include <string>

namespace tessera::capi {

// Records a failure: this thread's message, and the process's most recent one.
void set_last_error(std::string message);

// The lock of the process's message, for the fork handler (registry.cpp).
void lock_last_error() noexcept;
void unlock_last_error() noexcept;

}  // namespace tessera::capi
