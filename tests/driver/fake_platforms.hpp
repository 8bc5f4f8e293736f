// The stand-in libcuda and libascendcl (tests/driver/fake_cuda, tests/driver/fake_ascend) as test fixtures:
// their controls are reached through the same library the driver opens (one dlopen handle, one state), and
// that state is reset before and after every test — it is the process's, and a process runs many tests (the
// sanitizer presets run each test binary in a few shards).
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <memory>
#include <optional>
#include <stdexcept>

#include "driver/dynamic_library.hpp"
#include "tessera/drivers.hpp"

namespace tessera::testing {

class FakePlatform : public ::testing::Test {
 protected:
  FakePlatform(const char* library, const char* reset) : library_(library), reset_(reset) {}

  void SetUp() override {
    auto opened = detail::DynamicLibrary::open(library_);
    ASSERT_TRUE(opened.ok()) << describe(opened.error());
    fake_.emplace(std::move(*opened));
    control<void()>(reset_)();
  }
  void TearDown() override {
    if (fake_) control<void()>(reset_)();
  }

  template <class F>
  F* control(const char* name) {
    auto found = fake_->address(name);
    if (!found) throw std::runtime_error(found.error().message);
    return reinterpret_cast<F*>(*found);
  }

  std::optional<detail::DynamicLibrary> fake_;

 private:
  const char* library_;
  const char* reset_;
};

#ifdef TESSERA_FAKE_CUDA_LIBRARY
class FakeCuda : public FakePlatform {
 protected:
  FakeCuda() : FakePlatform(TESSERA_FAKE_CUDA_LIBRARY, "fake_cuda_reset") {}

  Result<std::unique_ptr<Driver>> make(int device = 0) {
    return make_cuda_driver({.device = device, .library = TESSERA_FAKE_CUDA_LIBRARY});
  }
};
#endif

#ifdef TESSERA_FAKE_ASCEND_LIBRARY
class FakeAscend : public FakePlatform {
 protected:
  FakeAscend() : FakePlatform(TESSERA_FAKE_ASCEND_LIBRARY, "fake_ascend_reset") {}

  Result<std::unique_ptr<Driver>> make(int device = 0) {
    return make_ascend_driver({.device = device, .library = TESSERA_FAKE_ASCEND_LIBRARY});
  }

  int references() { return control<int(int)>("fake_ascend_device_references")(0); }
  std::size_t live(const char* what) { return control<std::size_t()>(what)(); }
};
#endif

}  // namespace tessera::testing
