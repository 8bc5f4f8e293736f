// The history's stack capture without the allocator: it runs only while the history records with a capture
// set, gives the capture's stack, and runs the capture outside its own lock (a capture that changes the
// setting, as an interpreter's other thread may, does not deadlock).
#include "core/stack_capturer.hpp"

#include <gtest/gtest.h>

namespace tessera::core {
namespace {

std::shared_ptr<const Stack> one_frame(std::string name) {
  return std::make_shared<const Stack>(Stack{StackFrame{"train.py", 7, std::move(name)}});
}

TEST(StackCapturer, RunsOnlyWhileTheHistoryRecordsWithACaptureSet) {
  StackCapturer stacks;
  EXPECT_FALSE(stacks.on());
  EXPECT_EQ(stacks.take(), nullptr);
  stacks.set([] { return one_frame("step"); }, false);
  EXPECT_FALSE(stacks.on()) << "no history records";
  stacks.set_recording(true);
  EXPECT_TRUE(stacks.on());
  const auto stack = stacks.take();
  ASSERT_NE(stack, nullptr);
  EXPECT_EQ(stack->at(0).name, "step");
  stacks.set({}, true);
  EXPECT_FALSE(stacks.on()) << "the capture was taken away";
  EXPECT_EQ(stacks.take(), nullptr);
  stacks.set_recording(true);
  EXPECT_FALSE(stacks.on());
}

TEST(StackCapturer, TheCaptureRunsOutsideItsLock) {
  StackCapturer stacks;
  int runs = 0;
  stacks.set(
      [&] {
        ++runs;
        stacks.set_recording(false);  // takes the capturer's lock: a deadlock if take() held it
        return one_frame("inner");
      },
      true);
  EXPECT_EQ(stacks.take()->at(0).name, "inner");
  EXPECT_EQ(runs, 1);
  EXPECT_FALSE(stacks.on());
}

}  // namespace
}  // namespace tessera::core
