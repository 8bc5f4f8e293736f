#include "sizes.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <limits>

#include "usage_error.hpp"

namespace tessera::cli {

namespace {

struct Unit {
  std::string_view name;
  double bytes;
};

// A unit must match the whole rest of the text, so the order does not matter.
// clang-format off
constexpr std::array<Unit, 13> units{{
    {"b", 1.0},
    {"k", 0x1p10}, {"kib", 0x1p10}, {"kb", 1e3},
    {"m", 0x1p20}, {"mib", 0x1p20}, {"mb", 1e6},
    {"g", 0x1p30}, {"gib", 0x1p30}, {"gb", 1e9},
    {"t", 0x1p40}, {"tib", 0x1p40}, {"tb", 1e12},
}};
// clang-format on

bool equal_lowercase(std::string_view text, std::string_view lower) {
  if (text.size() != lower.size()) return false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(text[i])) != lower[i]) return false;
  }
  return true;
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  return text;
}

}  // namespace

std::optional<Bytes> parse_size(std::string_view text) {
  text = trim(text);
  // The number: digits with at most one point, at least one digit. No sign, no exponent: "1e9" is a typo
  // more often than a size.
  std::size_t end = 0;
  bool point = false;
  bool digit = false;
  for (; end < text.size(); ++end) {
    const char c = text[end];
    if (std::isdigit(static_cast<unsigned char>(c)) != 0) {
      digit = true;
    } else if (c == '.' && !point) {
      point = true;
    } else {
      break;
    }
  }
  if (!digit) return std::nullopt;
  const std::string_view number = text.substr(0, end);
  const std::string_view unit_text = trim(text.substr(end));
  double scale = 1.0;
  if (!unit_text.empty()) {
    bool found = false;
    for (const Unit& unit : units) {
      if (equal_lowercase(unit_text, unit.name)) {
        scale = unit.bytes;
        found = true;
        break;
      }
    }
    if (!found) return std::nullopt;
  }
  // A plain byte count is read exactly, not through a double.
  if (!point && scale == 1.0) {
    Bytes value = 0;
    for (char c : number) {
      const auto d = static_cast<Bytes>(c - '0');
      if (value > (std::numeric_limits<Bytes>::max() - d) / 10) return std::nullopt;
      value = value * 10 + d;
    }
    return value;
  }
  const double value = std::stod(std::string(number)) * scale;
  // 2^64 itself does not fit; every double below it does once rounded.
  if (!std::isfinite(value) || value >= 0x1p64) return std::nullopt;
  return static_cast<Bytes>(std::round(value));
}

Bytes parse_size_argument(std::string_view option, std::string_view text) {
  if (auto size = parse_size(text)) return *size;
  throw UsageError(
      fmt::format("{}: '{}' is not a size (expected bytes or a number with a unit: 80GiB, 512MiB, "
                  "1.5GiB, 4096)",
                  option, text));
}

Bytes parse_granule_argument(std::string_view option, std::string_view text, Bytes minimum) {
  const Bytes granule = parse_size_argument(option, text);
  if (!is_power_of_two(granule)) throw UsageError(fmt::format("{}: '{}' is not a power of two", option, text));
  if (granule >= minimum) return granule;
  const std::string_view written = trim(text);
  const bool bare = std::all_of(written.begin(), written.end(),
                                [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; });
  if (bare) {
    throw UsageError(fmt::format("{} {}: the granule is in bytes (with a unit: {}MiB); at least {}", option, written,
                                 written, format_size_argument(minimum)));
  }
  throw UsageError(fmt::format("{} {}: the granule is at least {}", option, written, format_size_argument(minimum)));
}

std::string format_size_argument(Bytes size) {
  static constexpr std::array<std::string_view, 4> names{"TiB", "GiB", "MiB", "KiB"};
  for (std::size_t i = 0; i < names.size(); ++i) {
    const Bytes unit = Bytes{1} << (10 * (names.size() - i));
    if (size >= unit && size % unit == 0) return fmt::format("{}{}", size / unit, names[i]);
  }
  return fmt::format("{}", size);
}

}  // namespace tessera::cli
