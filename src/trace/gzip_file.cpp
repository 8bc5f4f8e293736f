// Whole files in and out, and gzip through zlib. Traces are read whole: the largest real ones inflate to a
// few megabytes, and a whole buffer lets every reader report exact positions.
#include "trace/gzip_file.hpp"

#include <fmt/format.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>

namespace tessera::trace_detail {

namespace {

Error corrupt(std::string_view source, std::size_t offset, std::string_view what) {
  return make_error(Errc::invalid_argument, fmt::format("{}: byte {}: {}", source, offset, what));
}

}  // namespace

Result<std::string> read_file_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    std::error_code ec;
    const bool missing = !std::filesystem::exists(path, ec);
    return make_error(missing ? Errc::not_found : Errc::invalid_argument,
                      fmt::format("{}: cannot open: {}", path.string(), std::strerror(err)), err);
  }
  std::string bytes;
  char buffer[1 << 16];
  while (in.read(buffer, sizeof buffer) || in.gcount() > 0) bytes.append(buffer, static_cast<std::size_t>(in.gcount()));
  if (in.bad()) return make_error(Errc::invalid_argument, fmt::format("{}: read error", path.string()));
  return bytes;
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

Result<std::string> gunzip(std::string_view bytes, std::string_view source) {
  if (bytes.empty()) return not_gzip_error(bytes, source);
  std::string out;
  // The last member's trailer holds its inflated size modulo 2^32: a good first guess for one member. A
  // corrupt trailer must not reserve more than deflate can expand to (about 1032:1).
  if (bytes.size() >= 18) {
    const auto* tail = reinterpret_cast<const unsigned char*>(bytes.data() + bytes.size() - 4);
    const std::size_t hint = tail[0] | (tail[1] << 8) | (tail[2] << 16) | (std::size_t{tail[3]} << 24);
    out.reserve(std::min(hint, bytes.size() * 1032));
  }
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
      out.append(chunk, sizeof chunk - stream.avail_out);
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
  for (std::string_view ext : {".pickle", ".pkl", ".csv", ".txt", ".log", ".trace"}) {
    if (strip(ext)) break;
  }
  return name;
}

}  // namespace tessera::trace_detail
