// Whole files in and out, and gzip through zlib. Traces are read whole: the largest real ones inflate to a
// few megabytes, and a whole buffer lets every reader report exact positions. What is read is bounded
// (max_trace_bytes) and its start is checked before the rest is read or inflated.
#include "trace/gzip_file.hpp"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>

namespace tessera::trace_detail {

namespace {

Error corrupt(std::string_view source, std::size_t offset, std::string_view what) {
  return make_error(Errc::invalid_argument, fmt::format("{}: byte {}: {}", source, offset, what));
}

// "1 GiB", "512 MiB", or bytes: the bound as a person would set it.
std::string bound_text(std::size_t bytes) {
  for (const auto& [shift, unit] : {std::pair{30, "GiB"}, std::pair{20, "MiB"}, std::pair{10, "KiB"}}) {
    if (bytes >= (std::size_t{1} << shift) && bytes % (std::size_t{1} << shift) == 0) {
      return fmt::format("{} bytes ({} {})", bytes, bytes >> shift, unit);
    }
  }
  return fmt::format("{} bytes", bytes);
}

Error too_large(std::string_view source, std::string_view what, std::size_t limit) {
  return make_error(Errc::invalid_argument,
                    fmt::format("{}: {} more than {}, the most a trace may hold (set {} to allow more)", source, what,
                                bound_text(limit), max_trace_bytes_variable));
}

// A bad TESSERA_MAX_TRACE_BYTES, named with the file it kept from being read.
Error bound_error(std::string_view source, const Error& error) {
  return make_error(error.code, fmt::format("{}: {}", source, error.message));
}

}  // namespace

Result<std::size_t> max_trace_bytes() {
  const char* text = std::getenv(std::string(max_trace_bytes_variable).c_str());
  if (text == nullptr || *text == '\0') return default_max_trace_bytes;
  const std::string_view value(text);
  std::size_t number = 0;
  const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), number);
  const std::string_view unit(end, static_cast<std::size_t>(value.data() + value.size() - end));
  int shift = -1;
  if (unit.empty()) shift = 0;
  if (unit == "KiB") shift = 10;
  if (unit == "MiB") shift = 20;
  if (unit == "GiB") shift = 30;
  if (error != std::errc{} || end == value.data() || shift < 0 || number == 0 ||
      number > (std::numeric_limits<std::size_t>::max() >> shift)) {
    return make_error(Errc::invalid_argument,
                      fmt::format("{}: '{}' is not a byte count (a positive number of bytes, or of KiB, MiB or GiB: "
                                  "4GiB)",
                                  max_trace_bytes_variable, value));
  }
  return number << shift;
}

Error out_of_memory_error(std::string_view source) {
  return make_error(Errc::platform, fmt::format("{}: out of memory while reading it", source));
}

Result<std::string> read_file_bytes(const std::filesystem::path& path, const PrefixCheck& check) {
  const std::string name = path.string();
  const Result<std::size_t> limit = max_trace_bytes();
  if (!limit) return bound_error(name, limit.error());
  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::status(path, ec);
  // An ifstream opens a folder and then fails to read it: say what it is.
  if (std::filesystem::is_directory(status)) {
    return make_error(Errc::invalid_argument, fmt::format("{}: is a folder, not a trace file", name));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    const bool missing = !std::filesystem::exists(path, ec);
    return make_error(missing ? Errc::not_found : Errc::invalid_argument,
                      fmt::format("{}: cannot open: {}", name, std::strerror(err)), err);
  }
  // A regular file's size is known before reading; other files (pipes, devices) are read up to the bound.
  if (std::filesystem::is_regular_file(status)) {
    const std::uintmax_t size = std::filesystem::file_size(path, ec);
    if (!ec && size > *limit) return too_large(name, fmt::format("{} bytes,", size), *limit);
  }
  try {
    std::string bytes;
    bool checked = !check;
    char buffer[1 << 16];
    while (true) {
      in.read(buffer, sizeof buffer);
      const auto count = static_cast<std::size_t>(in.gcount());
      if (count == 0) break;
      if (count > *limit - bytes.size()) return too_large(name, "holds", *limit);
      bytes.append(buffer, count);
      if (!checked && (bytes.size() >= prefix_bytes || !in)) {
        checked = true;
        // Gzip is checked once inflated; a ".gz" name without the magic is with_inflated's error.
        if (!is_gzip(bytes) && !name.ends_with(".gz")) {
          if (auto refused = check(std::string_view(bytes).substr(0, prefix_bytes), !in && bytes.size() <= prefix_bytes,
                                   false)) {
            return std::move(*refused);
          }
        }
      }
      if (!in) break;
    }
    if (in.bad()) {
      const int err = errno;
      return make_error(Errc::invalid_argument, fmt::format("{}: read error: {}", name, std::strerror(err)), err);
    }
    return bytes;
  } catch (const std::bad_alloc&) {
    return out_of_memory_error(name);
  }
}

Result<void> write_file_bytes(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) {
    const int err = errno;
    return make_error(Errc::invalid_argument, fmt::format("{}: cannot create: {}", path.string(), std::strerror(err)),
                      err);
  }
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) return make_error(Errc::invalid_argument, fmt::format("{}: write error", path.string()));
  return {};
}

bool is_gzip(std::string_view bytes) noexcept {
  return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f && static_cast<unsigned char>(bytes[1]) == 0x8b;
}

