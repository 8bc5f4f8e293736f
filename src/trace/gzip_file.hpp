// Whole-file input and output for the trace readers, with gzip handled transparently.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <type_traits>

#include "tessera/result.hpp"

namespace tessera::trace_detail {

// The file's bytes, or an error naming it (Errc::not_found when it does not exist).
Result<std::string> read_file_bytes(const std::filesystem::path& path);
Result<void> write_file_bytes(const std::filesystem::path& path, std::string_view bytes);

bool is_gzip(std::string_view bytes) noexcept;

// Inflates every gzip member of `bytes` (concatenated members are one stream, as gzip -d reads them).
// A truncated or corrupt stream, or bytes after the last member that are not gzip, are
// Errc::invalid_argument errors naming `source` and the compressed byte offset.
Result<std::string> gunzip(std::string_view bytes, std::string_view source);

std::string gzip(std::string_view bytes);

// The error for bytes that should be gzip (the name ends in ".gz") and are not.
Error not_gzip_error(std::string_view bytes, std::string_view source);

// Runs parse(view, inflated) on the bytes, inflated first when they start with the gzip magic. Binary
// readers say "inflated" in positions so that a byte offset is not taken for one in the file.
template <class Parse>
auto with_inflated(std::string_view bytes, std::string_view source, Parse&& parse) -> decltype(parse(bytes, false)) {
  if (!is_gzip(bytes)) {
    // A ".gz" file without the magic is corrupt, not plain text to be read as far as it goes.
    if (source.ends_with(".gz")) return not_gzip_error(bytes, source);
    return parse(bytes, false);
  }
  Result<std::string> inflated = gunzip(bytes, source);
  if (!inflated) return std::move(inflated).error();
  return parse(std::string_view(*inflated), true);
}

// The name a trace read from `source` gets: its file name without directories and without the format's
// extensions ("a/b/run.pickle.gz" -> "run").
std::string trace_name_from_source(std::string_view source);

}  // namespace tessera::trace_detail
