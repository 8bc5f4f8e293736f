// The IPC book on its own: which blocks are exported, the imports by address, and the check an importer makes
// of an exported block before it maps anything (each way a block may not add up, named; a stale one, whose
// exporter is gone).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <optional>

#include "core/ipc_book.hpp"
#include "support/export_liveness.hpp"

namespace tessera::core {
namespace {

constexpr Bytes granule = 2 * MiB;

// The exporter's side of the liveness, alive for the whole test binary, and one descriptor of it.
int live_descriptor() {
  static ExportLiveness exporter;
  static const int descriptor = exporter.hand_out().value();
  return descriptor;
}

ExportedBlock good_block() {
  ExportedBlock block;
  block.granule = granule;
  block.size = 3 * granule + 100;
  block.chunks = {ExportedChunk{.descriptor = 5, .offset = 0, .size = 8 * granule},
                  ExportedChunk{.descriptor = 6, .offset = 0, .size = 2 * granule}};
  block.pieces = {ExportedPiece{.chunk = 0, .chunk_offset = 2 * granule, .size = 2 * granule},
                  ExportedPiece{.chunk = 1, .chunk_offset = 0, .size = 2 * granule}};
  block.liveness = live_descriptor();
  block.origin = 0x7f0000400000;
  block.origin_process = 777;
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

  block = good_block();
  block.liveness = -1;
  expect_refused(block, "bad liveness descriptor: descriptor -1 is no exporter's liveness descriptor (Bad file");

  block = good_block();
  const int not_a_pipe = open("/dev/null", O_RDONLY | O_CLOEXEC);
  block.liveness = not_a_pipe;
  expect_refused(block, "(not a pipe)");
  close(not_a_pipe);

  // A pipe's write end, or a socket (the transport handed over by mistake), is no liveness descriptor either.
  int ends[2];
  ASSERT_EQ(pipe2(ends, O_CLOEXEC), 0);
  block = good_block();
  block.liveness = ends[1];
  expect_refused(block, "(not the read end of a pipe)");
  int pair[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
  block.liveness = pair[0];
  expect_refused(block, "(not a pipe)");
  for (const int descriptor : {ends[0], ends[1], pair[0], pair[1]}) close(descriptor);
}

// An importer that does what it can with its liveness descriptor (reads it, writes to it, shuts it down,
// closes it) makes no other handle of the same exporter look stale.
TEST(IpcBook, NoHolderOfALivenessDescriptorCanMakeAnotherHandleStale) {
  ExportLiveness exporter;
  const int hostile = exporter.hand_out().value();
  const int other = exporter.hand_out().value();
  char byte = 0;
  ASSERT_EQ(fcntl(hostile, F_SETFL, O_NONBLOCK), 0);
  EXPECT_EQ(read(hostile, &byte, 1), -1) << "nothing is ever written";
  EXPECT_EQ(write(hostile, &byte, 1), -1) << "a read end takes no bytes";
  EXPECT_EQ(shutdown(hostile, SHUT_RDWR), -1) << "a pipe cannot be shut down";
  close(hostile);
  EXPECT_FALSE(exporter_gone(other).value());
  close(other);
}

// A handle is stale once the allocator that exported it is gone: every descriptor it handed out hangs up,
// those handed out before and after a second export alike, and the check names the block and its process.
TEST(IpcBook, AHandleWhoseExporterIsGoneIsStale) {
  std::optional<ExportLiveness> exporter(std::in_place);
  const int first = exporter->hand_out().value();
  const int second = exporter->hand_out().value();
  ExportedBlock block = good_block();
  block.liveness = first;
  EXPECT_TRUE(IpcBook::check_importable(block, granule).ok()) << "the exporter is still there";
  EXPECT_FALSE(exporter_gone(second).value());
  exporter.reset();
  EXPECT_TRUE(exporter_gone(first).value());
  EXPECT_TRUE(exporter_gone(second).value());
  expect_refused(block, "is stale: block 0x7f0000400000 of process 777");
  close(first);
  close(second);
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
