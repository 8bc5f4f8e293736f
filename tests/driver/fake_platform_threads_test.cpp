// The stand-in drivers called from threads other than the one that made them: the contexts the real
// platforms keep per thread. In the thread tests' binary, which ThreadSanitizer runs (the tsan preset).
#include <gtest/gtest.h>

#include <cstdint>
#include <thread>

#include "fake_platforms.hpp"

namespace tessera::testing {
namespace {

#ifdef TESSERA_FAKE_CUDA_LIBRARY
// Any thread may call (one at a time): a thread without a context gets the primary one, and a thread with
// its own context finds it current again after each call.
TEST_F(FakeCuda, CallsFromOtherThreadsRunInThePrimaryContext) {
  auto made = make();
  ASSERT_TRUE(made.ok()) << describe(made.error());
  Driver& driver = **made;
  std::thread bare([&] {
    auto event = driver.create_event();  // the fake refuses context-bound calls without a current context
    ASSERT_TRUE(event.ok()) << describe(event.error());
    EXPECT_TRUE(driver.destroy_event(*event).ok());
  });
  bare.join();

  int other_context_object = 0;
  std::thread foreign([&] {
    control<void(void*)>("fake_cuda_set_current_context")(&other_context_object);
    EXPECT_TRUE(driver.synchronize_device().ok());
    EXPECT_EQ(control<void*()>("fake_cuda_current_context")(), &other_context_object);
  });
  foreign.join();
}
#endif  // TESSERA_FAKE_CUDA_LIBRARY

#ifdef TESSERA_FAKE_ASCEND_LIBRARY
// ACL contexts are per thread: a thread without one runs the driver's calls in the device's context, and a
// thread with a context of its own finds it current again after each call.
TEST_F(FakeAscend, CallsFromOtherThreadsRunInTheDevicesContext) {
  control<void(int)>("fake_ascend_set_device_count")(2);
  auto made = make();
  ASSERT_TRUE(made.ok()) << describe(made.error());
  Driver& driver = **made;
  std::thread bare([&] {
    EXPECT_EQ(control<void*()>("fake_ascend_current_context")(), nullptr);
    auto page = driver.create_chunk(2 * MiB);  // the stand-in refuses memory calls without a current context
    ASSERT_TRUE(page.ok()) << describe(page.error());
    EXPECT_TRUE(driver.release_chunk(*page).ok());
  });
  bare.join();

  std::thread foreign([&] {
    ASSERT_EQ(control<int(std::int32_t)>("aclrtSetDevice")(1), 0);
    void* own = control<void*()>("fake_ascend_current_context")();
    EXPECT_TRUE(driver.synchronize_device().ok());
    EXPECT_EQ(control<void*()>("fake_ascend_current_context")(), own);
    EXPECT_EQ(control<int(std::int32_t)>("aclrtResetDevice")(1), 0);
  });
  foreign.join();
}
#endif  // TESSERA_FAKE_ASCEND_LIBRARY

}  // namespace
}  // namespace tessera::testing
