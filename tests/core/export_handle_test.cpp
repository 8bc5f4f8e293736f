// An exported block as bytes: a round trip keeps every field, and every way bytes can be wrong (another
// magic, another version, truncated, bytes after the end, counts past the limits, descriptors that do not
// match the chunks and the liveness) is refused naming what is wrong. fuzz/ feeds it arbitrary bytes.
#include <gtest/gtest.h>

#include "core/export_handle.hpp"

namespace tessera::core {
namespace {

ExportedBlock sample() {
  ExportedBlock block;
  block.size = 5 * MiB + 3;
  block.granule = 2 * MiB;
  block.chunks = {ExportedChunk{.descriptor = 11, .offset = 0, .size = 4 * MiB},
                  ExportedChunk{.descriptor = 12, .offset = 2 * MiB, .size = 8 * MiB}};
  block.pieces = {ExportedPiece{.chunk = 0, .chunk_offset = 0, .size = 4 * MiB},
                  ExportedPiece{.chunk = 1, .chunk_offset = 6 * MiB, .size = 2 * MiB}};
  block.liveness = 13;
  block.origin = 0x7f0000200000;
  block.origin_process = 4242;
  return block;
}

void expect_refused(std::span<const std::byte> bytes, std::span<const int> descriptors, std::string_view words) {
  auto decoded = decode_export(bytes, descriptors);
  ASSERT_FALSE(decoded.ok()) << words;
  EXPECT_EQ(decoded.error().code, Errc::invalid_argument);
  EXPECT_NE(decoded.error().message.find(words), std::string::npos) << decoded.error().message;
}

TEST(ExportHandle, ARoundTripKeepsEveryFieldAndTakesTheDescriptorsInOrder) {
  const std::vector<std::byte> bytes = encode_export(sample());
  EXPECT_EQ(export_descriptors(sample()), (std::vector<int>{11, 12, 13})) << "the chunks' in order, the liveness last";
  const int received[] = {40, 41, 42};
  const ExportedBlock back = decode_export(bytes, received).value();
  EXPECT_EQ(back.size, sample().size);
  EXPECT_EQ(back.granule, 2 * MiB);
  EXPECT_EQ(back.liveness, 42);
  EXPECT_EQ(back.origin, 0x7f0000200000u);
  EXPECT_EQ(back.origin_process, 4242u);
  ASSERT_EQ(back.chunks.size(), 2u);
  EXPECT_EQ(back.chunks[0].descriptor, 40);
  EXPECT_EQ(back.chunks[1].descriptor, 41);
  EXPECT_EQ(back.chunks[1].offset, 2 * MiB);
  EXPECT_EQ(back.chunks[1].size, 8 * MiB);
  ASSERT_EQ(back.pieces.size(), 2u);
  EXPECT_EQ(back.pieces[1].chunk, 1u);
  EXPECT_EQ(back.pieces[1].chunk_offset, 6 * MiB);
  EXPECT_EQ(back.pieces[1].size, 2 * MiB);
}

TEST(ExportHandle, BadBytesAreRefusedNamingWhatIsWrong) {
  const std::vector<std::byte> good = encode_export(sample());
  const int three[] = {3, 4, 5};
  expect_refused(std::span(good).first(10), three, "truncated");
  std::vector<std::byte> other = good;
  other[0] = std::byte{'X'};
  expect_refused(other, three, "does not start with TSIP");
  other = good;
  other[4] = std::byte{9};
  expect_refused(other, three, "version 9");
  expect_refused(std::span(good).first(good.size() - 1), three, "truncated");
  other = good;
  other.push_back(std::byte{0});
  expect_refused(other, three, "bytes after its end");
  const int two[] = {3, 4};
  expect_refused(good, two, "2 chunks but 2 descriptors came with it (3 expected");
  other = good;
  other[36] = std::byte{0xff};  // the chunk count: 65535 chunks
  other[37] = std::byte{0xff};
  expect_refused(other, three, "at most 4096");
  other = good;
  other[good.size() - 20] = std::byte{1};  // the last piece's reserved field
  expect_refused(other, three, "reserved field");
}

}  // namespace
}  // namespace tessera::core
