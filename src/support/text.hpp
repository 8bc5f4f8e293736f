// Trimming text: the one rule every reader of Tessera's text (configuration strings, sizes, trace lines) uses.
#pragma once

#include <string_view>

namespace tessera::support {

// The blanks around a field: spaces and tabs. Line ends are the line reader's business, not trim's.
inline constexpr std::string_view blanks = " \t";

inline std::string_view trim(std::string_view text) noexcept {
  const std::size_t begin = text.find_first_not_of(blanks);
  if (begin == std::string_view::npos) return {};
  const std::size_t end = text.find_last_not_of(blanks);
  return text.substr(begin, end - begin + 1);
}

}  // namespace tessera::support
