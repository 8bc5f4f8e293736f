// Sizes written by people: on the command line, in TESSERA_CAPACITY, in tessera-driver-latency's --sizes.
//
// The one rule: a number, then an optional unit, case-insensitive, blanks allowed around and between.
//   no unit, or B            bytes
//   K KiB, M MiB, G GiB, T TiB   powers of 1024
//   KB, MB, GB, TB           powers of 1000, as SI says
// The number is digits with at most one point ("1.5GiB"); fractions are rounded to the nearest byte. No sign,
// no exponent ("1e9" is a typo more often than a size), no hexadecimal.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "tessera/types.hpp"

namespace tessera::support {

struct ParsedSize {
  enum class Problem : std::uint8_t { none, not_a_size, too_large };
  Bytes bytes = 0;
  Problem problem = Problem::none;  // too_large: a well-formed size of 2^64 bytes or more

  explicit operator bool() const noexcept { return problem == Problem::none; }
};

ParsedSize parse_size(std::string_view text);

// What the messages about a refused size say is accepted.
inline constexpr std::string_view size_syntax =
    "bytes, or a number with a unit KiB, MiB, GiB, TiB (K, M, G, T) or KB, MB, GB, TB: 80GiB, 512MiB, 1.5GiB, 4096";

// In the largest binary unit that divides it: "4KiB", "2MiB", "1TiB"; bytes bare ("100", "0").
std::string format_size(Bytes size);

}  // namespace tessera::support
