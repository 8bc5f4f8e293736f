// One libFuzzer binary: TESSERA_FUZZ_RUN names the target function of targets.hpp it runs.
#include <cstdio>
#include <cstdlib>

#include "targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    return tessera::fuzz::TESSERA_FUZZ_RUN(data, size);
  } catch (const tessera::fuzz::Failure& failure) {
    // An abort is what libFuzzer keeps an input for.
    std::fprintf(stderr, "\n==tessera-fuzz== FAILURE: %s\n", failure.what());
    std::fflush(stderr);
    std::abort();
  }
}
