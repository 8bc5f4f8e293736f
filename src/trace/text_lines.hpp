// Lines, fields and numbers for the text readers (lifetimes CSV, STAlloc, Tessera's text format).
#pragma once

#include <charconv>
#include <cstdint>
#include <string_view>

#include "support/text.hpp"

namespace tessera::trace_detail {

// Walks the lines of a text, numbering them from 1. Lines end at '\n'; a '\r' before it is dropped.
class LineScanner {
 public:
  explicit LineScanner(std::string_view text) : text_(text) {}

  bool next(std::string_view& line) {
    if (position_ >= text_.size()) return false;
    const std::size_t end = text_.find('\n', position_);
    terminated_ = end != std::string_view::npos;
    const std::size_t stop = terminated_ ? end : text_.size();
    line = text_.substr(position_, stop - position_);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    position_ = terminated_ ? end + 1 : text_.size();
    ++number_;
    return true;
  }

  std::size_t line_number() const noexcept { return number_; }
  // Whether the line last returned ended with a newline. A machine-written file whose last line does not
  // was cut short.
  bool terminated() const noexcept { return terminated_; }

 private:
  std::string_view text_;
  std::size_t position_ = 0;
  std::size_t number_ = 0;
  bool terminated_ = true;
};

using support::trim;

// Splits on runs of spaces and tabs into at most `capacity` fields; returns how many there were in all,
// which is more than `capacity` when some did not fit.
inline std::size_t split_fields(std::string_view line, std::string_view* fields, std::size_t capacity) {
  std::size_t count = 0;
  std::size_t position = 0;
  while (true) {
    const std::size_t begin = line.find_first_not_of(" \t", position);
    if (begin == std::string_view::npos) break;
    std::size_t end = line.find_first_of(" \t", begin);
    if (end == std::string_view::npos) end = line.size();
    if (count < capacity) fields[count] = line.substr(begin, end - begin);
    ++count;
    position = end;
  }
  return count;
}

// Decimal, or hexadecimal after "0x" when allowed. The whole text must be the number.
inline bool parse_unsigned(std::string_view text, std::uint64_t& value, bool allow_hex = false) {
  int base = 10;
  if (allow_hex && text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
    text.remove_prefix(2);
    base = 16;
  }
  if (text.empty() || text[0] == '+' || text[0] == '-') return false;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  return error == std::errc{} && end == text.data() + text.size();
}

inline bool parse_signed(std::string_view text, std::int64_t& value) {
  if (text.empty() || text[0] == '+') return false;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  return error == std::errc{} && end == text.data() + text.size();
}

}  // namespace tessera::trace_detail
