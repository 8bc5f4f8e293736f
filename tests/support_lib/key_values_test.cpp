// key:value strings: entries split and trimmed, and every malformed string refused naming what is wrong.
#include <gtest/gtest.h>

#include "support/key_values.hpp"

namespace tessera::support {
namespace {

TEST(SplitKeyValues, SplitsAndTrimsEachEntry) {
  auto entries = split_key_values(" a:1 ,b : two,\tc:  ,d:x:y");
  ASSERT_TRUE(entries.ok()) << entries.error().message;
  ASSERT_EQ(entries->size(), 4u);
  EXPECT_EQ((*entries)[0].key, "a");
  EXPECT_EQ((*entries)[0].value, "1");
  EXPECT_EQ((*entries)[1].key, "b");
  EXPECT_EQ((*entries)[1].value, "two");
  EXPECT_EQ((*entries)[2].key, "c");
  EXPECT_EQ((*entries)[2].value, "");  // an empty value is the caller's to refuse
  EXPECT_EQ((*entries)[3].key, "d");
  EXPECT_EQ((*entries)[3].value, "x:y");  // the first colon splits
}

TEST(SplitKeyValues, BlankTextAndOneTrailingCommaAreAccepted) {
  EXPECT_TRUE(split_key_values("")->empty());
  EXPECT_TRUE(split_key_values(" \t ")->empty());
  auto trailing = split_key_values("a:1, ");
  ASSERT_TRUE(trailing.ok()) << trailing.error().message;
  EXPECT_EQ(trailing->size(), 1u);
}

TEST(SplitKeyValues, RefusesNamingTheEntryOrKey) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"a:1,,b:2", "an empty entry between commas"},
      {",a:1", "an empty entry between commas"},
      {"a:1,,", "an empty entry between commas"},
      {"a:1,flag", "'flag' has no value: expected key:value"},
      {" :5", "':5' has no key"},
      {"reclaim:first, reclaim :never", "key 'reclaim' given twice"},
  };
  for (const auto& [text, message] : bad) {
    auto entries = split_key_values(text);
    ASSERT_FALSE(entries.ok()) << text;
    EXPECT_EQ(entries.error().code, Errc::invalid_argument) << text;
    EXPECT_NE(entries.error().message.find(message), std::string::npos) << text << " -> " << entries.error().message;
  }
}

}  // namespace
}  // namespace tessera::support
