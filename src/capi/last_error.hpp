// The message of the last failure, per thread and for the process, behind tessera_last_error().
#pragma once

#include <string>

namespace tessera::capi {

// Records a failure: this thread's message, and the process's most recent one.
void set_last_error(std::string message);

}  // namespace tessera::capi
