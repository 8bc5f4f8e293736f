// Byte sizes as people write them on a command line ("80GiB", "512MiB", "1.5GiB", "4096") and as the
// command prints them.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "tessera/types.hpp"

namespace tessera::cli {

// A number (digits, optionally a fraction) and an optional unit, case-insensitive, spaces allowed between:
// B; KiB MiB GiB TiB and the shorthands K M G T (powers of 1024); KB MB GB TB (powers of 1000, as SI
// says). A fraction is rounded to the nearest byte. None for anything else, and for sizes that overflow.
std::optional<Bytes> parse_size(std::string_view text);

// Parses a size for a named option, or throws UsageError naming the option and the value.
Bytes parse_size_argument(std::string_view option, std::string_view text);

// A granule for a named option: a power of two of at least `minimum` bytes, or throws UsageError naming the
// option and the value. A bare number under the minimum was most likely meant in MiB ("--granule 2"), and
// the message says that the unit is bytes.
Bytes parse_granule_argument(std::string_view option, std::string_view text, Bytes minimum);

// A power of two as the command line writes it, with the largest unit that keeps it whole: "4KiB", "2MiB".
std::string format_size_argument(Bytes size);

}  // namespace tessera::cli
