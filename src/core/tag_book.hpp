// The tag book (policy, layer 4): the tags an allocator has allocated under, in the order first used,
// whether each is paused, the host copies paused blocks keep (backups), and the buffers kept for the next
// pause (the backup cache, backup_cache.hpp). tag_pause.cpp decides when to pause, copy and restore; this
// book only keeps what that left. Host buffers are allocated and freed by the mapper.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/backup_cache.hpp"
#include "core/arena.hpp"
#include "core/block.hpp"
#include "core/mapper.hpp"

namespace tessera::core {

class TagBook {
 public:
  struct State {
    TagId tag;
    bool paused = false;
    bool paused_before = false;  // the backup cache keeps buffers only for the blocks of tags that pause
  };

  // keep_buffers: AllocatorConfig::backup_cache — a backup's buffer is kept for the next pause when it goes.
  TagBook(Mapper& mapper, bool keep_buffers) : mapper_(mapper), keep_buffers_(keep_buffers) {}
  ~TagBook();  // frees every backup and every kept buffer
  TagBook(const TagBook&) = delete;
  TagBook& operator=(const TagBook&) = delete;

  // Tags.
  State* state_of(TagId tag) noexcept;
  const State* state_of(TagId tag) const noexcept;
  // The tag is used now (an allocation under it); its state, added the first time.
  State& note_used(TagId tag);
  bool is_paused(TagId tag) const noexcept {
    const State* state = state_of(tag);
    return state != nullptr && state->paused;
  }
  // Whether any tag is paused: a free checks for a paused block only then.
  bool any_paused() const noexcept { return paused_count_ > 0; }
  std::size_t paused_count() const noexcept { return paused_count_; }
  void set_paused(State& state, bool paused) noexcept;
  const std::vector<State>& states() const noexcept { return states_; }
  std::vector<std::string> names() const;
  // The tag named `name`, if anything was allocated under it; otherwise an error naming the `operation`
  // and the tags there are.
  Result<TagId> known(std::string_view name, std::string_view operation) const;

  // Backups.
  bool has_backup(const Block* block) const { return backups_.contains(block); }
  // A host buffer of at least `size` bytes: a kept one (BackupCache::take's rule), else a new one.
  Result<HostBuffer> buffer_for(Bytes size);
  void keep_backup(const Block* block, const HostBuffer& buffer) { backups_.emplace(block, buffer); }
  // The block's backup goes (its block was freed or restored): its buffer is kept or freed.
  void drop_backup(const Block* block);
  // A buffer no backup holds: kept for the next pause where the option says so, else freed.
  void release_buffer(const HostBuffer& buffer);
  // Drops every backup whose block `pick(block)` chooses.
  template <class Pick>
  void drop_backups_if(Pick&& pick) {
    for (auto backup = backups_.begin(); backup != backups_.end();) {
      if (!pick(backup->first)) {
        ++backup;
        continue;
      }
      release_buffer(backup->second);
      backup = backups_.erase(backup);
    }
  }
  // visit(const Block*, const HostBuffer&) for every backup.
  template <class Visit>
  void visit_backups(Visit&& visit) const {
    for (const auto& [block, buffer] : backups_) visit(block, buffer);
  }

  // A paused tag's runs of slots that were mapped under a graph pool's arenas: its graph replays into the
  // pool's free blocks too, so the resume maps every one again, not only the live blocks' (tag_pause.cpp).
  struct MappedRun {
    Arena* arena = nullptr;
    std::uint32_t region = 0;
    SlotRange slots;
  };
  void add_mapped_run(TagId tag, const MappedRun& run) { mapped_runs_[tag].push_back(run); }
  const std::vector<MappedRun>* mapped_runs(TagId tag) const {
    auto found = mapped_runs_.find(tag);
    return found == mapped_runs_.end() ? nullptr : &found->second;
  }
  void forget_mapped_runs(TagId tag) { mapped_runs_.erase(tag); }

  // The backup cache.
  Bytes kept_buffer_bytes() const noexcept { return cache_.bytes(); }
  // Keeps at most one buffer for each size in `wanted` (BackupCache::keep_only_for); frees the others.
  void keep_buffers_only_for(std::vector<Bytes> wanted);
  bool keeps_buffers() const noexcept { return cache_.size() > 0; }
  void free_kept_buffers();

 private:
  Mapper& mapper_;
  bool keep_buffers_;
  std::vector<State> states_;  // in the order first used
  std::size_t paused_count_ = 0;
  std::unordered_map<const Block*, HostBuffer> backups_;
  std::unordered_map<TagId, std::vector<MappedRun>> mapped_runs_;
  BackupCache cache_;
};

}  // namespace tessera::core
