// Sizes on the command line: support/sizes.hpp reads and prints them (one rule for every tool and
// TESSERA_CAPACITY); this adds what the command needs, an error that names the option.
#pragma once

#include <string_view>

#include "tessera/types.hpp"

namespace tessera::cli {

// Parses a size for a named option, or throws UsageError naming the option and the value.
Bytes parse_size_argument(std::string_view option, std::string_view text);

// A granule for a named option: a power of two of at least `minimum` bytes, or throws UsageError naming the
// option and the value. A bare number under the minimum was most likely meant in MiB ("--granule 2"), and
// the message says that the unit is bytes.
Bytes parse_granule_argument(std::string_view option, std::string_view text, Bytes minimum);

}  // namespace tessera::cli
