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

std::string refusal(std::string_view text) {
  try {
    (void)parse_granule_argument("--granule", text, 4 * KiB);
  } catch (const UsageError& error) {
    return error.what();
  }
  return "accepted";
}

TEST(ParseGranuleArgument, APowerOfTwoOfAtLeastTheMinimum) {
  EXPECT_EQ(parse_granule_argument("--granule", "2MiB", 4 * KiB), 2 * MiB);
  EXPECT_EQ(parse_granule_argument("--granule", "4096", 4 * KiB), 4 * KiB);
  EXPECT_EQ(parse_granule_argument("--granule", "4KiB", 4 * KiB), 4 * KiB);
  // A bare number under the minimum was meant with a unit: the message says the unit is bytes.
  EXPECT_EQ(refusal("2"), "--granule 2: the granule is in bytes (with a unit: 2MiB); at least 4KiB");
  EXPECT_EQ(refusal(" 64 "), "--granule 64: the granule is in bytes (with a unit: 64MiB); at least 4KiB");
  EXPECT_EQ(refusal("1"), "--granule 1: the granule is in bytes (with a unit: 1MiB); at least 4KiB");
  EXPECT_EQ(refusal("1KiB"), "--granule 1KiB: the granule is at least 4KiB");
  EXPECT_EQ(refusal("3MiB"), "--granule: '3MiB' is not a power of two");
  EXPECT_TRUE(refusal("2XB").starts_with("--granule: '2XB' is not a size")) << refusal("2XB");
}

TEST(FormatSizeArgument, TheLargestWholeUnit) {
  EXPECT_EQ(format_size_argument(4 * KiB), "4KiB");
  EXPECT_EQ(format_size_argument(2 * MiB), "2MiB");
  EXPECT_EQ(format_size_argument(1536 * KiB), "1536KiB");
  EXPECT_EQ(format_size_argument(Bytes{1} << 40), "1TiB");
  EXPECT_EQ(format_size_argument(100), "100");
}

}  // namespace
}  // namespace tessera::cli
