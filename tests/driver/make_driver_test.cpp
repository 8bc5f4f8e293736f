// make_driver(name, options): every caller that chooses a driver by name passes its options through here.
#include "driver_fixtures.hpp"

namespace tessera::testing {
namespace {

TEST(MakeDriverOptions, SizeTheHostAndSimDrivers) {
  for (const char* name : {"host", "sim"}) {
    auto driver = TESSERA_OK(make_driver(name, {.capacity = 64 * MiB, .granularity = 4 * MiB}));
    EXPECT_EQ(driver->name(), name);
    EXPECT_EQ(driver->capacity(), 64 * MiB) << name;
    EXPECT_EQ(driver->granularity(), 4 * MiB) << name;
  }
  // Empty options keep each driver's own defaults.
  EXPECT_EQ(TESSERA_OK(make_driver("host"))->capacity(), HostDriverOptions{}.capacity);
  EXPECT_EQ(TESSERA_OK(make_driver("sim"))->capacity(), SimDriverOptions{}.capacity);
}

TEST(MakeDriverOptions, RequireSetAccessMakesTheHostDriverBehaveLikeCuda) {
  EXPECT_FALSE(TESSERA_OK(make_driver("host"))->capabilities().needs_set_access);
  EXPECT_TRUE(TESSERA_OK(make_driver("host", {.require_set_access = true}))->capabilities().needs_set_access);
}

TEST(MakeDriverOptions, BadOptionsAreTheDriversOwnErrors) {
  auto odd = make_driver("sim", {.capacity = 3 * MiB});
  ASSERT_FALSE(odd.ok());
  EXPECT_NE(odd.error().message.find("capacity"), std::string::npos) << odd.error().message;
}

#ifdef TESSERA_FAKE_CUDA_LIBRARY
TEST(MakeDriverOptions, TheLibraryAndDeviceReachTheCudaDriver) {
  auto missing = make_driver("cuda", {.library = "/nonexistent/libcuda-for-a-test.so"});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, Errc::unavailable);
  EXPECT_NE(missing.error().message.find("/nonexistent/libcuda-for-a-test.so"), std::string::npos)
      << missing.error().message;
  auto fake = make_driver("cuda", {.library = TESSERA_FAKE_CUDA_LIBRARY});
  ASSERT_TRUE(fake.ok()) << fake.error().message;
  EXPECT_EQ((*fake)->name(), "cuda");
  auto absent_device = make_driver("cuda", {.device = 99, .library = TESSERA_FAKE_CUDA_LIBRARY});
  ASSERT_FALSE(absent_device.ok());
  EXPECT_NE(absent_device.error().message.find("99"), std::string::npos) << absent_device.error().message;
}
#endif

}  // namespace
}  // namespace tessera::testing
