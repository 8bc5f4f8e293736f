// Sizes on the command line: errors that name the option (tests/support_lib/sizes_test.cpp tests the rule).
#include "sizes.hpp"

#include <gtest/gtest.h>

#include "usage_error.hpp"

namespace tessera::cli {
namespace {

TEST(ParseSizeArgument, TheErrorNamesTheOption) {
  EXPECT_EQ(parse_size_argument("--capacity", "1GiB"), GiB);
  try {
    (void)parse_size_argument("--capacity", "80XB");
    FAIL() << "no error";
  } catch (const UsageError& error) {
    EXPECT_TRUE(std::string(error.what()).starts_with("--capacity: '80XB' is not a size")) << error.what();
  }
  try {
    (void)parse_size_argument("--capacity", "16777216TiB");
    FAIL() << "no error";
  } catch (const UsageError& error) {
    EXPECT_TRUE(std::string(error.what()).starts_with("--capacity: '16777216TiB' is too large")) << error.what();
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

}  // namespace
}  // namespace tessera::cli
