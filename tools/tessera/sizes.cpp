#include "sizes.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "support/sizes.hpp"
#include "support/text.hpp"
#include "usage_error.hpp"

namespace tessera::cli {

Bytes parse_size_argument(std::string_view option, std::string_view text) {
  const support::ParsedSize size = support::parse_size(text);
  if (size) return size.bytes;
  if (size.problem == support::ParsedSize::Problem::too_large) {
    throw UsageError(fmt::format("{}: '{}' is too large: sizes stop below 2^64 bytes (16777216TiB)", option, text));
  }
  throw UsageError(fmt::format("{}: '{}' is not a size (expected {})", option, text, support::size_syntax));
}

Bytes parse_granule_argument(std::string_view option, std::string_view text, Bytes minimum) {
  const Bytes granule = parse_size_argument(option, text);
  if (!is_power_of_two(granule)) throw UsageError(fmt::format("{}: '{}' is not a power of two", option, text));
  if (granule >= minimum) return granule;
  const std::string_view written = support::trim(text);
  const bool bare = std::all_of(written.begin(), written.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (bare) {
    throw UsageError(fmt::format("{} {}: the granule is in bytes (with a unit: {}MiB); at least {}", option, written,
                                 written, support::format_size(minimum)));
  }
  throw UsageError(fmt::format("{} {}: the granule is at least {}", option, written, support::format_size(minimum)));
}

}  // namespace tessera::cli
