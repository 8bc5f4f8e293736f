// Fields and numbers of the comma-separated profiles torch_npu writes (operator_memory.csv,
// memory_record.csv): quoted fields, decimal numbers, device names.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::trace_detail {

// Comma-separated fields, trimmed; a field in double quotes may hold commas and "" for a quote. Returns
// false for an unterminated quote.
bool split_quoted_csv(std::string_view line, std::vector<std::string>& fields);

// A column a reader knows, by its header, and whether a file must have it.
struct CsvColumn {
  std::string_view header;
  bool required;
};

// Where each of `columns` stands in a header row (`index[c]`, none when absent). Returns the header of the
// first required column the row lacks; empty when it has them all.
std::string_view locate_columns(const std::vector<std::string>& header, std::span<const CsvColumn> columns,
                                std::span<std::optional<std::size_t>> index);

// A finite decimal number, the whole text.
bool parse_decimal(std::string_view text, double& value);

// A Device Type cell ("NPU:0") as Trace::device names it ("npu:0"): trimmed of spaces, tabs and the carriage
// returns line ends leave, in lower case; empty: "npu" (the profiler is torch_npu's: an NPU whose index it did
// not say). False when the name holds a control character.
bool device_from_cell(std::string_view cell, std::string& device);

}  // namespace tessera::trace_detail