Error not_gzip_error(std::string_view bytes, std::string_view source) {
  if (bytes.empty()) return corrupt(source, 0, "the file is empty (truncated gzip file)");
  return corrupt(source, 0, "not gzip data");
}

Result<std::string> gunzip(std::string_view bytes, std::string_view source, const PrefixCheck& check) {
  if (bytes.empty()) return not_gzip_error(bytes, source);
  const Result<std::size_t> limit = max_trace_bytes();
  if (!limit) return bound_error(source, limit.error());
  std::string out;
  // The last member's trailer holds its inflated size modulo 2^32: a good first guess for one member. A
  // corrupt trailer must not reserve more than deflate can expand to (about 1032:1), nor past the bound.
  if (bytes.size() >= 18) {
    const auto* tail = reinterpret_cast<const unsigned char*>(bytes.data() + bytes.size() - 4);
    const std::size_t hint = tail[0] | (tail[1] << 8) | (tail[2] << 16) | (std::size_t{tail[3]} << 24);
    out.reserve(std::min({hint, bytes.size() * 1032, *limit}));
  }
  // The start is checked as soon as it is inflated: content no trace starts with is refused before the rest
  // of a bomb is inflated.
  bool checked = !check;
  auto check_start = [&](bool complete) -> std::optional<Error> {
    checked = true;
    return check(std::string_view(out).substr(0, prefix_bytes), complete, true);
  };
  std::size_t offset = 0;  // where the current member starts
  while (offset < bytes.size()) {
    if (!is_gzip(bytes.substr(offset))) {
      if (offset == 0) return not_gzip_error(bytes, source);
      return corrupt(source, offset, "data after the end of the gzip stream");
    }
    z_stream stream{};
    if (inflateInit2(&stream, 15 + 16) != Z_OK) return make_error(Errc::platform, "zlib: inflateInit2 failed");
    stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data() + offset));
    const std::size_t available = bytes.size() - offset;
    // zlib counts in uInt; traces never come near 4 GiB, but refuse rather than wrap.
    if (available > std::numeric_limits<uInt>::max()) {
      inflateEnd(&stream);
      return corrupt(source, offset, "gzip member too large");
    }
    stream.avail_in = static_cast<uInt>(available);
    int status = Z_OK;
    char chunk[1 << 16];
    while (status == Z_OK) {
      stream.next_out = reinterpret_cast<Bytef*>(chunk);
      stream.avail_out = sizeof chunk;
      status = inflate(&stream, Z_NO_FLUSH);
      const std::size_t produced = sizeof chunk - stream.avail_out;
      if (produced > *limit - out.size()) {
        inflateEnd(&stream);
        return too_large(source, "inflates to", *limit);
      }
      out.append(chunk, produced);
      if (!checked && out.size() >= prefix_bytes) {
        if (auto refused = check_start(false)) {
          inflateEnd(&stream);
          return std::move(*refused);
        }
      }
      if (status == Z_BUF_ERROR && stream.avail_in == 0) break;  // input ended inside the member
    }
    const std::size_t consumed = offset + stream.total_in;
    const std::string message = stream.msg != nullptr ? stream.msg : "";
    inflateEnd(&stream);
    if (status == Z_STREAM_END) {
      offset = consumed;
      continue;
    }
    if (status == Z_BUF_ERROR || (status == Z_OK && stream.avail_in == 0)) {
      return corrupt(source, bytes.size(), "the gzip stream ends early (truncated file)");
    }
    // Z_DATA_ERROR covers bad headers, bad deflate data and a trailer whose CRC or length disagrees.
    return corrupt(source, consumed,
                   fmt::format("corrupt gzip data ({})", message.empty() ? fmt::format("zlib status {}", status) : message));
  }
  if (!checked) {
    if (auto refused = check_start(true)) return std::move(*refused);
  }
  return out;
}

std::string gzip(std::string_view bytes) {
  z_stream stream{};
  deflateInit2(&stream, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
  std::string out;
  char chunk[1 << 16];
  std::size_t position = 0;
  int flush = Z_NO_FLUSH;
  do {  // zlib's zpipe loop, fed at most 1 GiB at a time because avail_in is a uInt
    const std::size_t count = std::min<std::size_t>(bytes.size() - position, std::size_t{1} << 30);
    stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data() + position));
    stream.avail_in = static_cast<uInt>(count);
    position += count;
    flush = position == bytes.size() ? Z_FINISH : Z_NO_FLUSH;
    do {
      stream.next_out = reinterpret_cast<Bytef*>(chunk);
      stream.avail_out = sizeof chunk;
      deflate(&stream, flush);
      out.append(chunk, sizeof chunk - stream.avail_out);
    } while (stream.avail_out == 0);
  } while (flush != Z_FINISH);
  deflateEnd(&stream);
  return out;
}

std::string trace_name_from_source(std::string_view source) {
  std::string name = std::filesystem::path(std::string(source)).filename().string();
  auto strip = [&name](std::string_view suffix) {
    if (name.size() > suffix.size() && name.ends_with(suffix)) {
      name.resize(name.size() - suffix.size());
      return true;
    }
    return false;
  };
  strip(".gz");
  for (std::string_view ext : {".pickle", ".pkl", ".csv", ".txt", ".log", ".trace", ".json"}) {
    if (strip(ext)) break;
  }
  return name;
}

}  // namespace tessera::trace_detail
