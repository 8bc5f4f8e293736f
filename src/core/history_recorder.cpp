#include "core/history_recorder.hpp"

#include <chrono>
#include <unordered_map>

namespace tessera::core {

std::int64_t HistoryRecorder::now_us() {
  using namespace std::chrono;
  return duration_cast<microseconds>(system_clock::now().time_since_epoch()).count();
}

void HistoryRecorder::resize(std::size_t max_events) {
  if (max_events == 0) {
    *this = HistoryRecorder{};
    return;
  }
  // Unroll into oldest-first order, keep the newest max_events.
  std::vector<Entry> ordered;
  ordered.reserve(std::min(ring_.size(), max_events));
  const std::size_t skip = ring_.size() > max_events ? ring_.size() - max_events : 0;
  for (std::size_t i = skip; i < ring_.size(); ++i) ordered.push_back(at(i));
  dropped_ += skip;
  ring_ = std::move(ordered);
  first_ = 0;
  capacity_ = max_events;
}

void HistoryRecorder::push(const Entry& entry) {
  if (ring_.size() < capacity_) {
    ring_.push_back(entry);
    return;
  }
  ring_[first_] = entry;
  first_ = (first_ + 1) % ring_.size();
  ++dropped_;
}

AllocationHistory HistoryRecorder::build(AllocatorSnapshot state) const {
  // Pass 1: which frees name blocks allocated before the window, and which blocks the window allocates.
  struct Lifetime {
    Address address;
    Bytes requested;
    StreamId stream;
  };
  std::vector<Lifetime> freed_before;         // initial blocks freed in the window, in order of their frees
  std::vector<std::size_t> initial_of(ring_.size(), SIZE_MAX);  // entry index -> position in freed_before
  std::unordered_map<Address, std::size_t> live_in_window;      // address -> entry index of its alloc
  std::vector<std::size_t> alloc_of(ring_.size(), SIZE_MAX);    // free entry -> its alloc entry
  for (std::size_t i = 0; i < ring_.size(); ++i) {
    const Entry& entry = at(i);
    if (entry.alloc) {
      live_in_window[entry.address] = i;
      continue;
    }
    auto found = live_in_window.find(entry.address);
    if (found == live_in_window.end()) {
      initial_of[i] = freed_before.size();
      freed_before.push_back({entry.address, entry.requested, entry.stream});
    } else {
      alloc_of[i] = found->second;
      live_in_window.erase(found);
    }
  }
  std::vector<Lifetime> live_before;  // initial blocks never freed: live in the state, not allocated in the window
  for (const SnapshotSegment& segment : state.segments) {
    for (const SnapshotBlock& block : segment.blocks) {
      if (block.state != SnapshotBlock::State::active_allocated || block.lent_to != 0 ||
          live_in_window.contains(block.address)) {
        continue;  // a lent sliver is part of the shared block that holds it, not an allocation
      }
      live_before.push_back({block.address, block.requested, segment.stream});
    }
  }

  // Pass 2: number the blocks in the reader's order (initial freed, initial live, then by alloc).
  AllocationHistory history;
  Trace& trace = history.trace;
  std::unordered_map<std::uintptr_t, std::uint32_t> stream_index;
  auto stream_of = [&](StreamId stream) {
    auto [it, added] = stream_index.try_emplace(static_cast<std::uintptr_t>(stream),
                                                static_cast<std::uint32_t>(trace.streams.size()));
    if (added) trace.streams.push_back(stream);
    return it->second;
  };
  auto new_block = [&](Address address) {
    history.addresses.push_back(address);
    return static_cast<BlockId>(history.addresses.size() - 1);
  };
  for (const Lifetime& block : freed_before) {
    trace.initial_blocks.push_back({new_block(block.address), block.requested, stream_of(block.stream)});
  }
  for (const Lifetime& block : live_before) {
    trace.initial_blocks.push_back({new_block(block.address), block.requested, stream_of(block.stream)});
  }
  std::vector<BlockId> id_of_alloc(ring_.size(), 0);
  trace.events.reserve(ring_.size());
  for (std::size_t i = 0; i < ring_.size(); ++i) {
    const Entry& entry = at(i);
    const std::uint32_t stream = stream_of(entry.stream);
    if (entry.alloc) {
      id_of_alloc[i] = new_block(entry.address);
      trace.events.push_back(TraceEvent::alloc(id_of_alloc[i], entry.requested, stream, entry.time_us));
    } else {
      const BlockId id = initial_of[i] != SIZE_MAX ? static_cast<BlockId>(initial_of[i]) : id_of_alloc[alloc_of[i]];
      trace.events.push_back(TraceEvent::free(id, entry.requested, stream, entry.time_us));
    }
  }
  trace.block_count = static_cast<BlockId>(history.addresses.size());
  history.state = std::move(state);
  history.dropped_events = dropped_;
  return history;
}

}  // namespace tessera::core
