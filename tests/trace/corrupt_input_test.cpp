// Truncated and corrupt inputs: always an error that names the file and the position, never a crash and
// never a shorter trace.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tessera/trace.hpp"
#include "trace/gzip_file.hpp"

namespace tessera {
namespace {

std::optional<std::filesystem::path> shared_traces() {
#ifdef TESSERA_SHARED_TRACES
  const std::filesystem::path path = TESSERA_SHARED_TRACES;
  if (std::filesystem::is_directory(path / "pytorch")) return path;
#endif
  return std::nullopt;
}

const char* const snapshot_file = "attention-peak-microbench__silmont2000.pickle.gz";

// Two small real files: a PyTorch snapshot and a lifetimes CSV, both gzipped.
std::vector<std::filesystem::path> small_real_files() {
  const auto root = shared_traces();
  if (!root) return {};
  return {*root / "pytorch" / snapshot_file, *root / "lifetimes" / "iree_mobilebert.csv.gz"};
}

std::string contents(const std::filesystem::path& path) {
  Result<std::string> bytes = trace_detail::read_file_bytes(path);
  EXPECT_TRUE(bytes.ok()) << describe(bytes.error());
  return bytes.ok() ? *bytes : std::string{};
}

// RFC 1952: ten fixed bytes, then the optional extra field, file name, comment and header CRC.
std::size_t gzip_header_size(const std::string& bytes) {
  const auto flags = static_cast<unsigned char>(bytes[3]);
  std::size_t at = 10;
  if (flags & 0x04) at += 2 + (static_cast<unsigned char>(bytes[at]) | (static_cast<unsigned char>(bytes[at + 1]) << 8));
  if (flags & 0x08) at = bytes.find('\0', at) + 1;
  if (flags & 0x10) at = bytes.find('\0', at) + 1;
  if (flags & 0x02) at += 2;
  return at;
}

void expect_error_at(const Result<Trace>& read, const std::string& where, const std::string& what) {
  ASSERT_FALSE(read.ok()) << what << " was read as a trace";
  EXPECT_EQ(read.error().code, Errc::invalid_argument);
  EXPECT_NE(read.error().message.find(where), std::string::npos) << what << ": " << read.error().message;
}

TEST(CorruptInput, TruncatedGzipFilesAreErrors) {
  const auto files = small_real_files();
  if (files.empty()) GTEST_SKIP() << "the shared traces folder (TESSERA_SHARED_TRACES) is not here";
  for (const auto& path : files) {
    const std::string bytes = contents(path);
    const std::string name = path.filename().string();
    ASSERT_TRUE(parse_trace(bytes, name).ok());
    const std::size_t n = bytes.size();
    for (const std::size_t length : {std::size_t{0}, std::size_t{1}, std::size_t{2}, std::size_t{9}, std::size_t{10},
                                     std::size_t{11}, std::size_t{100}, n / 3, n / 2, n - 9, n - 8, n - 5, n - 1}) {
      expect_error_at(parse_trace(std::string_view(bytes).substr(0, length), name), name + ": byte ",
                      name + " cut to " + std::to_string(length) + " bytes");
    }
  }
}

TEST(CorruptInput, FlippedBytesInTheGzipBodyOrTrailerAreErrors) {
  const auto files = small_real_files();
  if (files.empty()) GTEST_SKIP() << "the shared traces folder (TESSERA_SHARED_TRACES) is not here";
  for (const auto& path : files) {
    const std::string bytes = contents(path);
    const std::string name = path.filename().string();
    const std::size_t n = bytes.size();
    // After the header: the deflate data, then CRC-32 and length. (The header's time, OS byte and stored
    // file name carry no check in gzip, so changing them cannot be detected.)
    const std::size_t body = gzip_header_size(bytes);
    for (const std::size_t at : {body, body + 1, body + 40, n / 4, n / 2, n - 20, n - 8, n - 6, n - 3, n - 1}) {
      std::string corrupt = bytes;
      corrupt[at] = static_cast<char>(corrupt[at] ^ 0x5a);
      expect_error_at(parse_trace(corrupt, name), name + ": byte ",
                      name + " with byte " + std::to_string(at) + " flipped");
    }
    std::string garbage = bytes + "junk";
    expect_error_at(parse_trace(garbage, name), name + ": byte " + std::to_string(n) + ": data after the end",
                    "trailing junk");
  }
}

TEST(CorruptInput, TruncatedOrCorruptPicklesAreErrorsAtTheirByte) {
  const auto root = shared_traces();
  if (!root) GTEST_SKIP() << "the shared traces folder (TESSERA_SHARED_TRACES) is not here";
  Result<std::string> pickle = trace_detail::gunzip(contents(*root / "pytorch" / snapshot_file), "snapshot");
  ASSERT_TRUE(pickle.ok()) << describe(pickle.error());
  const std::string& bytes = *pickle;
  ASSERT_TRUE(parse_pytorch_snapshot(bytes, "s.pickle").ok());
  // A well-formed gzip of a cut pickle: zlib is happy, the pickle machine is not.
  for (std::size_t i = 0; i < 64; ++i) {
    const std::size_t length = i * (bytes.size() / 64);
    expect_error_at(parse_pytorch_snapshot(std::string_view(bytes).substr(0, length), "s.pickle"), "s.pickle: byte ",
                    "the pickle cut to " + std::to_string(length) + " bytes");
  }
  // PROTO 4, FRAME and its 8-byte length, then the first opcode at byte 11.
  std::string corrupt = bytes;
  ASSERT_EQ(static_cast<unsigned char>(corrupt[2]), 0x95);
  corrupt[11] = static_cast<char>(0xff);
  expect_error_at(parse_pytorch_snapshot(corrupt, "s.pickle"), "s.pickle: byte 11: unknown pickle opcode 0xff",
                  "a bad opcode");
  expect_error_at(parse_trace(trace_detail::gzip(corrupt), "s.pickle.gz"),
                  "s.pickle.gz (inflated): byte 11: unknown pickle opcode 0xff", "a bad opcode, gzipped");
}

TEST(CorruptInput, TheFileReadersNameThePath) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("tessera_corrupt_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::filesystem::path cut = dir / "cut.pickle.gz";
  {
    std::ofstream out(cut, std::ios::binary);
    const std::string whole = trace_detail::gzip(std::string{static_cast<char>(0x80), 4, '}', '.'});
    out << whole.substr(0, whole.size() / 2);
  }
  for (Result<Trace> read : {read_trace(cut), read_pytorch_snapshot(cut)}) {
    expect_error_at(read, cut.string() + ": byte ", "a cut file");
  }
  Result<Trace> missing = read_trace(dir / "missing.trace");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, Errc::not_found);
  EXPECT_NE(missing.error().message.find("missing.trace"), std::string::npos) << missing.error().message;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera
