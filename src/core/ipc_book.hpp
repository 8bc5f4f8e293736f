// The IPC book (policy component, layer 4): which live blocks were exported to another process, and the
// blocks this process imported and has not closed (docs/allocator.md, "Sharing a block with another
// process"). It keeps no record per importer: an importer that dies leaves nothing here, and an exporter
// that exits takes nothing from an importer (the platform keeps the memory while anyone maps it).
#pragma once

#include <cstddef>
#include <map>
#include <unordered_set>

#include "core/imported_block.hpp"
#include "support/export_liveness.hpp"
#include "tessera/allocator.hpp"

namespace tessera::core {

class IpcBook {
 public:
  // Exported live blocks, by address: the free path asks any_exported() first (one load).
  bool any_exported() const noexcept { return !exported_.empty(); }
  bool is_exported(Address block) const { return exported_.contains(block); }
  void note_exported(Address block) { exported_.insert(block); }
  void forget_exported(Address block) { exported_.erase(block); }
  std::size_t exported_count() const noexcept { return exported_.size(); }
  const std::unordered_set<Address>& exported() const noexcept { return exported_; }
  // A descriptor for an export's importer that hangs up once this allocator is gone (the caller owns it).
  Result<int> hand_out_liveness() { return liveness_.hand_out(); }
  // In a child of fork(): the parent's liveness is not the child's to keep (ExportLiveness::forget_in_child).
  void forget_liveness_in_child() noexcept { liveness_.forget_in_child(); }

  // Imported blocks, by the address handed out (their range's base).
  Address add_import(ImportedBlock block);
  ImportedBlock* import_at(Address address);
  void forget_import(Address address) { imports_.erase(address); }
  std::size_t import_count() const noexcept { return imports_.size(); }
  std::map<Address, ImportedBlock>& imports() noexcept { return imports_; }

  // Whether an exported block adds up for an importer of `granule`, and its exporter is still there:
  // Errc::invalid_argument naming the first thing that does not (docs/reliability.md, the bad-input
  // catalogue).
  static Result<void> check_importable(const ExportedBlock& block, Bytes granule);

 private:
  std::unordered_set<Address> exported_;
  std::map<Address, ImportedBlock> imports_;
  ExportLiveness liveness_;  // one for every export this allocator makes
};

}  // namespace tessera::core
