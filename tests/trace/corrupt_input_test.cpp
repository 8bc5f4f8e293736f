// Truncated and corrupt inputs: always an error that names the file and the position, never a crash and
// never a shorter trace.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

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

// ---- Bounded reading: what is read or inflated stops at max_trace_bytes(), and content that no trace starts
// with is refused from its first bytes, before the rest is read or inflated.

// Sets TESSERA_MAX_TRACE_BYTES for one test and puts back what was there.
class BoundVariable {
 public:
  explicit BoundVariable(const char* value) {
    if (const char* old = std::getenv(name)) saved_ = old;
    ::setenv(name, value, 1);
  }
  ~BoundVariable() {
    if (saved_) {
      ::setenv(name, saved_->c_str(), 1);
    } else {
      ::unsetenv(name);
    }
  }
  BoundVariable(const BoundVariable&) = delete;
  BoundVariable& operator=(const BoundVariable&) = delete;

 private:
  static constexpr const char* name = "TESSERA_MAX_TRACE_BYTES";
  std::optional<std::string> saved_;
};

class ScratchFolder {
 public:
  ScratchFolder()
      : path_(std::filesystem::temp_directory_path() / ("tessera_bounded_test_" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(path_);
  }
  ~ScratchFolder() { std::filesystem::remove_all(path_); }
  ScratchFolder(const ScratchFolder&) = delete;
  ScratchFolder& operator=(const ScratchFolder&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

std::string with_start(std::string_view start, std::size_t size, char fill) {
  std::string bytes(size, fill);
  bytes.replace(0, start.size(), start);
  return bytes;
}

TEST(BoundedReading, InflatedDataBeyondTheBoundIsAnErrorThatNamesTheBoundAndTheVariable) {
  const BoundVariable bound("1MiB");
  // A pickle's start, then zeros: the start is a pickle's, so only the bound stops the inflation.
  const std::string bomb = trace_detail::gzip(with_start("\x80\x04", std::size_t{8} << 20, '\0'));
  for (Result<Trace> read : {parse_trace(bomb, "bomb.pickle.gz"), parse_pytorch_snapshot(bomb, "bomb.pickle.gz")}) {
    expect_error_at(read,
                    "bomb.pickle.gz: inflates to more than 1048576 bytes (1 MiB), the most a trace may hold (set "
                    "TESSERA_MAX_TRACE_BYTES to allow more)",
                    "a gzip bomb");
  }
  // Under the bound, the same kind of data reads as before (and fails as a pickle does).
  const BoundVariable larger("16MiB");
  expect_error_at(parse_trace(bomb, "bomb.pickle.gz"), "bomb.pickle.gz (inflated): byte 2: unknown pickle opcode 0x00",
                  "zeros after PROTO");
}

TEST(BoundedReading, ContentNoTraceStartsWithIsRefusedBeforeTheRestIsInflated) {
  // Far more zeros than the bound: refused from the first inflated bytes, so the bound is never reached.
  const BoundVariable bound("1MiB");
  const std::string zeros = trace_detail::gzip(std::string(std::size_t{8} << 20, '\0'));
  expect_error_at(parse_trace(zeros, "zeros.pickle.gz"),
                  "zeros.pickle.gz (inflated): byte 0: unknown pickle opcode 0x00", "zeros named as a pickle");
  expect_error_at(parse_pytorch_snapshot(zeros, "zeros.gz"), "zeros.gz (inflated): byte 0: unknown pickle opcode 0x00",
                  "zeros read as a pickle");
  expect_error_at(parse_trace(zeros, "zeros.csv.gz"),
                  "zeros.csv.gz:1: a NUL byte in the first line: binary data, not a lifetimes CSV trace",
                  "zeros named as a CSV");
  expect_error_at(parse_stalloc_trace(zeros, "zeros.gz"),
                  "zeros.gz:1: a NUL byte in the first line: binary data, not a STAlloc log trace", "zeros as STAlloc");
  expect_error_at(parse_text_trace(zeros, "zeros.gz"),
                  "zeros.gz:1: a NUL byte in the first line: binary data, not a tessera-trace text trace",
                  "zeros as text");
  expect_error_at(parse_trace(zeros, "zeros.gz"),
                  "zeros.gz: cannot tell the trace format from the content or the name", "zeros of no name");
  // A first line longer than what the check sees is judged by the reader, as before.
  const std::string long_line = "# " + std::string(trace_detail::prefix_bytes * 2, 'x') + "\n";
  expect_error_at(parse_trace(trace_detail::gzip(long_line), "long.trace.gz"),
                  "long.trace.gz:1: the first line must be 'tessera-trace 1'", "a long first line");
}

TEST(BoundedReading, AnEndlessFileIsRefusedFromItsStart) {
  if (!std::filesystem::exists("/dev/zero")) GTEST_SKIP() << "no /dev/zero";
  expect_error_at(read_trace("/dev/zero"), "/dev/zero: cannot tell the trace format", "/dev/zero");
  expect_error_at(read_pytorch_snapshot("/dev/zero"), "/dev/zero: byte 0: unknown pickle opcode 0x00",
                  "/dev/zero as a pickle");
  expect_error_at(read_lifetimes_csv("/dev/zero"), "/dev/zero:1: a NUL byte in the first line", "/dev/zero as a CSV");
}

// A pipe has no size to check first: it is read up to the bound.
TEST(BoundedReading, AFileWithoutASizeIsReadUpToTheBound) {
  const ScratchFolder scratch;
  const std::filesystem::path fifo = scratch.path() / "endless.trace";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  const BoundVariable bound("1MiB");
  // The reader closes the pipe at the bound; the writer then gets EPIPE, not the signal.
  const auto previous = std::signal(SIGPIPE, SIG_IGN);
  std::thread writer([&fifo] {
    // Opened without blocking, so that a reader that never opens the pipe cannot hang the test.
    int fd = -1;
    for (int tries = 0; fd < 0 && tries < 1000; ++tries) {
      fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
      if (fd < 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (fd < 0) return;
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    std::string lines = "tessera-trace 1\n";
    while (lines.size() < (std::size_t{1} << 16)) lines += "# a comment, again and again\n";
    for (std::size_t written = 0; written < (std::size_t{4} << 20);) {
      const ssize_t count = ::write(fd, lines.data(), lines.size());
      if (count <= 0) break;
      written += static_cast<std::size_t>(count);
    }
    ::close(fd);
  });
  const Result<Trace> read = read_text_trace(fifo);
  writer.join();
  std::signal(SIGPIPE, previous);
  expect_error_at(read, fifo.string() + ": holds more than 1048576 bytes (1 MiB), the most a trace may hold",
                  "an endless pipe");
}

TEST(BoundedReading, AFileLargerThanTheBoundIsRefusedBeforeItIsRead) {
  const ScratchFolder scratch;
  const std::filesystem::path big = scratch.path() / "big.trace";
  {
    std::ofstream out(big, std::ios::binary);
    out << "tessera-trace 1\n" << std::string((std::size_t{1} << 20) + 1, '\n') << "end\n";
  }
  const BoundVariable bound("1MiB");
  expect_error_at(read_trace(big), big.string() + ": " + std::to_string(std::filesystem::file_size(big)) +
                                       " bytes, more than 1048576 bytes (1 MiB), the most a trace may hold (set "
                                       "TESSERA_MAX_TRACE_BYTES to allow more)",
                  "a file over the bound");
  const BoundVariable larger("2MiB");
  Result<Trace> read = read_trace(big);
  EXPECT_TRUE(read.ok()) << describe(read.error());
}

TEST(BoundedReading, ABadBoundNamesTheVariable) {
  for (const char* bad : {"lots", "0", "12XB", "-5", "99999999999999999999"}) {
    const BoundVariable bound(bad);
    Result<Trace> read = parse_trace(trace_detail::gzip("tessera-trace 1\nend\n"), "t.trace.gz");
    ASSERT_FALSE(read.ok()) << bad;
    EXPECT_NE(read.error().message.find(std::string("t.trace.gz: TESSERA_MAX_TRACE_BYTES: '") + bad +
                                        "' is not a byte count"),
              std::string::npos)
        << read.error().message;
  }
  const BoundVariable bytes("4096");
  EXPECT_EQ(trace_detail::max_trace_bytes().value(), 4096u);
}

TEST(BoundedReading, AFolderIsNamedAsAFolder) {
  const ScratchFolder scratch;
  for (Result<Trace> read : {read_trace(scratch.path()), read_pytorch_snapshot(scratch.path()),
                             read_text_trace(scratch.path()), read_lifetimes_csv(scratch.path()),
                             read_stalloc_trace(scratch.path())}) {
    expect_error_at(read, scratch.path().string() + ": is a folder, not a trace file", "a folder");
  }
}

// The bound stays far above what real traces need: every shared trace reads under the default.
TEST(BoundedReading, TheDefaultBoundIsFarAboveTheSharedTraces) {
  const auto root = shared_traces();
  if (!root) GTEST_SKIP() << "the shared traces folder (TESSERA_SHARED_TRACES) is not here";
  std::size_t largest = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(*root)) {
    if (!entry.is_regular_file() || entry.path().extension() != ".gz") continue;
    Result<std::string> inflated = trace_detail::gunzip(contents(entry.path()), entry.path().string());
    ASSERT_TRUE(inflated.ok()) << describe(inflated.error());
    largest = std::max(largest, inflated->size());
  }
  EXPECT_GT(largest, 0u);
  EXPECT_LT(largest * 64, trace_detail::default_max_trace_bytes);
}

}  // namespace
}  // namespace tessera
