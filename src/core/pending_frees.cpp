#include "core/pending_frees.hpp"

#include <algorithm>

namespace tessera::core {

void PendingFrees::record_stream(const Block* block, StreamId stream) {
  auto& streams = users_[block];
  if (std::find(streams.begin(), streams.end(), stream) == streams.end()) streams.push_back(stream);
}

Result<void> PendingFrees::wait_for(Arena* arena, Block* block, std::span<const StreamId> streams,
                                    const BlockEvent& freed) {
  std::vector<EventId> events;
  for (StreamId stream : streams) {
    auto recorded = mapper_.record_event(stream);
    if (!recorded) {
      for (EventId done : events) mapper_.destroy_event(done);
      return std::move(recorded).error();
    }
    events.push_back(*recorded);
  }
  forget_users(block);
  block->live = false;
  block->pending = true;
  entries_.push_back({arena, block, std::move(events), freed});
  return {};
}

void PendingFrees::retry_later(Arena* arena, Block* block) {
  block->live = false;
  block->pending = true;
  entries_.push_back({arena, block, {}});
}

void PendingFrees::requeue(Entry entry) { entries_.push_back(std::move(entry)); }

PendingFrees::Drained PendingFrees::drain(bool wait) {
  Drained drained;
  mapper_.retry_stale_events();
  for (std::size_t i = 0; i < entries_.size();) {
    Entry& entry = entries_[i];
    bool complete = true;
    for (EventId event : entry.events) {
      if (wait) {
        if (auto done = mapper_.wait_event(event); !done) {
          drained.failure = std::move(done).error();
          return drained;
        }
        continue;
      }
      // A query that fails proves nothing: the block stays pending, and a later wait decides.
      auto queried = mapper_.query_event(event);
      if (!queried || !*queried) {
        complete = false;
        break;
      }
    }
    if (!complete) {
      ++i;
      continue;
    }
    for (EventId event : entry.events) mapper_.recycle_event(event);
    entry.events.clear();
    drained.completed.push_back(std::move(entry));
    entries_[i] = std::move(entries_.back());
    entries_.pop_back();
  }
  return drained;
}

bool PendingFrees::waits(const Block* block) const {
  return std::any_of(entries_.begin(), entries_.end(), [&](const Entry& entry) { return entry.block == block; });
}

std::vector<StreamId> PendingFrees::user_streams() const {
  std::vector<StreamId> streams;
  for (const auto& [block, users] : users_) streams.insert(streams.end(), users.begin(), users.end());
  return streams;
}

std::vector<EventId> PendingFrees::all_events() const {
  std::vector<EventId> events;
  for (const Entry& entry : entries_) events.insert(events.end(), entry.events.begin(), entry.events.end());
  return events;
}

}  // namespace tessera::core
