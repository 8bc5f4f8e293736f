// The IPC book on its own: which blocks are exported, the imports by address, and the check an importer makes
// of an exported block before it maps anything (each way a block may not add up, named).
#include <gtest/gtest.h>

#include "core/ipc_book.hpp"

namespace tessera::core {
namespace {

constexpr Bytes granule = 2 * MiB;

ExportedBlock good_block() {
  ExportedBlock block;
  block.granule = granule;
  block.size = 3 * granule + 100;
  block.chunks = {ExportedChunk{.descriptor = 5, .offset = 0, .size = 8 * granule},
                  ExportedChunk{.descriptor = 6, .offset = 0, .size = 2 * granule}};
  block.pieces = {ExportedPiece{.chunk = 0, .chunk_offset = 2 * granule, .size = 2 * granule},
                  ExportedPiece{.chunk = 1, .chunk_offset = 0, .size = 2 * granule}};
  return block;
}

void expect_refused(const ExportedBlock& block, std::string_view words) {
  auto checked = IpcBook::check_importable(block, granule);
  ASSERT_FALSE(checked.ok()) << words;
  EXPECT_EQ(checked.error().code, Errc::invalid_argument);
  EXPECT_NE(checked.error().message.find(words), std::string::npos) << checked.error().message;
}

TEST(IpcBook, AWellFormedBlockIsImportable) { EXPECT_TRUE(IpcBook::check_importable(good_block(), granule).ok()); }

TEST(IpcBook, EachWayABlockMayNotAddUpIsNamed) {
  ExportedBlock block = good_block();
  block.granule = 4 * MiB;
  expect_refused(block, "granule of 4194304 bytes");

  block = good_block();
  block.pieces.clear();
  expect_refused(block, "no piece");

  block = good_block();
  block.pieces[1].chunk = 7;
  expect_refused(block, "piece 1 of chunk 7, but only 2 chunks");

  block = good_block();
  block.chunks[0].descriptor = -1;
  expect_refused(block, "without a descriptor");

  block = good_block();
  block.pieces[0].size = granule + 1;
  expect_refused(block, "not granule multiples");

  block = good_block();
  block.pieces[0].chunk_offset = 7 * granule;
  expect_refused(block, "past the end of its chunk");

  block = good_block();
  block.size = 4 * granule + 1;
  expect_refused(block, "its pieces hold");

  block = good_block();
  block.size = granule;  // a whole granule of the pieces beyond the block
  expect_refused(block, "its pieces hold");

  block = good_block();
  block.size = 0;
  expect_refused(block, "is 0 bytes");
}

TEST(IpcBook, ExportsAndImportsAreKeptByAddress) {
  IpcBook book;
  EXPECT_FALSE(book.any_exported());
  book.note_exported(0x1000);
  book.note_exported(0x1000);
  EXPECT_TRUE(book.any_exported());
  EXPECT_TRUE(book.is_exported(0x1000));
  EXPECT_EQ(book.exported_count(), 1u);
  book.forget_exported(0x1000);
  EXPECT_FALSE(book.any_exported());

  const Address at = book.add_import(ImportedBlock{.base = 0x40000000, .span = granule, .size = 10, .chunks = {},
                                                   .mappings = {}});
  EXPECT_EQ(at, 0x40000000u);
  ASSERT_NE(book.import_at(at), nullptr);
  EXPECT_EQ(book.import_at(at)->size, 10u);
  EXPECT_EQ(book.import_at(at + 1), nullptr);
  book.forget_import(at);
  EXPECT_EQ(book.import_count(), 0u);
}

}  // namespace
}  // namespace tessera::core
