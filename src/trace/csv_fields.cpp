#include "trace/csv_fields.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>

#include "trace/text_lines.hpp"

namespace tessera::trace_detail {

bool split_quoted_csv(std::string_view line, std::vector<std::string>& fields) {
  fields.clear();
  std::string field;
  bool quoted = false;
  bool was_quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        field += c;
      }
    } else if (c == '"') {
      quoted = true;
      was_quoted = true;
    } else if (c == ',') {
      fields.push_back(was_quoted ? field : std::string(trim(field)));
      field.clear();
      was_quoted = false;
    } else {
      field += c;
    }
  }
  if (quoted) return false;
  fields.push_back(was_quoted ? field : std::string(trim(field)));
  return true;
}

bool parse_decimal(std::string_view text, double& value) {
  if (text.empty() || text[0] == '+') return false;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  return error == std::errc{} && end == text.data() + text.size() && std::isfinite(value);
}

bool device_from_cell(std::string_view cell, std::string& device) {
  while (!cell.empty() && (cell.back() == '\r' || cell.back() == ' ' || cell.back() == '\t')) cell.remove_suffix(1);
  while (!cell.empty() && (cell.front() == ' ' || cell.front() == '\t')) cell.remove_prefix(1);
  if (std::any_of(cell.begin(), cell.end(), [](unsigned char c) { return c < 0x20 || c == 0x7f; })) return false;
  device.assign(cell);
  std::transform(device.begin(), device.end(), device.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (device.empty()) device = "npu";
  return true;
}

std::string_view locate_columns(const std::vector<std::string>& header, std::span<const CsvColumn> columns,
                                std::span<std::optional<std::size_t>> index) {
  std::string_view missing;
  for (std::size_t c = 0; c < columns.size(); ++c) {
    const auto found = std::find(header.begin(), header.end(), columns[c].header);
    index[c] = found != header.end() ? std::optional(static_cast<std::size_t>(found - header.begin())) : std::nullopt;
    if (!index[c] && columns[c].required && missing.empty()) missing = columns[c].header;
  }
  return missing;
}

}  // namespace tessera::trace_detail
