// read_trace and parse_trace: the format by content first, by name second.
#include <gtest/gtest.h>

#include "tessera/trace.hpp"
#include "trace/gzip_file.hpp"

namespace tessera {
namespace {

using namespace std::string_literals;

// {"device_traces": [[{"action": "alloc", "addr": 16, "size": 8}]]}, as pickle.dumps(..., protocol=2).
const std::string pickle_snapshot = std::string{static_cast<char>(0x80), 2} +
                                    "}(X\x0d\0\0\0device_traces]]}(X\x06\0\0\0actionX\x05\0\0\0allocX\x04\0\0\0"
                                    "addrK\x10X\x04\0\0\0sizeK\x08uaau."s;

std::size_t allocs(const Result<Trace>& read) {
  EXPECT_TRUE(read.ok()) << describe(read.error());
  return read.ok() ? summarize(*read).allocs : 0;
}

TEST(ReadTrace, TheContentDecidesWhateverTheName) {
  EXPECT_EQ(allocs(parse_trace(pickle_snapshot, "snapshot.bin")), 1u);
  EXPECT_EQ(allocs(parse_trace("tessera-trace 1\na 1 8\nend\n", "trace.csv")), 1u);
  EXPECT_EQ(allocs(parse_trace("id,lower,upper,size\n0,0,1,8\n1,0,2,8\n", "lifetimes.dat")), 2u);
  EXPECT_EQ(allocs(parse_trace("0,0,1,8\n", "headerless")), 1u);
  EXPECT_EQ(allocs(parse_trace("1 0x10 8 0\n0 0x10 8 0\n", "mem_log_dev0")), 1u);
  EXPECT_EQ(allocs(parse_trace("Iteration Index : 0\n1 0x10 8 0\n", "log")), 1u);
}

TEST(ReadTrace, GzipIsTransparentForEveryFormat) {
  EXPECT_EQ(allocs(parse_trace(trace_detail::gzip(pickle_snapshot), "s.pickle.gz")), 1u);
  EXPECT_EQ(allocs(parse_trace(trace_detail::gzip("tessera-trace 1\na 1 8\nend\n"), "t.gz")), 1u);
  EXPECT_EQ(allocs(parse_lifetimes_csv(trace_detail::gzip("id,lower,upper,size\n0,0,1,8\n"), "l.csv.gz")), 1u);
  EXPECT_EQ(allocs(parse_stalloc_trace(trace_detail::gzip("1 0x10 8 0\n"), "m.txt.gz")), 1u);
  // Two gzip members read as one stream, as gzip -d does.
  EXPECT_EQ(allocs(parse_trace(trace_detail::gzip("tessera-trace 1\na 1 8\n") + trace_detail::gzip("end\n"), "t.gz")),
            1u);
}

TEST(ReadTrace, TheNameDecidesWhenTheContentCannot) {
  // An empty STAlloc log and an empty CSV are errors of their own formats, chosen by the name.
  Result<Trace> log = parse_trace("\n", "mem_log_dev0.txt");
  ASSERT_FALSE(log.ok());
  EXPECT_NE(log.error().message.find("mem_log_dev0.txt:1: the file is empty"), std::string::npos) << log.error().message;
  Result<Trace> unknown = parse_trace("hello\n", "mystery.dat");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message.find("mystery.dat: cannot tell the trace format"), std::string::npos)
      << unknown.error().message;
  Result<Trace> not_gzip = parse_trace("tessera-trace 1\nend\n", "plain.trace.gz");
  ASSERT_FALSE(not_gzip.ok());
  EXPECT_NE(not_gzip.error().message.find("plain.trace.gz: byte 0: not gzip data"), std::string::npos)
      << not_gzip.error().message;
}

TEST(ReadTrace, AFormatCanBeForced) {
  TraceReadOptions options;
  options.format = TraceFormat::text;
  Result<Trace> read = parse_trace("id,lower,upper,size\n0,0,1,8\n", "l.csv", options);
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.error().message.find("l.csv:1: the first line must be 'tessera-trace 1'"), std::string::npos)
      << read.error().message;
}

}  // namespace
}  // namespace tessera
