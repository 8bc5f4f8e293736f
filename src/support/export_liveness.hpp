// Whether the process that exported a block is still there, as an importer can ask it before mapping the
// block (docs/allocator.md, "Sharing a block with another process": a handle whose exporter is gone is
// stale). The exporter holds one end of a connected Unix socket pair for as long as its allocator lives and
// hands out duplicates of the other end beside each export's chunk descriptors; the kernel closes the held
// end when the process exits, and the allocator when it goes, so that every descriptor handed out then reads
// as hung up. No message ever crosses the pair and nothing is recorded per importer.
#pragma once

#include "tessera/result.hpp"

namespace tessera {

class ExportLiveness {
 public:
  ExportLiveness() = default;
  ExportLiveness(const ExportLiveness&) = delete;
  ExportLiveness& operator=(const ExportLiveness&) = delete;
  ExportLiveness(ExportLiveness&& other) noexcept;
  ExportLiveness& operator=(ExportLiveness&& other) noexcept;
  ~ExportLiveness();  // every descriptor handed out reads as hung up from now on

  // A descriptor for an importer (close-on-exec; the caller owns it), the pair made at the first call.
  Result<int> hand_out();

 private:
  void close_both() noexcept;

  int held_ = -1;
  int peer_ = -1;
};

// Whether the exporter behind a descriptor hand_out() gave has gone (exited, or its allocator went): false
// while it lives. A descriptor that is no end of such a pair is Errc::invalid_argument naming it.
Result<bool> exporter_gone(int descriptor);

}  // namespace tessera
