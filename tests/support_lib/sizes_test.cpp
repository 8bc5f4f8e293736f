// The one rule for sizes people write: units, fractions, what is refused, and what is too large.
#include <gtest/gtest.h>

#include "support/sizes.hpp"

namespace tessera::support {
namespace {

Bytes bytes_of(std::string_view text) {
  const ParsedSize size = parse_size(text);
  EXPECT_TRUE(size) << text;
  return size.bytes;
}

TEST(ParseSize, UnitsAndFractions) {
  EXPECT_EQ(bytes_of("4096"), 4096U);
  EXPECT_EQ(bytes_of("80GiB"), 80 * GiB);
  EXPECT_EQ(bytes_of("512MiB"), 512 * MiB);
  EXPECT_EQ(bytes_of("1.5GiB"), 3 * GiB / 2);
  EXPECT_EQ(bytes_of("1.5 gib"), 3 * GiB / 2);  // case-insensitive, a blank between
  EXPECT_EQ(bytes_of("2m"), 2 * MiB);            // shorthands are binary
  EXPECT_EQ(bytes_of("8K"), 8 * KiB);
  EXPECT_EQ(bytes_of("1T"), Bytes{1} << 40);
  EXPECT_EQ(bytes_of("16TiB"), Bytes{16} << 40);
  EXPECT_EQ(bytes_of("100B"), 100U);
  EXPECT_EQ(bytes_of("80GB"), 80'000'000'000U);  // SI where the unit says so
  EXPECT_EQ(bytes_of("1MB"), 1'000'000U);
  EXPECT_EQ(bytes_of("2.5kb"), 2'500U);
  EXPECT_EQ(bytes_of(" 3 MiB\t"), 3 * MiB);
  EXPECT_EQ(bytes_of("0.5"), 1U);  // rounded to the nearest byte
  EXPECT_EQ(bytes_of("0"), 0U);    // whether zero is allowed is the caller's rule
  EXPECT_EQ(bytes_of("18446744073709551615"), 18446744073709551615U);  // read exactly, not through a double
  EXPECT_EQ(bytes_of("16777215TiB"), Bytes{16777215} << 40);  // the largest whole TiB below 2^64
}

TEST(ParseSize, RefusesWhatIsNoSize) {
  for (const char* bad : {"", "GiB", "-1", "+1", "1e9", "80XB", "1.2.3GiB", "80 GiB extra", "0x10", ".", "nan", "inf",
                          "8 KiBs", "1,5GiB"}) {
    const ParsedSize size = parse_size(bad);
    EXPECT_FALSE(size) << bad;
    EXPECT_EQ(size.problem, ParsedSize::Problem::not_a_size) << bad;
  }
}

TEST(ParseSize, SaysWhenAWellFormedSizeReaches2To64) {
  for (const char* big : {"18446744073709551616", "16777216TiB", "99999999999999999999", "20000000TiB",
                          "18446744073709551616.0", "16777216.5TiB"}) {
    const ParsedSize size = parse_size(big);
    EXPECT_FALSE(size) << big;
    EXPECT_EQ(size.problem, ParsedSize::Problem::too_large) << big;
  }
  const ParsedSize decimal = parse_size("18446745TB");  // 1.8446745e19 > 2^64 - 1
  EXPECT_EQ(decimal.problem, ParsedSize::Problem::too_large);
}

TEST(FormatSize, TheLargestWholeBinaryUnitAndReadsBack) {
  EXPECT_EQ(format_size(4 * KiB), "4KiB");
  EXPECT_EQ(format_size(2 * MiB), "2MiB");
  EXPECT_EQ(format_size(1536 * KiB), "1536KiB");
  EXPECT_EQ(format_size(Bytes{1} << 40), "1TiB");
  EXPECT_EQ(format_size(Bytes{1} << 47), "128TiB");
  EXPECT_EQ(format_size(100), "100");
  EXPECT_EQ(format_size(0), "0");
  for (Bytes size : {Bytes{1}, 4097 * KiB, 3 * GiB, Bytes{5} << 40, ~Bytes{0}}) {
    EXPECT_EQ(bytes_of(format_size(size)), size) << format_size(size);
  }
}

}  // namespace
}  // namespace tessera::support
