// Whether the allocator that exported a block is still there, as an importer can ask it before mapping the
// block (docs/allocator.md, "Sharing a block with another process": a handle whose exporter is gone is
// stale). The exporter holds the write end of a pipe for as long as its allocator lives and hands out
// duplicates of the read end beside each export's chunk descriptors; the kernel closes the write end when
// the process exits, and the allocator when it goes, so that every read end handed out then reads as hung
// up. Nothing is ever written and nothing is recorded per importer. A pipe, not a socket pair: a holder of a
// read end can neither write into it nor shut it down, so no importer can make another's handles look stale.
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

  // A descriptor for an importer (close-on-exec; the caller owns it), the pipe made at the first call.
  Result<int> hand_out();

  // In a child of fork(): close the inherited ends, so that the child does not keep its parent's exports
  // alive after the parent's allocator is gone. The child's own exports get a pipe of their own.
  void forget_in_child() noexcept { close_both(); }

 private:
  void close_both() noexcept;

  int held_ = -1;  // the write end
  int peer_ = -1;  // the read end, duplicated for each export
};

// Whether the exporter behind a descriptor hand_out() gave has gone (exited, or its allocator went): false
// while it lives. A descriptor that is not the read end of a pipe is Errc::invalid_argument naming it and
// what it is. The check is a liveness test, not an authentication: any pipe's read end passes it.
Result<bool> exporter_gone(int descriptor);

}  // namespace tessera
