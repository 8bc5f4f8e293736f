// The drivers the conformance suite runs on: host and sim always, the cuda and ascend drivers over their
// stand-in libraries always, cuda and ascend themselves when their platform is present on this machine.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tessera/drivers.hpp"

namespace tessera::testing {

struct DriverFactory {
  std::string name;
  std::function<Result<std::unique_ptr<Driver>>()> make;
};

inline std::ostream& operator<<(std::ostream& out, const DriverFactory& factory) { return out << factory.name; }

// Small capacities keep the out-of-memory cases fast; granules stay at the platforms' 2 MiB.
inline constexpr Bytes test_capacity = 64 * MiB;

std::vector<DriverFactory> available_drivers();

// Unwraps a Result in a test, failing with the error's description.
template <class T>
T expect_ok(Result<T> result, const char* what) {
  if (!result) {
    ADD_FAILURE() << what << ": " << describe(result.error());
    throw std::runtime_error(what);
  }
  return std::move(result).value();
}

inline void expect_ok(Result<void> result, const char* what) {
  if (!result) {
    ADD_FAILURE() << what << ": " << describe(result.error());
    throw std::runtime_error(what);
  }
}

#define TESSERA_OK(expression) ::tessera::testing::expect_ok((expression), #expression)

}  // namespace tessera::testing
