// The allocator's configuration keys as one table: key, type, range, default and meaning, as data. The
// parser, check_allocator_config and allocator_options() (from which docs/allocator.md's table is checked)
// all read it, so the string form and a configuration built in code obey the same ranges.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "tessera/allocator.hpp"

namespace tessera::core {

struct OptionRow {
  enum class Type : std::uint8_t {
    fraction,  // 0 (off), or strictly between 0 and 1
    number,    // a whole number from minimum to maximum (of `unit` bytes where the field is a size)
    choice,    // one of the words
  };
  struct Choice {
    std::string_view word;
    std::uint8_t value;  // the field's value (an enumerator, or 0 and 1 for a bool)
  };
  using Field = std::variant<double AllocatorConfig::*, unsigned AllocatorConfig::*, Bytes AllocatorConfig::*,
                             AllocatorConfig::Reclaim AllocatorConfig::*, bool AllocatorConfig::*>;

  std::string_view key;    // in the configuration string
  std::string_view field;  // AllocatorConfig's member, named in the errors of a code-built configuration
  Field member;
  Type type;
  std::uint64_t minimum = 0;
  std::uint64_t maximum = 0;
  Bytes unit = 1;               // a size field holds bytes; the string gives whole units (KiB, MiB)
  bool power_of_two = false;    // number: 0 or a power of two
  std::array<Choice, 3> choices{};  // choice: the words, empty ones unused
  std::string_view meaning;
};

std::span<const OptionRow> option_table();

// "a whole number of KiB from 4 to 65536", "first, when_full or never": the type and range in words.
std::string describe_type(const OptionRow& row);
// The default as the string form writes it, read from AllocatorConfig{}.
std::string default_text(const OptionRow& row);
// Sets the row's field from the string form's value; the error text when the value is bad.
std::optional<std::string> apply(const OptionRow& row, std::string_view value, AllocatorConfig& config);
// Whether a configuration's field obeys the row's range; the error text when not.
std::optional<std::string> check(const OptionRow& row, const AllocatorConfig& config);

}  // namespace tessera::core
