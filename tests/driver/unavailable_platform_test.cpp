// The accelerator drivers on machines without the accelerator: asking for them is a typed, explained
// error, never a crash. With the fake libcuda (tests/driver/fake_cuda, when the build provides it as
// TESSERA_FAKE_CUDA_LIBRARY) the cuda driver's own code also runs end to end without a GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "driver/dynamic_library.hpp"
#include "tessera/drivers.hpp"
#include "fake_platforms.hpp"

namespace tessera {
namespace {

using detail::DynamicLibrary;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

constexpr const char* missing_library = "libtessera-no-such-library.so.1";

TEST(UnavailablePlatform, CudaWithAMissingLibraryIsUnavailableAndNamesIt) {
  auto made = make_cuda_driver({.device = 0, .library = missing_library});
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.error().code, Errc::unavailable) << describe(made.error());
  EXPECT_TRUE(contains(made.error().message, missing_library)) << made.error().message;
  EXPECT_TRUE(contains(made.error().message, "host or sim driver")) << made.error().message;
}

TEST(UnavailablePlatform, AscendWithAMissingLibraryIsUnavailableAndNamesIt) {
  auto made = make_ascend_driver({.device = 0, .library = missing_library});
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.error().code, Errc::unavailable) << describe(made.error());
  EXPECT_TRUE(contains(made.error().message, missing_library)) << made.error().message;
  EXPECT_TRUE(contains(made.error().message, "host or sim driver")) << made.error().message;
}

// The default library names: on a machine without a GPU, libcuda.so.1 is absent, or present without a
// device; either way an error. Where a GPU answers there is nothing to check here.
TEST(UnavailablePlatform, CudaWithTheDefaultLibraryFailsCleanlyWithoutAGpu) {
  auto made = make_cuda_driver();
  if (made.ok()) GTEST_SKIP() << "a CUDA device is present; the conformance suite covers it";
  EXPECT_TRUE(made.error().code == Errc::unavailable || made.error().code == Errc::unsupported)
      << describe(made.error());
  EXPECT_TRUE(contains(made.error().message, "cuda driver: ")) << made.error().message;
}

TEST(UnavailablePlatform, AscendWithTheDefaultLibraryFailsCleanlyWithoutAnNpu) {
  auto made = make_ascend_driver();
  if (made.ok()) GTEST_SKIP() << "an Ascend device is present; the conformance suite covers it";
  EXPECT_TRUE(made.error().code == Errc::unavailable || made.error().code == Errc::unsupported)
      << describe(made.error());
  EXPECT_TRUE(contains(made.error().message, "ascend driver: ")) << made.error().message;
}

// The CUDA toolkit's stub libcuda loads but its cuInit refuses: the message must say so, not blame
// memory or a bug.
TEST(UnavailablePlatform, CudaToolkitStubLibraryIsExplained) {
  std::string stub;
  for (const char* candidate :
       {"/usr/local/cuda/lib64/stubs/libcuda.so", "/usr/local/cuda/targets/x86_64-linux/lib/stubs/libcuda.so"}) {
    if (std::filesystem::exists(candidate)) stub = candidate;
  }
  if (stub.empty()) GTEST_SKIP() << "no CUDA toolkit stub libcuda on this machine";
  auto made = make_cuda_driver({.device = 0, .library = stub});
  if (made.ok()) GTEST_SKIP() << stub << " initialised a device";
  EXPECT_EQ(made.error().code, Errc::unavailable) << describe(made.error());
  EXPECT_TRUE(contains(made.error().message, "cuInit")) << made.error().message;
  EXPECT_TRUE(contains(made.error().message, "stub")) << made.error().message;
}

TEST(DynamicLibraryTest, OpeningAMissingLibraryNamesIt) {
  auto opened = DynamicLibrary::open(missing_library);
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.error().code, Errc::unavailable);
  EXPECT_TRUE(contains(opened.error().message, missing_library)) << opened.error().message;
}

