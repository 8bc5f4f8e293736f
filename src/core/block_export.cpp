// Sharing a live block with another process (policy; allocator.hpp states the contract, docs/allocator.md
// "Sharing a block with another process" the lifetime rule).
//
// An export hands out the chunks under a block that lies on whole granules, with the pieces of them in
// address order; the IPC book remembers the block, and nothing else — no importer is recorded, so none can
// leak here. What the rule needs from then on: a pause of the block's tag is refused (it would give the
// pages back and map others at the same addresses, which the importer never sees), and at the block's free
// its pages are unmapped and retired (page_pool.hpp) instead of cached, so that no other block of this
// process is ever placed on bytes another process may still map. The free block that remains has no page,
// and the next allocation there gets new ones.
#include "core/tessera_allocator.hpp"

#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>

namespace tessera::core {

namespace {

Error refuse_export(Address address, Errc code, std::string why) {
  return make_error(code, fmt::format("tessera: export of block {:#x}: {}", address, why));
}

}  // namespace

Result<ExportedBlock> TesseraAllocatorImpl::export_block(Address address) {
  std::lock_guard lock(mutex_);
  Block* const* found = live_.find(address);
  if (found == nullptr) {
    return make_error(Errc::not_found, fmt::format("tessera: export of {:#x}, which is not a live block (freed "
                                                   "already, or memory from elsewhere)",
                                                   address));
  }
  Block* block = *found;
  if (!mapper_.capabilities().shareable_chunks) {
    return refuse_export(address, Errc::unsupported,
                         "this driver cannot share chunks with another process (capability shareable_chunks: the "
                         "host and cuda drivers have it when made with shareable_chunks)");
  }
  Arena* arena = block->arena;
  if (arena == nullptr) {
    return refuse_export(address, Errc::invalid_argument,
                         "it is built over slivers of other blocks' granules, which it does not own");
  }
  if (tags_.any_paused() && is_paused(block)) {
    return refuse_export(address, Errc::invalid_argument, "its tag is paused: its pages are not there");
  }
  const Bytes g = granule();
  if (block->address % g != 0 || block->size % g != 0) {
    return refuse_export(address, Errc::invalid_argument,
                         fmt::format("its {} bytes do not lie on whole granules of {} bytes, so it shares a granule "
                                     "with other blocks; only a block on whole granules can be exported (allocate "
                                     "a multiple of the granule)",
                                     block->size, g));
  }
  const Region& region = arena->region_of(*block);
  const std::size_t first = arena->slot_of(region, block->address);
  const std::size_t end = first + block->size / g;
  ExportedBlock exported;
  exported.size = block->requested;
  exported.granule = g;
  std::vector<ChunkId> chunks;  // of exported.chunks, in the same order
  for (std::size_t slot = first; slot < end;) {
    const std::uint32_t granules = region.page_granules_at(slot);
    if (!region.is_mapped(slot) || granules == 0 || slot + granules > end) {
      return refuse_export(address, Errc::invalid_argument,
                           fmt::format("the page mapped at its byte {} reaches past it, into memory of other "
                                       "blocks (a page is shared whole)",
                                       (slot - first) * g));
    }
    const ChunkId chunk = region.chunk_at(slot);
    auto known = std::find(chunks.begin(), chunks.end(), chunk);
    if (known == chunks.end()) known = chunks.insert(chunks.end(), chunk);
    exported.pieces.push_back(ExportedPiece{.chunk = static_cast<std::uint32_t>(known - chunks.begin()),
                                            .chunk_offset = Bytes{region.page_offset_at(slot)} * g,
                                            .size = Bytes{granules} * g});
    slot += granules;
  }
  auto liveness = ipc_.hand_out_liveness();
  if (!liveness) {
    return refuse_export(address, liveness.error().code,
                         fmt::format("no liveness descriptor for its importer; nothing changed: {}",
                                     liveness.error().message));
  }
  exported.liveness = *liveness;
  exported.origin = address;
  exported.origin_process = static_cast<std::uint32_t>(::getpid());
  for (ChunkId chunk : chunks) {
    auto made = mapper_.export_chunk(chunk);
    if (!made) {
      for (const ExportedChunk& done : exported.chunks) ::close(done.descriptor);
      ::close(exported.liveness);
      return refuse_export(address, made.error().code,
                           fmt::format("exporting chunk {} of {} failed; nothing changed: {}", exported.chunks.size() + 1,
                                       chunks.size(), made.error().message));
    }
    exported.chunks.push_back(*made);
  }
  ipc_.note_exported(address);
  return exported;
}

Result<void> TesseraAllocatorImpl::retire_exported(Block* block) {
  Arena& arena = *block->arena;
  std::vector<StreamId> streams{arena.stream()};
  if (const std::vector<StreamId>* users = pending_.users_of(block)) streams.insert(streams.end(), users->begin(), users->end());
  if (auto done = mapper_.synchronize(streams); !done) {
    return make_error(done.error().code, fmt::format("tessera: free of exported block {:#x}: proving the device done "
                                                     "with it failed; it stays live, free it again: {}",
                                                     block->address, done.error().message));
  }
  Region& region = arena.region_of(*block);
  const SlotRange range{arena.slot_of(region, block->address), block->size / granule()};
  if (auto done = mapper_.retire_pages(region, range); !done) {
    return make_error(done.error().code, fmt::format("tessera: free of exported block {:#x}: unmapping its pages "
                                                     "failed; it stays live and exported, free it again: {}",
                                                     block->address, done.error().message));
  }
  ipc_.forget_exported(block->address);
  return {};
}

Result<void> TesseraAllocatorImpl::refuse_pause_if_exported(TagId tag, std::string_view name) {
  for (Address exported : ipc_.exported()) {
    Block* const* block = live_.find(exported);
    if (block != nullptr && tag_of(*block) == tag) {
      return make_error(Errc::invalid_argument,
                        fmt::format("tessera: pause of tag '{}': its block {:#x} is exported to another process, "
                                    "which maps its pages; close it there and free it here first (nothing changed)",
                                    name, exported));
    }
  }
  return {};
}

Result<Address> TesseraAllocatorImpl::import_block(const ExportedBlock& block) {
  std::lock_guard lock(mutex_);
  if (!mapper_.capabilities().shareable_chunks) {
    return make_error(Errc::unsupported, "tessera: import of a block: this driver cannot map another process's "
                                         "chunks (capability shareable_chunks)");
  }
  if (auto valid = IpcBook::check_importable(block, granule()); !valid) return std::move(valid).error();
  auto imported = mapper_.import_block(block);
  if (!imported) {
    return make_error(imported.error().code, fmt::format("tessera: import of a block of {} bytes failed; nothing is "
                                                         "kept: {}",
                                                         block.size, imported.error().message));
  }
  return ipc_.add_import(std::move(*imported));
}

Result<void> TesseraAllocatorImpl::close_import(Address address) {
  std::lock_guard lock(mutex_);
  ImportedBlock* imported = ipc_.import_at(address);
  if (imported == nullptr) {
    return make_error(Errc::not_found, fmt::format("tessera: close_import of {:#x}, which is no imported block (closed "
                                                   "already, or memory from elsewhere)",
                                                   address));
  }
  if (auto idle = mapper_.synchronize_device(); !idle) {
    return make_error(idle.error().code, fmt::format("tessera: close_import of {:#x}: proving the device done with it "
                                                     "failed; nothing changed: {}",
                                                     address, idle.error().message));
  }
  if (auto done = mapper_.close_import(*imported); !done) {
    return make_error(done.error().code, fmt::format("tessera: close_import of {:#x} failed half way; close it again "
                                                     "for the rest: {}",
                                                     address, done.error().message));
  }
  ipc_.forget_import(address);
  return {};
}

std::size_t TesseraAllocatorImpl::exported_blocks() const {
  std::lock_guard lock(mutex_);
  return ipc_.exported_count();
}

std::size_t TesseraAllocatorImpl::imported_blocks() const {
  std::lock_guard lock(mutex_);
  return ipc_.import_count();
}

}  // namespace tessera::core
