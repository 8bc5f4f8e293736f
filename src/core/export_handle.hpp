// An exported block as bytes (bookkeeping, layer 2): what crosses to the importing process beside its
// descriptors, which travel separately (a Unix socket's SCM_RIGHTS, pidfd_getfd) in the order of the chunks.
// Flat, little-endian and versioned, so that a handle from another build, a truncated one or random bytes is
// refused with an error naming what is wrong — never read past its end (fuzz/ feeds it arbitrary bytes).
//
// Layout, version 2: "TSIP" | u32 version | u64 size | u64 granule | u64 origin | u32 origin_process |
//   u32 chunks | u32 pieces | per chunk: u64 offset, u64 size | per piece: u32 chunk, u32 0, u64 chunk_offset,
//   u64 size. The descriptors: one per chunk in order, then the exporter's liveness descriptor.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "tessera/allocator.hpp"

namespace tessera::core {

inline constexpr std::uint32_t export_handle_version = 2;
inline constexpr std::size_t export_handle_chunks_max = 4096;
inline constexpr std::size_t export_handle_pieces_max = 1 << 20;

std::vector<std::byte> encode_export(const ExportedBlock& block);
// The descriptors an exported block travels with: its chunks' in order, then its liveness descriptor.
std::vector<int> export_descriptors(const ExportedBlock& block);
// The block the bytes describe, with `descriptors` given to its chunks in order (one each) and the last to
// its liveness. The sizes are
// read, not checked against each other: IpcBook::check_importable does that before an import.
Result<ExportedBlock> decode_export(std::span<const std::byte> bytes, std::span<const int> descriptors);

}  // namespace tessera::core
