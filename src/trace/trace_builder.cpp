#include "trace/trace_builder.hpp"

#include <limits>

namespace tessera::trace_detail {

std::uint32_t TraceBuilder::stream(StreamId platform_stream) {
  const auto key = static_cast<std::uintptr_t>(platform_stream);
  const auto [it, inserted] = stream_index_.try_emplace(key, static_cast<std::uint32_t>(streams_.size()));
  if (inserted) streams_.push_back(platform_stream);
  return it->second;
}

TraceBuilder::Status TraceBuilder::new_block(std::uint64_t key, std::uint64_t size, std::uint32_t stream,
                                             BlockId& id) {
  if (live_.contains(key)) return Status::already_live;
  if (size == 0) return Status::zero_size;
  if (blocks_.size() >= std::numeric_limits<BlockId>::max()) return Status::too_many;
  id = static_cast<BlockId>(blocks_.size());
  blocks_.push_back(Block{size, stream});
  live_.emplace(key, id);
  seen_.insert(key);
  return Status::ok;
}

TraceBuilder::Status TraceBuilder::alloc(std::uint64_t key, std::uint64_t size, std::uint32_t stream,
                                         std::int64_t time_us, TraceTag tag) {
  BlockId id = 0;
  const Status status = new_block(key, size, stream, id);
  if (status == Status::ok) events_.push_back(TraceEvent::tagged_alloc(id, size, stream, tag, time_us));
  return status;
}

TraceBuilder::Status TraceBuilder::free(std::uint64_t key, std::int64_t time_us) {
  const auto it = live_.find(key);
  if (it == live_.end()) return Status::not_live;
  const Block& block = blocks_[it->second];
  events_.push_back(TraceEvent::free(it->second, block.size, block.stream, time_us));
  live_.erase(it);
  return Status::ok;
}

TraceBuilder::Status TraceBuilder::declare_initial(std::uint64_t key, std::uint64_t size, std::uint32_t stream) {
  if (live_.contains(key)) return Status::already_live;
  if (seen_.contains(key)) return Status::seen_before;
  BlockId id = 0;
  const Status status = new_block(key, size, stream, id);
  if (status == Status::ok) initial_.push_back(id);
  return status;
}

void TraceBuilder::iteration(std::uint64_t index, std::int64_t time_us) {
  events_.push_back(TraceEvent::iteration(index, time_us));
}

void TraceBuilder::pause(TraceTag tag, bool backup, std::int64_t time_us) {
  events_.push_back(TraceEvent::pause(tag, backup, time_us));
}

void TraceBuilder::resume(TraceTag tag, std::int64_t time_us) { events_.push_back(TraceEvent::resume(tag, time_us)); }

TraceBuilder::Status TraceBuilder::record_stream(std::uint64_t key, std::uint32_t stream, std::int64_t time_us) {
  const auto it = live_.find(key);
  if (it == live_.end()) return Status::not_live;
  events_.push_back(TraceEvent::record_stream(it->second, stream, time_us));
  return Status::ok;
}

void TraceBuilder::pool_event(const TraceEvent& event) { events_.push_back(event); }

void TraceBuilder::stack_of_last_event(std::uint32_t stack) {
  if (events_.empty()) return;
  event_stacks_.resize(events_.size(), 0);
  event_stacks_.back() = stack;
}

void TraceBuilder::stack_of_last_initial(std::uint32_t stack) {
  if (initial_.empty()) return;
  initial_stacks_.resize(initial_.size(), 0);
  initial_stacks_.back() = stack;
}

Trace TraceBuilder::finish(std::string name, std::string device) {
  // Renumber: initial blocks first, so that a replay creates blocks 0..k-1 before the first event.
  constexpr BlockId unassigned = std::numeric_limits<BlockId>::max();
  std::vector<BlockId> final_id(blocks_.size(), unassigned);
  BlockId next = 0;
  Trace trace;
  trace.initial_blocks.reserve(initial_.size());
  for (const BlockId provisional : initial_) {
    final_id[provisional] = next;
    const Block& block = blocks_[provisional];
    trace.initial_blocks.push_back(InitialBlock{next, block.size, block.stream});
    ++next;
  }
  for (BlockId& id : final_id) {
    if (id == unassigned) id = next++;
  }
  for (TraceEvent& event : events_) {
    if (event.kind == TraceEventKind::alloc || event.kind == TraceEventKind::free ||
        event.kind == TraceEventKind::record_stream) {
      event.block = final_id[event.block];
    }
  }
  trace.name = std::move(name);
  trace.device = std::move(device);
  trace.streams = std::move(streams_);
  trace.events = std::move(events_);
  trace.block_count = next;
  if (!event_stacks_.empty() || !initial_stacks_.empty()) {
    event_stacks_.resize(trace.events.size(), 0);
    initial_stacks_.resize(trace.initial_blocks.size(), 0);
    trace.event_stacks = std::move(event_stacks_);
    trace.initial_stacks = std::move(initial_stacks_);
  }
  return trace;
}

}  // namespace tessera::trace_detail
