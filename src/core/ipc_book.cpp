#include "core/ipc_book.hpp"

#include <fmt/format.h>

namespace tessera::core {

Address IpcBook::add_import(ImportedBlock block) {
  const Address base = block.base;
  imports_.insert_or_assign(base, std::move(block));
  return base;
}

ImportedBlock* IpcBook::import_at(Address address) {
  auto found = imports_.find(address);
  return found == imports_.end() ? nullptr : &found->second;
}

Result<void> IpcBook::check_importable(const ExportedBlock& block, Bytes granule) {
  auto bad = [](std::string what) {
    return make_error(Errc::invalid_argument, fmt::format("tessera: an exported block that {}", what));
  };
  if (block.granule != granule) {
    return bad(fmt::format("was exported with a granule of {} bytes cannot be imported with one of {}", block.granule,
                           granule));
  }
  if (block.pieces.empty() || block.chunks.empty()) return bad("has no piece or no chunk cannot be imported");
  Bytes span = 0;
  for (std::size_t index = 0; index < block.pieces.size(); ++index) {
    const ExportedPiece& piece = block.pieces[index];
    if (piece.chunk >= block.chunks.size()) {
      return bad(fmt::format("has piece {} of chunk {}, but only {} chunks", index, piece.chunk, block.chunks.size()));
    }
    const ExportedChunk& chunk = block.chunks[piece.chunk];
    if (chunk.descriptor < 0) return bad(fmt::format("has chunk {} without a descriptor ({})", piece.chunk, chunk.descriptor));
    if (piece.size == 0 || piece.size % granule != 0 || piece.chunk_offset % granule != 0) {
      return bad(fmt::format("has piece {} of {} bytes at offset {}: not granule multiples", index, piece.size,
                             piece.chunk_offset));
    }
    if (piece.chunk_offset > chunk.size || piece.size > chunk.size - piece.chunk_offset) {
      return bad(fmt::format("has piece {} ({} bytes at offset {}) past the end of its chunk of {} bytes", index,
                             piece.size, piece.chunk_offset, chunk.size));
    }
    if (span + piece.size < span) return bad("has pieces whose sizes overflow");
    span += piece.size;
  }
  if (block.size == 0 || block.size > span || span - block.size >= granule) {
    return bad(fmt::format("is {} bytes, but its pieces hold {} (a block fills its last granule in part at most)",
                           block.size, span));
  }
  // Last: a handle that adds up but whose exporter is gone is stale, not malformed.
  auto gone = exporter_gone(block.liveness);
  if (!gone) return bad(fmt::format("has a bad liveness descriptor: {}", gone.error().message));
  if (*gone) {
    return bad(fmt::format("is stale: block {:#x} of process {} was exported by an allocator that is gone (the "
                           "process exited, or destroyed its allocator); export it again from a live process",
                           block.origin, block.origin_process));
  }
  return {};
}

}  // namespace tessera::core
