#include "core/export_handle.hpp"

#include <cstring>

#include <fmt/format.h>

namespace tessera::core {

namespace {

constexpr char magic[4] = {'T', 'S', 'I', 'P'};
constexpr std::size_t header_bytes = 4 + 4 + 8 + 8 + 8 + 4 + 4 + 4;
constexpr std::size_t chunk_bytes = 16;
constexpr std::size_t piece_bytes = 24;

template <class T>
void put(std::vector<std::byte>& out, T value) {
  for (std::size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<std::byte>((value >> (8 * i)) & 0xff));
}

template <class T>
T get(std::span<const std::byte> bytes, std::size_t& at) {
  T value = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) value |= static_cast<T>(static_cast<T>(bytes[at + i]) << (8 * i));
  at += sizeof(T);
  return value;
}

Error bad(std::string what) {
  return make_error(Errc::invalid_argument, fmt::format("tessera: an export handle {}", what));
}

}  // namespace

std::vector<std::byte> encode_export(const ExportedBlock& block) {
  std::vector<std::byte> out;
  out.reserve(header_bytes + block.chunks.size() * chunk_bytes + block.pieces.size() * piece_bytes);
  for (char c : magic) out.push_back(static_cast<std::byte>(c));
  put<std::uint32_t>(out, export_handle_version);
  put<std::uint64_t>(out, block.size);
  put<std::uint64_t>(out, block.granule);
  put<std::uint64_t>(out, block.origin);
  put<std::uint32_t>(out, block.origin_process);
  put<std::uint32_t>(out, static_cast<std::uint32_t>(block.chunks.size()));
  put<std::uint32_t>(out, static_cast<std::uint32_t>(block.pieces.size()));
  for (const ExportedChunk& chunk : block.chunks) {
    put<std::uint64_t>(out, chunk.offset);
    put<std::uint64_t>(out, chunk.size);
  }
  for (const ExportedPiece& piece : block.pieces) {
    put<std::uint32_t>(out, piece.chunk);
    put<std::uint32_t>(out, 0);
    put<std::uint64_t>(out, piece.chunk_offset);
    put<std::uint64_t>(out, piece.size);
  }
  return out;
}

std::vector<int> export_descriptors(const ExportedBlock& block) {
  std::vector<int> descriptors;
  descriptors.reserve(block.chunks.size() + 1);
  for (const ExportedChunk& chunk : block.chunks) descriptors.push_back(chunk.descriptor);
  descriptors.push_back(block.liveness);
  return descriptors;
}

Result<ExportedBlock> decode_export(std::span<const std::byte> bytes, std::span<const int> descriptors) {
  if (bytes.size() < header_bytes) {
    return bad(fmt::format("of {} bytes is truncated: its header alone is {} bytes", bytes.size(), header_bytes));
  }
  if (std::memcmp(bytes.data(), magic, sizeof magic) != 0) return bad("does not start with TSIP: it is no handle");
  std::size_t at = 4;
  const auto version = get<std::uint32_t>(bytes, at);
  if (version != export_handle_version) {
    return bad(fmt::format("is of version {}; this build reads version {}", version, export_handle_version));
  }
  ExportedBlock block;
  block.size = get<std::uint64_t>(bytes, at);
  block.granule = get<std::uint64_t>(bytes, at);
  block.origin = get<std::uint64_t>(bytes, at);
  block.origin_process = get<std::uint32_t>(bytes, at);
  const auto chunks = get<std::uint32_t>(bytes, at);
  const auto pieces = get<std::uint32_t>(bytes, at);
  if (chunks > export_handle_chunks_max || pieces > export_handle_pieces_max) {
    return bad(fmt::format("names {} chunks and {} pieces; at most {} and {}", chunks, pieces,
                           export_handle_chunks_max, export_handle_pieces_max));
  }
  const std::size_t expected = header_bytes + chunks * chunk_bytes + pieces * piece_bytes;
  if (bytes.size() != expected) {
    return bad(fmt::format("of {} bytes should be {} for its {} chunks and {} pieces ({})", bytes.size(), expected,
                           chunks, pieces, bytes.size() < expected ? "truncated" : "bytes after its end"));
  }
  if (descriptors.size() != std::size_t{chunks} + 1) {
    return bad(fmt::format("names {} chunks but {} descriptors came with it ({} expected: one per chunk and the "
                           "exporter's liveness)",
                           chunks, descriptors.size(), std::size_t{chunks} + 1));
  }
  block.liveness = descriptors.back();
  block.chunks.resize(chunks);
  for (std::size_t i = 0; i < chunks; ++i) {
    block.chunks[i].descriptor = descriptors[i];
    block.chunks[i].offset = get<std::uint64_t>(bytes, at);
    block.chunks[i].size = get<std::uint64_t>(bytes, at);
  }
  block.pieces.resize(pieces);
  for (ExportedPiece& piece : block.pieces) {
    piece.chunk = get<std::uint32_t>(bytes, at);
    if (get<std::uint32_t>(bytes, at) != 0) return bad("has a piece whose reserved field is not 0");
    piece.chunk_offset = get<std::uint64_t>(bytes, at);
    piece.size = get<std::uint64_t>(bytes, at);
  }
  return block;
}

}  // namespace tessera::core
