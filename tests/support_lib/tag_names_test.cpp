// Tag names (tags.hpp): check_tag_name against an independent judge of UTF-8, the JSON library that writes
// the statistics. A name it accepts is one the statistics can always write and read back; a name it refuses
// for its bytes is one they could not write.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "tessera/tags.hpp"

namespace tessera {
namespace {

bool json_writes(const std::string& name) {
  try {
    const std::string written = nlohmann::json{{"tessera.tag." + name + ".paused", 1}}.dump();
    return nlohmann::json::parse(written).contains("tessera.tag." + name + ".paused");
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

bool has_control_byte(const std::string& name) {
  for (const char c : name) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) return true;
  }
  return false;
}

// Random names, most bytes high (where UTF-8 can break), a few multi-byte sequences whole or cut.
TEST(TagNames, AcceptedExactlyWhenTheStatisticsCanWriteThem) {
  std::mt19937_64 random(20261203);
  const std::string pieces[] = {"a", "\xc3\xa9", "\xe6\x9d\x83", "\xf0\x9f\x98\x80", "\xed\x9f\xbf", "\xef\xbf\xbd"};
  int accepted = 0;
  for (int round = 0; round < 20000; ++round) {
    std::string name;
    const std::size_t length = 1 + random() % 12;
    while (name.size() < length) {
      if (random() % 3 == 0) {
        name += pieces[random() % std::size(pieces)];
      } else {
        name += static_cast<char>(0x20 + random() % 0xE0);  // never a control byte below 0x20
      }
    }
    if (random() % 5 == 0) name.pop_back();  // a sequence cut short, often
    if (has_control_byte(name)) continue;
    const bool ok = check_tag_name(name).ok();
    EXPECT_EQ(ok, json_writes(name)) << quoted_tag_name(name);
    accepted += ok ? 1 : 0;
  }
  EXPECT_GT(accepted, 1000) << "the generator makes valid names too";
}

TEST(TagNames, TheErrorNamesTheByteAndItsOffset) {
  const auto refused = check_tag_name("ok\xe6\x9d");
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("0xe6 at offset 2"), std::string::npos) << refused.error().message;
  EXPECT_NE(refused.error().message.find("'ok\\xe6\\x9d'"), std::string::npos) << refused.error().message;
  EXPECT_TRUE(check_tag_name(""));  // the default tag's name
}

}  // namespace
}  // namespace tessera
