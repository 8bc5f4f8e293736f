// The two ways a command fails: a usage error (the command line is wrong: exit 2) and anything else
// (exit 1). Subcommands throw UsageError with a message that names the bad argument; main() prints it.
#pragma once

#include <stdexcept>

namespace tessera::cli {

inline constexpr int exit_success = 0;
inline constexpr int exit_failure = 1;
inline constexpr int exit_usage = 2;

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace tessera::cli
