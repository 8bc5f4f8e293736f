// PyTorch's power-of-two divisions: worked examples, and the rule over many sizes.
#include <gtest/gtest.h>

#include <random>

#include "support/power2_divisions.hpp"

namespace tessera::support {
namespace {

TEST(RoundUpToPower2Division, WorkedExamples) {
  // 4 divisions of [256 MiB, 512 MiB): steps of 64 MiB.
  EXPECT_EQ(round_up_to_power2_division(300 * MiB, 4), 320 * MiB);
  EXPECT_EQ(round_up_to_power2_division(320 * MiB, 4), 320 * MiB);
  EXPECT_EQ(round_up_to_power2_division(449 * MiB, 4), 512 * MiB);
  EXPECT_EQ(round_up_to_power2_division(256 * MiB, 4), 256 * MiB);  // a power of two stays
  // 8 divisions of [1 MiB, 2 MiB): steps of 128 KiB.
  EXPECT_EQ(round_up_to_power2_division(MiB + 1, 8), MiB + 128 * KiB);
  // 1 division: the next power of two.
  EXPECT_EQ(round_up_to_power2_division(3 * MiB, 1), 4 * MiB);
  // A step below one byte: the next power of two.
  EXPECT_EQ(round_up_to_power2_division(5, 8), 8u);
}

TEST(RoundUpToPower2Division, NothingAt2To64) {
  const Bytes top = Bytes{1} << 63;
  EXPECT_EQ(round_up_to_power2_division(top, 4), top);
  EXPECT_EQ(round_up_to_power2_division(top + top / 4, 4), top + top / 4);
  EXPECT_EQ(round_up_to_power2_division(top + 1, 4), top + top / 4);
  EXPECT_EQ(round_up_to_power2_division(top + top / 2 + top / 4 + 1, 4), std::nullopt);
  EXPECT_EQ(round_up_to_power2_division(~Bytes{0}, 64), std::nullopt);
}

// The smallest multiple of the step (the interval's power of two over `divisions`) at or above the size.
TEST(RoundUpToPower2Division, TheSmallestStepAtOrAboveTheSize) {
  std::mt19937_64 random(11);
  for (int i = 0; i < 100000; ++i) {
    const Bytes size = std::max<Bytes>(random() >> (1 + random() % 63), 1);  // below 2^63: never past 2^64
    const Bytes divisions = Bytes{1} << (random() % 7);
    const std::optional<Bytes> rounded = round_up_to_power2_division(size, divisions);
    ASSERT_TRUE(rounded.has_value()) << size;
    Bytes floor = 1;
    while (floor <= size / 2) floor *= 2;
    const Bytes step = std::max<Bytes>(floor / divisions, 1);
    ASSERT_GE(*rounded, size);
    if (floor / divisions == 0) {
      ASSERT_EQ(*rounded, size == floor ? size : 2 * floor) << size << " / " << divisions;
    } else {
      ASSERT_EQ(*rounded % step, 0u) << size << " / " << divisions;
      ASSERT_LT(*rounded - size, step) << size << " / " << divisions;
    }
  }
}

}  // namespace
}  // namespace tessera::support
