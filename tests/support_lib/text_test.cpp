// trim: spaces and tabs go, everything else stays.
#include <gtest/gtest.h>

#include "support/text.hpp"

namespace tessera::support {
namespace {

TEST(Trim, TakesSpacesAndTabsFromBothEnds) {
  EXPECT_EQ(trim("  key \t"), "key");
  EXPECT_EQ(trim("\tsmall_max_kb : 64 "), "small_max_kb : 64");  // inner blanks stay
  EXPECT_EQ(trim("plain"), "plain");
  EXPECT_EQ(trim(""), "");
  EXPECT_EQ(trim(" \t \t"), "");
}

TEST(Trim, LeavesLineEndsToTheLineReader) {
  EXPECT_EQ(trim(" a\r"), "a\r");
  EXPECT_EQ(trim("\na "), "\na");
}

}  // namespace
}  // namespace tessera::support
