// The configuration string, the checks of a configuration built in code, and the descriptions of the keys:
// all three read the one table of keys (option_table.hpp).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdlib>

#include "core/option_table.hpp"
#include "support/key_values.hpp"
#include "tessera/allocator.hpp"

namespace tessera {

namespace {

Error config_error(std::string message) {
  return make_error(Errc::invalid_argument, "allocator configuration: " + std::move(message));
}

const core::OptionRow* find_row(std::string_view key) {
  for (const core::OptionRow& row : core::option_table()) {
    if (row.key == key) return &row;
  }
  return nullptr;
}

}  // namespace

const std::vector<OptionDescription>& allocator_options() {
  static const std::vector<OptionDescription> descriptions = [] {
    std::vector<OptionDescription> all;
    for (const core::OptionRow& row : core::option_table()) {
      all.push_back({row.key, core::describe_type(row), core::default_text(row), row.meaning});
    }
    return all;
  }();
  return descriptions;
}

Result<AllocatorConfig> parse_allocator_config(std::string_view text) {
  auto entries = support::split_key_values(text);
  if (!entries) return config_error(entries.error().message);
  AllocatorConfig config;
  for (const support::KeyValue& entry : *entries) {
    const core::OptionRow* row = find_row(entry.key);
    if (row == nullptr) {
      std::vector<std::string_view> keys;
      for (const core::OptionRow& known : core::option_table()) keys.push_back(known.key);
      return config_error(fmt::format("unknown key '{}' (known keys: {})", entry.key, fmt::join(keys, ", ")));
    }
    if (auto problem = core::apply(*row, entry.value, config)) {
      return config_error(fmt::format("bad value '{}' for key '{}': {}", entry.value, entry.key, *problem));
    }
  }
  return config;
}

Result<void> check_allocator_config(const AllocatorConfig& config) {
  for (const core::OptionRow& row : core::option_table()) {
    if (auto problem = core::check(row, config)) return config_error(*problem);
  }
  return {};
}

Result<AllocatorConfig> allocator_config_from_environment() {
  const char* text = std::getenv("TESSERA_ALLOC_CONF");
  if (text == nullptr) return AllocatorConfig{};
  auto config = parse_allocator_config(text);
  if (!config) {
    return make_error(Errc::invalid_argument, "TESSERA_ALLOC_CONF: " + config.error().message);
  }
  return config;
}

}  // namespace tessera