TEST(DynamicLibraryTest, AMissingSymbolIsUnavailableAndNamesSymbolAndLibrary) {
  auto libc = DynamicLibrary::open("libc.so.6");
  ASSERT_TRUE(libc.ok()) << describe(libc.error());
  auto missing = libc->symbol<int(int)>("tessera_no_such_symbol");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, Errc::unavailable);
  EXPECT_TRUE(contains(missing.error().message, "tessera_no_such_symbol")) << missing.error().message;
  EXPECT_TRUE(contains(missing.error().message, "libc.so.6")) << missing.error().message;
}

TEST(DynamicLibraryTest, AFoundSymbolIsCallable) {
  auto libc = DynamicLibrary::open("libc.so.6");
  ASSERT_TRUE(libc.ok()) << describe(libc.error());
  auto length = libc->symbol<std::size_t(const char*)>("strlen");
  ASSERT_TRUE(length.ok()) << describe(length.error());
  EXPECT_EQ((*length)("tessera"), 7u);
  DynamicLibrary moved = std::move(*libc);  // the handle moves with the object and closes once
  EXPECT_EQ(moved.name(), "libc.so.6");
  EXPECT_TRUE(moved.address("strlen").ok());
}

#ifdef TESSERA_FAKE_CUDA_LIBRARY

using testing::FakeCuda;

TEST_F(FakeCuda, NoDeviceIsSaidPlainly) {
  control<void(int)>("fake_cuda_set_init_result")(100);  // CUDA_ERROR_NO_DEVICE
  auto made = make();
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.error().code, Errc::unavailable);
  EXPECT_EQ(made.error().platform_code, 100);
  EXPECT_TRUE(contains(made.error().message, "cuInit")) << made.error().message;
  EXPECT_TRUE(contains(made.error().message, "CUDA_ERROR_NO_DEVICE")) << made.error().message;
  EXPECT_TRUE(contains(made.error().message, "no CUDA device")) << made.error().message;
}

TEST_F(FakeCuda, ZeroDevicesAndAMissingOrdinalAreUnavailable) {
  control<void(int)>("fake_cuda_set_device_count")(0);
  auto none = make();
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().code, Errc::unavailable);
  EXPECT_TRUE(contains(none.error().message, "no CUDA device")) << none.error().message;

  control<void(int)>("fake_cuda_set_device_count")(1);
  auto third = make(3);
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.error().code, Errc::unavailable);
  EXPECT_TRUE(contains(third.error().message, "no CUDA device 3")) << third.error().message;
  EXPECT_EQ(control<int()>("fake_cuda_primary_references")(), 0);
}

TEST_F(FakeCuda, ADeviceWithoutVirtualMemoryManagementIsUnsupported) {
  control<void(int)>("fake_cuda_set_vmm_supported")(0);
  auto made = make();
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.error().code, Errc::unsupported);
  EXPECT_TRUE(contains(made.error().message, "virtual memory management")) << made.error().message;
}

