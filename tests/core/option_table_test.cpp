// The one table of configuration keys: the string form and a configuration built in code obey the same
// ranges, the defaults are AllocatorConfig's, and docs/allocator.md lists exactly the table's rows.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>

#include "support/must.hpp"
#include "support/text.hpp"
#include "tessera/allocator.hpp"

namespace tessera {
namespace {

using test_support::must;

bool mentions(const Error& error, std::string_view words) { return error.message.find(words) != std::string::npos; }

TEST(OptionTable, EachDefaultReadsBackAsTheDefaultConfiguration) {
  ASSERT_EQ(allocator_options().size(), 9u);
  for (const OptionDescription& option : allocator_options()) {
    const std::string text = std::string(option.key) + ":" + option.default_value;
    EXPECT_EQ(must(parse_allocator_config(text)), AllocatorConfig{}) << text;
  }
}

// The defaults every replay figure was made with.
TEST(OptionTable, TheDefaults) {
  std::map<std::string_view, std::string> defaults;
  for (const OptionDescription& option : allocator_options()) defaults[option.key] = option.default_value;
  EXPECT_EQ(defaults["garbage_collection_threshold"], "0");
  EXPECT_EQ(defaults["roundup_power2_divisions"], "0");
  EXPECT_EQ(defaults["small_max_kb"], "1024");
  EXPECT_EQ(defaults["reclaim"], "when_full");
  EXPECT_EQ(defaults["page_max_mb"], "0");
  EXPECT_EQ(defaults["chunk_max_mb"], "1024");
  EXPECT_EQ(defaults["share_slivers"], "on");
  EXPECT_EQ(defaults["virtual_factor"], "2");
  EXPECT_EQ(defaults["backup_cache"], "on");
  EXPECT_TRUE(check_allocator_config(AllocatorConfig{}).ok());
}

// One value inside and one outside each bound, written as a string and set in code: both accept the first
// and refuse the second, naming the key (the string) or the field and the key (code).
struct Bound {
  std::string key;
  std::string good;
  std::string bad;
  void (*set_good)(AllocatorConfig&);
  void (*set_bad)(AllocatorConfig&);
  std::string field;
};

TEST(OptionTable, TheStringAndCodeObeyTheSameRanges) {
  // clang-format off
  const std::vector<Bound> bounds = {
      {"small_max_kb", "4", "3", [](AllocatorConfig& c) { c.small_max = 4 * KiB; },
       [](AllocatorConfig& c) { c.small_max = 4 * KiB - 1; }, "small_max"},
      {"small_max_kb", "65536", "65537", [](AllocatorConfig& c) { c.small_max = 64 * MiB; },
       [](AllocatorConfig& c) { c.small_max = 64 * MiB + 1; }, "small_max"},
      {"virtual_factor", "1", "0", [](AllocatorConfig& c) { c.virtual_factor = 1; },
       [](AllocatorConfig& c) { c.virtual_factor = 0; }, "virtual_factor"},
      {"virtual_factor", "64", "65", [](AllocatorConfig& c) { c.virtual_factor = 64; },
       [](AllocatorConfig& c) { c.virtual_factor = 65; }, "virtual_factor"},
      {"garbage_collection_threshold", "0", "1", [](AllocatorConfig& c) { c.garbage_collection_threshold = 0.0; },
       [](AllocatorConfig& c) { c.garbage_collection_threshold = 1.0; }, "garbage_collection_threshold"},
      {"garbage_collection_threshold", "0.99", "-0.5",
       [](AllocatorConfig& c) { c.garbage_collection_threshold = 0.99; },
       [](AllocatorConfig& c) { c.garbage_collection_threshold = -0.5; }, "garbage_collection_threshold"},
      {"chunk_max_mb", "65536", "65537", [](AllocatorConfig& c) { c.chunk_max = 64 * GiB; },
       [](AllocatorConfig& c) { c.chunk_max = 64 * GiB + 1; }, "chunk_max"},
      {"page_max_mb", "1024", "1025", [](AllocatorConfig& c) { c.page_max = GiB; },
       [](AllocatorConfig& c) { c.page_max = GiB + 1; }, "page_max"},
      {"roundup_power2_divisions", "64", "128", [](AllocatorConfig& c) { c.roundup_power2_divisions = 64; },
       [](AllocatorConfig& c) { c.roundup_power2_divisions = 128; }, "roundup_power2_divisions"},
      {"roundup_power2_divisions", "0", "3", [](AllocatorConfig& c) { c.roundup_power2_divisions = 0; },
       [](AllocatorConfig& c) { c.roundup_power2_divisions = 3; }, "roundup_power2_divisions"},
  };
  // clang-format on
  for (const Bound& bound : bounds) {
    const std::string good = bound.key + ":" + bound.good;
    const std::string bad = bound.key + ":" + bound.bad;
    AllocatorConfig parsed = must(parse_allocator_config(good));
    EXPECT_TRUE(check_allocator_config(parsed).ok()) << good;
    auto refused = parse_allocator_config(bad);
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_TRUE(mentions(refused.error(), "'" + bound.key + "'")) << refused.error().message;

    AllocatorConfig built;
    bound.set_good(built);
    EXPECT_TRUE(check_allocator_config(built).ok()) << bound.field << " " << bound.good;
    AllocatorConfig wrong;
    bound.set_bad(wrong);
    auto checked = check_allocator_config(wrong);
    ASSERT_FALSE(checked.ok()) << bound.field << " " << bound.bad;
    EXPECT_EQ(checked.error().code, Errc::invalid_argument);
    EXPECT_TRUE(mentions(checked.error(), bound.field)) << checked.error().message;
    EXPECT_TRUE(mentions(checked.error(), bound.key)) << checked.error().message;
  }
}

TEST(OptionTable, ANumberOutsideItsRangeIsNamedWithTheRange) {
  auto refused = parse_allocator_config("small_max_kb:2");
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(mentions(refused.error(), "bad value '2' for key 'small_max_kb'")) << refused.error().message;
  EXPECT_TRUE(mentions(refused.error(), "from 4 to 65536")) << refused.error().message;
  AllocatorConfig built;
  built.small_max = 100;
  auto checked = check_allocator_config(built);
  ASSERT_FALSE(checked.ok());
  EXPECT_TRUE(mentions(checked.error(), "small_max is 100 bytes")) << checked.error().message;
  EXPECT_TRUE(mentions(checked.error(), "4 KiB to 64 MiB")) << checked.error().message;
}

// docs/allocator.md's table of keys: `| key | type and range | default | meaning |`.
struct DocRow {
  std::string type;
  std::string default_value;
  std::string meaning;
};

std::string without_backticks(std::string_view cell) {
  std::string text;
  for (char c : support::trim(cell)) {
    if (c != '`') text += c;
  }
  return text;
}

std::vector<std::string> cells(std::string_view line) {
  std::vector<std::string> found;
  line = support::trim(line);
  if (line.size() < 2 || line.front() != '|' || line.back() != '|') return found;
  line = line.substr(1, line.size() - 2);
  std::size_t start = 0;
  while (true) {
    const std::size_t bar = line.find('|', start);
    found.push_back(without_backticks(line.substr(start, bar - start)));
    if (bar == std::string_view::npos) break;
    start = bar + 1;
  }
  return found;
}

std::map<std::string, DocRow> documented_keys() {
  std::ifstream file(TESSERA_ALLOCATOR_DOC);
  EXPECT_TRUE(file.good()) << "cannot read " << TESSERA_ALLOCATOR_DOC;
  std::map<std::string, DocRow> rows;
  std::string line;
  bool inside = false;
  while (std::getline(file, line)) {
    const std::vector<std::string> row = cells(line);
    if (!inside) {
      inside = row == std::vector<std::string>{"key", "type and range", "default", "meaning"};
      continue;
    }
    if (row.empty()) break;  // the table ends at the first line that is not a row
    if (row.front().starts_with("---")) continue;
    EXPECT_EQ(row.size(), 4u) << "docs/allocator.md: a row of the keys' table with " << row.size()
                              << " cells: " << line;
    if (row.size() != 4) continue;
    EXPECT_FALSE(rows.contains(row[0])) << "docs/allocator.md lists " << row[0] << " twice";
    rows[row[0]] = {row[1], row[2], row[3]};
  }
  EXPECT_TRUE(inside) << "docs/allocator.md has no table headed | key | type and range | default | meaning |";
  return rows;
}

TEST(OptionTable, TheDocsListExactlyTheTablesRows) {
  std::map<std::string, DocRow> documented = documented_keys();
  for (const OptionDescription& option : allocator_options()) {
    const std::string key(option.key);
    auto found = documented.find(key);
    if (found == documented.end()) {
      ADD_FAILURE() << "docs/allocator.md does not list the key " << key;
      continue;
    }
    EXPECT_EQ(found->second.type, option.type) << "docs/allocator.md: the type and range of " << key;
    EXPECT_EQ(found->second.default_value, option.default_value) << "docs/allocator.md: the default of " << key;
    EXPECT_EQ(found->second.meaning, option.meaning) << "docs/allocator.md: the meaning of " << key;
    documented.erase(found);
  }
  for (const auto& [key, row] : documented) ADD_FAILURE() << "docs/allocator.md lists " << key << ", no key of the table";
}

}  // namespace
}  // namespace tessera
