// Whole-file input and output for the trace readers, with gzip handled transparently.
#pragma once

#include <filesystem>
#include <functional>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "tessera/result.hpp"

namespace tessera::trace_detail {

// The most bytes a trace may hold, in its file and once inflated. The largest shared snapshots inflate to
// under 4 MiB; without a bound, a small gzip bomb or an endless file (/dev/zero) takes all memory.
inline constexpr std::size_t default_max_trace_bytes = std::size_t{1} << 30;
inline constexpr std::string_view max_trace_bytes_variable = "TESSERA_MAX_TRACE_BYTES";
// default_max_trace_bytes, or the variable's value (bytes, or with a KiB, MiB or GiB suffix) when it is set;
// a bad value is an error that names the variable.
Result<std::size_t> max_trace_bytes();

// How much of the content's start a PrefixCheck sees: more than any trace's first line needs.
inline constexpr std::size_t prefix_bytes = std::size_t{64} << 10;
// Looks at the start of the content (inflated when `inflated`; `complete` when that is all of it) and
// returns the error of content that no trace of the expected format starts with, so that the rest is not
// read or inflated first.
using PrefixCheck = std::function<std::optional<Error>(std::string_view prefix, bool complete, bool inflated)>;

// The file's bytes, or an error naming it: Errc::not_found when it does not exist, Errc::invalid_argument for
// a folder, a read error, more than max_trace_bytes(), or a start that `check` refuses.
Result<std::string> read_file_bytes(const std::filesystem::path& path, const PrefixCheck& check = {});
Result<void> write_file_bytes(const std::filesystem::path& path, std::string_view bytes);

bool is_gzip(std::string_view bytes) noexcept;

// Inflates every gzip member of `bytes` (concatenated members are one stream, as gzip -d reads them).
// A truncated or corrupt stream, or bytes after the last member that are not gzip, are
// Errc::invalid_argument errors naming `source` and the compressed byte offset; so are inflated data of more
// than max_trace_bytes() and a first prefix_bytes that `check` refuses, found as soon as they are inflated.
Result<std::string> gunzip(std::string_view bytes, std::string_view source, const PrefixCheck& check = {});

std::string gzip(std::string_view bytes);

// The error for bytes that should be gzip (the name ends in ".gz") and are not.
Error not_gzip_error(std::string_view bytes, std::string_view source);

// The error for a reader that ran out of memory, naming what it read.
Error out_of_memory_error(std::string_view source);

// Runs parse(view, inflated) on the bytes, inflated first when they start with the gzip magic, after
// `check` has seen their start. Binary readers say "inflated" in positions so that a byte offset is not
// taken for one in the file.
template <class Parse>
auto with_inflated(std::string_view bytes, std::string_view source, Parse&& parse, const PrefixCheck& check = {})
    -> decltype(parse(bytes, false)) {
  try {
    if (!is_gzip(bytes)) {
      // A ".gz" file without the magic is corrupt, not plain text to be read as far as it goes.
      if (source.ends_with(".gz")) return not_gzip_error(bytes, source);
      if (check) {
        if (auto refused = check(bytes.substr(0, prefix_bytes), bytes.size() <= prefix_bytes, false)) {
          return std::move(*refused);
        }
      }
      return parse(bytes, false);
    }
    Result<std::string> inflated = gunzip(bytes, source, check);
    if (!inflated) return std::move(inflated).error();
    return parse(std::string_view(*inflated), true);
  } catch (const std::bad_alloc&) {
    return out_of_memory_error(source);
  }
}

// The name a trace read from `source` gets: its file name without directories and without the format's
// extensions ("a/b/run.pickle.gz" -> "run").
std::string trace_name_from_source(std::string_view source);

}  // namespace tessera::trace_detail
