#include "support/sizes.hpp"

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <cmath>
#include <limits>

#include "support/text.hpp"

namespace tessera::support {

namespace {

struct Unit {
  std::string_view name;  // lower case
  Bytes bytes;
};

// A unit must match the whole rest of the text, so the order does not matter.
// clang-format off
constexpr std::array<Unit, 13> units{{
    {"b", 1},
    {"k", Bytes{1} << 10}, {"kib", Bytes{1} << 10}, {"kb", 1'000},
    {"m", Bytes{1} << 20}, {"mib", Bytes{1} << 20}, {"mb", 1'000'000},
    {"g", Bytes{1} << 30}, {"gib", Bytes{1} << 30}, {"gb", 1'000'000'000},
    {"t", Bytes{1} << 40}, {"tib", Bytes{1} << 40}, {"tb", 1'000'000'000'000},
}};
// clang-format on

bool equal_lowercase(std::string_view text, std::string_view lower) {
  if (text.size() != lower.size()) return false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(text[i])) != lower[i]) return false;
  }
  return true;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

}  // namespace

ParsedSize parse_size(std::string_view text) {
  constexpr ParsedSize not_a_size{0, ParsedSize::Problem::not_a_size};
  constexpr ParsedSize too_large{0, ParsedSize::Problem::too_large};
  text = trim(text);
  std::size_t end = 0;
  bool point = false;
  bool digit = false;
  for (; end < text.size(); ++end) {
    if (is_digit(text[end])) {
      digit = true;
    } else if (text[end] == '.' && !point) {
      point = true;
    } else {
      break;
    }
  }
  if (!digit) return not_a_size;
  const std::string_view number = text.substr(0, end);
  const std::string_view unit_text = trim(text.substr(end));
  Bytes unit = 1;
  if (!unit_text.empty()) {
    const Unit* found = nullptr;
    for (const Unit& candidate : units) {
      if (equal_lowercase(unit_text, candidate.name)) found = &candidate;
    }
    if (found == nullptr) return not_a_size;
    unit = found->bytes;
  }
  // A whole number is read exactly, not through a double: 2^64 - 1 bytes stays exact.
  if (!point) {
    Bytes value = 0;
    for (char c : number) {
      const auto d = static_cast<Bytes>(c - '0');
      if (value > (std::numeric_limits<Bytes>::max() - d) / 10) return too_large;
      value = value * 10 + d;
    }
    if (value > std::numeric_limits<Bytes>::max() / unit) return too_large;
    return {value * unit, ParsedSize::Problem::none};
  }
  const double value = std::stod(std::string(number)) * static_cast<double>(unit);
  // 2^64 itself does not fit; every double below it does once rounded.
  if (!std::isfinite(value) || value >= 0x1p64) return too_large;
  return {static_cast<Bytes>(std::round(value)), ParsedSize::Problem::none};
}

std::string format_size(Bytes size) {
  static constexpr std::array<std::string_view, 4> names{"TiB", "GiB", "MiB", "KiB"};
  for (std::size_t i = 0; i < names.size(); ++i) {
    const Bytes unit = Bytes{1} << (10 * (names.size() - i));
    if (size >= unit && size % unit == 0) return fmt::format("{}{}", size / unit, names[i]);
  }
  return fmt::format("{}", size);
}

}  // namespace tessera::support
