#include "support/key_values.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "support/text.hpp"

namespace tessera::support {

Result<std::vector<KeyValue>> split_key_values(std::string_view text) {
  std::vector<KeyValue> entries;
  while (!trim(text).empty()) {
    const std::size_t comma = text.find(',');
    const std::string_view entry = trim(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    if (entry.empty()) return make_error(Errc::invalid_argument, "an empty entry between commas");
    const std::size_t colon = entry.find(':');
    if (colon == std::string_view::npos) {
      return make_error(Errc::invalid_argument, fmt::format("'{}' has no value: expected key:value", entry));
    }
    const KeyValue pair{trim(entry.substr(0, colon)), trim(entry.substr(colon + 1))};
    if (pair.key.empty()) {
      return make_error(Errc::invalid_argument, fmt::format("'{}' has no key: expected key:value", entry));
    }
    const bool repeated = std::any_of(entries.begin(), entries.end(),
                                      [&](const KeyValue& earlier) { return earlier.key == pair.key; });
    if (repeated) return make_error(Errc::invalid_argument, fmt::format("key '{}' given twice", pair.key));
    entries.push_back(pair);
  }
  return entries;
}

}  // namespace tessera::support
