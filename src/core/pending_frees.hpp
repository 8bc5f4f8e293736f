// Pending frees (policy, layer 4): the streams other than its own that used a live block (record_stream),
// and the blocks freed while such work may still run, each with the events that say when it is done.
// Draining hands the completed blocks back to the caller, which gives them back to their placements (or
// takes a shared block apart): this component changes no block's place, so nothing here calls back up.
// Every event is the mapper's; none is leaked on any path (a destroy that fails is the mapper's to retry).
#pragma once

#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/arena.hpp"
#include "core/block.hpp"
#include "core/mapper.hpp"
#include "tessera/allocator_observer.hpp"

namespace tessera::core {

class PendingFrees {
 public:
  // A freed block waiting for its events. arena null: a shared block, taken apart once they completed.
  struct Entry {
    Arena* arena = nullptr;
    Block* block = nullptr;
    std::vector<EventId> events;
    // The caller's free, told to the observers again (free_completed) when the block leaves the list; none
    // for a block that waits only for a driver call to be tried again.
    std::optional<BlockEvent> freed = std::nullopt;
  };

  explicit PendingFrees(Mapper& mapper) : mapper_(mapper) {}
  PendingFrees(const PendingFrees&) = delete;
  PendingFrees& operator=(const PendingFrees&) = delete;

  bool empty() const noexcept { return entries_.empty(); }
  std::size_t size() const noexcept { return entries_.size(); }

  // Work on `stream` uses the live `block` too (its own stream is the caller's to leave out).
  void record_stream(const Block* block, StreamId stream);
  // The other streams that used `block`; null when none (the common case costs one emptiness test).
  const std::vector<StreamId>* users_of(const Block* block) const {
    if (users_.empty()) return nullptr;
    const auto found = users_.find(block);
    return found == users_.end() ? nullptr : &found->second;
  }
  // The block is freed or gone: its users are forgotten.
  void forget_users(const Block* block) {
    if (!users_.empty()) users_.erase(block);
  }

  // The caller's free of `block`, to wait for the work queued on each of `streams` until now: an event on
  // each. On a failure nothing changed (the events recorded are destroyed): the block is still live and
  // its users kept, so the caller may free it again.
  Result<void> wait_for(Arena* arena, Block* block, std::span<const StreamId> streams, const BlockEvent& freed);
  // A block that waits for no event, only for a driver call to be tried again at the next drain.
  void retry_later(Arena* arena, Block* block);
  // Puts back an entry drain() answered that the caller could not finish (its events are gone).
  void requeue(Entry entry);

  // The entries whose events all completed (all of them, waiting for each, when `wait`), taken off the
  // list with their events kept as spares (Mapper::recycle_event), in the order processed. A wait that
  // fails stops the drain: the entries done before it are in `completed`, the rest stay, and `failure`
  // says why.
  struct Drained {
    std::vector<Entry> completed;
    Result<void> failure;
  };
  Drained drain(bool wait);

  // Each block with other users, and their streams: visit(const Block*, std::span<const StreamId>).
  template <class Visit>
  void visit_users(Visit&& visit) const {
    for (const auto& [block, streams] : users_) visit(block, std::span<const StreamId>(streams));
  }

  // For check() and teardown.
  bool waits(const Block* block) const;
  std::vector<StreamId> user_streams() const;
  std::vector<EventId> all_events() const;

 private:
  Mapper& mapper_;
  std::unordered_map<const Block*, std::vector<StreamId>> users_;
  std::vector<Entry> entries_;
};

}  // namespace tessera::core
