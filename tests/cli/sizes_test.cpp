// Sizes on the command line: units, fractions, and what is refused.
#include "sizes.hpp"

#include <gtest/gtest.h>

#include "usage_error.hpp"

namespace tessera::cli {
namespace {

TEST(ParseSize, UnitsAndFractions) {
  EXPECT_EQ(parse_size("4096"), 4096U);
  EXPECT_EQ(parse_size("80GiB"), 80 * GiB);
  EXPECT_EQ(parse_size("512MiB"), 512 * MiB);
  EXPECT_EQ(parse_size("2MiB"), 2 * MiB);
  EXPECT_EQ(parse_size("1.5GiB"), 3 * GiB / 2);
  EXPECT_EQ(parse_size("1.5 gib"), 3 * GiB / 2);
  EXPECT_EQ(parse_size("2m"), 2 * MiB);
  EXPECT_EQ(parse_size("8K"), 8 * KiB);
  EXPECT_EQ(parse_size("1T"), Bytes{1} << 40);
  EXPECT_EQ(parse_size("100B"), 100U);
  EXPECT_EQ(parse_size("80GB"), 80'000'000'000U);  // SI where the unit says so
  EXPECT_EQ(parse_size("1MB"), 1'000'000U);
  EXPECT_EQ(parse_size(" 3 MiB "), 3 * MiB);
  EXPECT_EQ(parse_size("0.5"), 1U);  // rounded to the nearest byte
  EXPECT_EQ(parse_size("18446744073709551615"), 18446744073709551615U);
}

TEST(ParseSize, Refused) {
  for (const char* bad : {"", "GiB", "-1", "1e9", "80XB", "1.2.3GiB", "80 GiB extra", "0x10", "18446744073709551616",
                          "16777216TiB", ".", "nan", "inf"}) {
    EXPECT_FALSE(parse_size(bad).has_value()) << bad;
  }
}

TEST(ParseSizeArgument, TheErrorNamesTheOption) {
  EXPECT_EQ(parse_size_argument("--capacity", "1GiB"), GiB);
  try {
    (void)parse_size_argument("--capacity", "80XB");
    FAIL() << "no error";
  } catch (const UsageError& error) {
    EXPECT_TRUE(std::string(error.what()).starts_with("--capacity: '80XB'")) << error.what();
  }
}

}  // namespace
}  // namespace tessera::cli