TEST_F(FakeCuda, EveryCallReachesTheDriverAndTheContextIsGivenBack) {
  {
    auto made = make();
    ASSERT_TRUE(made.ok()) << describe(made.error());
    Driver& driver = **made;
    EXPECT_EQ(driver.name(), "cuda");
    EXPECT_TRUE(driver.capabilities().needs_set_access);
    EXPECT_TRUE(driver.capabilities().page_multi_mapping);
    EXPECT_FALSE(driver.capabilities().host_pointers);
    EXPECT_EQ(driver.granularity(), 2 * MiB);
    EXPECT_EQ(driver.capacity(), 256 * MiB);
    EXPECT_EQ(control<int()>("fake_cuda_primary_references")(), 1);

    const Address base = *driver.reserve(8 * MiB, 4 * MiB);
    EXPECT_TRUE(is_aligned(base, 4 * MiB));
    const ChunkId page = *driver.create_chunk(4 * MiB);
    ASSERT_TRUE(driver.map(base, page).ok());
    ASSERT_TRUE(driver.map(base + 4 * MiB, page).ok());  // one page at two addresses
    ASSERT_TRUE(driver.set_access(base, 8 * MiB).ok());

    std::vector<unsigned char> written(4 * MiB), back(4 * MiB);
    for (std::size_t i = 0; i < written.size(); ++i) written[i] = static_cast<unsigned char>(i * 7 + 3);
    ASSERT_TRUE(driver.write(base, written.data(), written.size()).ok());
    ASSERT_TRUE(driver.read(base + 4 * MiB, back.data(), back.size()).ok());
    EXPECT_EQ(std::memcmp(written.data(), back.data(), written.size()), 0);

    const EventId event = *driver.create_event();
    ASSERT_TRUE(driver.record_event(event, default_stream).ok());
    auto done = driver.query_event(event);
    ASSERT_TRUE(done.ok()) << describe(done.error());
    EXPECT_TRUE(*done);
    EXPECT_TRUE(driver.synchronize_event(event).ok());
    EXPECT_TRUE(driver.synchronize_stream(default_stream).ok());
    EXPECT_TRUE(driver.synchronize_device().ok());
    EXPECT_TRUE(driver.destroy_event(event).ok());

    EXPECT_TRUE(driver.unmap(base).ok());
    EXPECT_TRUE(driver.unmap(base + 4 * MiB).ok());
    EXPECT_TRUE(driver.release_chunk(page).ok());
    EXPECT_TRUE(driver.release_reservation(base).ok());
    EXPECT_EQ(driver.census(), DriverCensus{});
    EXPECT_EQ(control<std::size_t()>("fake_cuda_live_allocations")(), 0u);
    EXPECT_EQ(control<int()>("fake_cuda_live_events")(), 0);
  }
  EXPECT_EQ(control<int()>("fake_cuda_primary_references")(), 0) << "the driver must release the primary context";
}

TEST_F(FakeCuda, OutOfMemoryFromTheDeviceIsTypedAndNamesTheCall) {
  control<void(std::size_t)>("fake_cuda_set_physical_limit")(4 * MiB);  // less than the reported capacity
  auto made = make();
  ASSERT_TRUE(made.ok()) << describe(made.error());
  Driver& driver = **made;
  const ChunkId first = *driver.create_chunk(4 * MiB);
  auto second = driver.create_chunk(4 * MiB);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.error().code, Errc::out_of_memory);
  EXPECT_EQ(second.error().platform_code, 2);
  EXPECT_TRUE(contains(second.error().message, "cuMemCreate")) << second.error().message;
  EXPECT_TRUE(contains(second.error().message, "CUDA_ERROR_OUT_OF_MEMORY")) << second.error().message;
  EXPECT_EQ(driver.census().pages, 1u) << "a failed call changes nothing";
  EXPECT_TRUE(driver.release_chunk(first).ok());
}

// Host buffers come from cuMemHostAlloc: its out of memory is typed and named, and buffers the caller
// leaked are freed with the driver.
TEST_F(FakeCuda, HostBuffersComeFromCuMemHostAllocAndGoWithTheDriver) {
  {
    auto made = make();
    ASSERT_TRUE(made.ok()) << describe(made.error());
    Driver& driver = **made;
    auto buffer = driver.allocate_host(4096);
    ASSERT_TRUE(buffer.ok()) << describe(buffer.error());
    EXPECT_EQ(control<std::size_t()>("fake_cuda_live_host_buffers")(), 1u);
    control<void(std::size_t)>("fake_cuda_set_host_limit")(8192);
    auto over = driver.allocate_host(8192);
    ASSERT_FALSE(over.ok());
    EXPECT_EQ(over.error().code, Errc::out_of_memory);
    EXPECT_EQ(over.error().platform_code, 2);
    EXPECT_TRUE(contains(over.error().message, "cuMemHostAlloc(8192 bytes)")) << over.error().message;
    EXPECT_EQ(driver.census().host_buffers, 1u) << "a failed call changes nothing";
    EXPECT_NE(buffer->data, nullptr);
  }
  EXPECT_EQ(control<std::size_t()>("fake_cuda_live_host_buffers")(), 0u) << "the destructor freed the leaked buffer";
}

#endif  // TESSERA_FAKE_CUDA_LIBRARY

}  // namespace
}  // namespace tessera
