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

void HistoryRecorder::set_next_stack(std::shared_ptr<const Stack> stack) {
  next_stack_ = 0;
  if (capacity_ == 0 || stack == nullptr || stack->empty()) return;
  if (stacks_.empty()) stacks_.push_back(nullptr);
  const auto [it, added] = stack_ids_.try_emplace(stack.get(), static_cast<std::uint32_t>(stacks_.size()));
  if (added) stacks_.push_back(std::move(stack));
  next_stack_ = it->second;
}

void HistoryRecorder::push_block(const BlockEvent& block, Kind kind) {
  flush_pooled();
  push({block.address, block.requested, block.stream, now_us(), kind, kind == Kind::alloc ? next_stack_ : 0});
}

void HistoryRecorder::flush_pooled() {
  if (pooled_delta_ == 0) return;
  const Kind kind = pooled_delta_ > 0 ? Kind::pooled : Kind::unpooled;
  const auto bytes = static_cast<Bytes>(pooled_delta_ > 0 ? pooled_delta_ : -pooled_delta_);
  pooled_delta_ = 0;
  push({0, bytes, StreamId{}, 0, kind, 0});
}

void HistoryRecorder::pages_mapped(std::span<const PageMapping> mappings) {
  if (capacity_ == 0) return;
  for (const PageMapping& mapping : mappings) {
    push({mapping.address, mapping.size, StreamId{}, 0, Kind::map, 0});
    pooled_delta_ -= static_cast<std::int64_t>(mapping.size);
  }
}

void HistoryRecorder::pages_unmapped(std::span<const PageMapping> mappings) {
  if (capacity_ == 0) return;
  for (const PageMapping& mapping : mappings) {
    push({mapping.address, mapping.size, StreamId{}, 0, Kind::unmap, 0});
    pooled_delta_ += static_cast<std::int64_t>(mapping.size);
  }
}

void HistoryRecorder::slivers_mapped(std::span<const SliverMapping> slivers) {
  if (capacity_ == 0) return;
  for (const SliverMapping& sliver : slivers) {
    push({sliver.home, sliver.used, StreamId{}, 0, Kind::unmap, 0});
    push({sliver.used_at, sliver.used, StreamId{}, 0, Kind::map, 0});
  }
}

void HistoryRecorder::slivers_unmapped(std::span<const SliverMapping> slivers) {
  if (capacity_ == 0) return;
  for (const SliverMapping& sliver : slivers) {
    push({sliver.used_at, sliver.used, StreamId{}, 0, Kind::unmap, 0});
    push({sliver.home, sliver.used, StreamId{}, 0, Kind::map, 0});
  }
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
    if (entry.kind == Kind::alloc) {
      live_in_window[entry.address] = i;
      continue;
    }
    if (entry.kind != Kind::free) continue;
    auto found = live_in_window.find(entry.address);
    if (found == live_in_window.end()) {
      initial_of[i] = freed_before.size();
      freed_before.push_back({entry.address, entry.size, entry.stream});
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
  bool any_stack = false;
  for (std::size_t i = 0; i < ring_.size(); ++i) {
    const Entry& entry = at(i);
    switch (entry.kind) {
      case Kind::alloc: {
        id_of_alloc[i] = new_block(entry.address);
        trace.events.push_back(TraceEvent::alloc(id_of_alloc[i], entry.size, stream_of(entry.stream), entry.time_us));
        history.event_stacks.push_back(entry.stack);
        any_stack = any_stack || entry.stack != 0;
        break;
      }
      case Kind::free: {
        const BlockId id = initial_of[i] != SIZE_MAX ? static_cast<BlockId>(initial_of[i]) : id_of_alloc[alloc_of[i]];
        trace.events.push_back(TraceEvent::free(id, entry.size, stream_of(entry.stream), entry.time_us));
        history.event_stacks.push_back(0);
        break;
      }
      case Kind::map:
      case Kind::unmap:
      case Kind::pooled:
      case Kind::unpooled: {
        // Before the next event: a free's unmapping comes after it, an alloc's mapping before it.
        static constexpr SegmentChange::Kind kinds[] = {SegmentChange::Kind::map, SegmentChange::Kind::unmap,
                                                        SegmentChange::Kind::pooled, SegmentChange::Kind::unpooled};
        const SegmentChange::Kind kind = kinds[static_cast<int>(entry.kind) - static_cast<int>(Kind::map)];
        history.segment_changes.push_back({kind, entry.address, entry.size, entry.stream, trace.events.size()});
        break;
      }
    }
  }
  if (pooled_delta_ != 0) {  // since the last block entry
    history.segment_changes.push_back({pooled_delta_ > 0 ? SegmentChange::Kind::pooled : SegmentChange::Kind::unpooled,
                                       0, static_cast<Bytes>(pooled_delta_ > 0 ? pooled_delta_ : -pooled_delta_),
                                       StreamId{}, trace.events.size()});
  }
  if (any_stack) {
    for (const auto& stack : stacks_) history.stacks.push_back(stack != nullptr ? *stack : Stack{});
  } else {
    history.event_stacks.clear();
  }
  trace.block_count = static_cast<BlockId>(history.addresses.size());
  history.state = std::move(state);
  history.dropped_events = dropped_;
  return history;
}

}  // namespace tessera::core
