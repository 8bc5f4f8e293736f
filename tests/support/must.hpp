// Unwraps a Result where a test needs its value to go on: an error throws, and GoogleTest reports the test
// failed with the error's description. (Assertions on a result itself use TESSERA_OK or EXPECT_*.)
#pragma once

#include <stdexcept>
#include <utility>

#include "tessera/result.hpp"

namespace tessera::test_support {

template <class T>
T must(Result<T> result) {
  if (!result) throw std::runtime_error(describe(result.error()));
  return std::move(result).value();
}

inline void must(Result<void> result) {
  if (!result) throw std::runtime_error(describe(result.error()));
}

}  // namespace tessera::test_support
