#include "workload/emitter.hpp"

#include <fmt/format.h>

namespace tessera::workload {

Emitter::Emitter(std::string name, std::vector<StreamId> streams, std::size_t event_limit)
    : event_limit_(event_limit) {
  trace_.name = std::move(name);
  trace_.device = "generated";
  trace_.streams = std::move(streams);
}

Handle Emitter::alloc(Bytes size, std::uint32_t stream, TraceTag tag) {
  if (size == 0 || full_) return no_block;
  if (trace_.events.size() >= event_limit_ || size_.size() >= no_block) {
    full_ = true;
    return no_block;
  }
  const auto id = static_cast<Handle>(size_.size());
  size_.push_back(size);
  stream_.push_back(stream);
  live_.push_back(true);
  live_bytes_ += size;
  trace_.events.push_back(TraceEvent::tagged_alloc(id, size, stream, tag));
  return id;
}

void Emitter::free(Handle block) {
  if (block == no_block || full_) return;
  if (block >= live_.size() || !live_[block]) {
    if (bug_.empty()) bug_ = fmt::format("block {} is freed but not live (event {})", block, trace_.events.size());
    return;
  }
  if (trace_.events.size() >= event_limit_) {
    full_ = true;
    return;
  }
  live_[block] = false;
  live_bytes_ -= size_[block];
  trace_.events.push_back(TraceEvent::free(block, size_[block], stream_[block]));
}

void Emitter::record_stream(Handle block, std::uint32_t stream) {
  if (block == no_block || full_) return;
  if (block >= live_.size() || !live_[block]) {
    if (bug_.empty()) bug_ = fmt::format("block {} is recorded on a stream but not live (event {})", block, trace_.events.size());
    return;
  }
  if (room_for_one()) trace_.events.push_back(TraceEvent::record_stream(block, stream));
}

void Emitter::iteration(std::uint64_t index) {
  if (full_) return;
  if (trace_.events.size() >= event_limit_) {
    full_ = true;
    return;
  }
  trace_.events.push_back(TraceEvent::iteration(index));
}

bool Emitter::room_for_one() {
  if (full_) return false;
  if (trace_.events.size() >= event_limit_) full_ = true;
  return !full_;
}

TraceTag Emitter::tag(std::string_view name) {
  for (std::size_t t = 0; t < trace_.tags.size(); ++t) {
    if (trace_.tags[t] == name) return static_cast<TraceTag>(t);
  }
  trace_.tags.emplace_back(name);
  return static_cast<TraceTag>(trace_.tags.size() - 1);
}

void Emitter::pause(TraceTag tag, bool backup) {
  if (room_for_one()) trace_.events.push_back(TraceEvent::pause(tag, backup));
}

void Emitter::resume(TraceTag tag) {
  if (room_for_one()) trace_.events.push_back(TraceEvent::resume(tag));
}

std::uint32_t Emitter::pool(PoolId id, PoolKind kind) {
  for (std::size_t p = 0; p < trace_.pools.size(); ++p) {
    if (trace_.pools[p].id == id) return static_cast<std::uint32_t>(p);
  }
  trace_.pools.push_back({id, kind});
  return static_cast<std::uint32_t>(trace_.pools.size() - 1);
}

void Emitter::begin_pool(std::uint32_t pool, std::uint32_t stream) {
  if (room_for_one()) trace_.events.push_back(TraceEvent::begin_pool(pool, stream));
}

void Emitter::end_pool(std::uint32_t pool) {
  if (room_for_one()) trace_.events.push_back(TraceEvent::end_pool(pool));
}

void Emitter::release_pool(std::uint32_t pool) {
  if (room_for_one()) trace_.events.push_back(TraceEvent::release_pool(pool));
}

Result<Trace> Emitter::finish(std::string_view what_to_lower) && {
  if (!bug_.empty()) return make_error(Errc::platform, fmt::format("workload {}: internal error: {}", trace_.name, bug_));
  if (full_) {
    return make_error(Errc::invalid_argument,
                      fmt::format("workload {}: the trace would exceed {} events; lower {}", trace_.name,
                                  event_limit_, what_to_lower));
  }
  trace_.block_count = static_cast<BlockId>(size_.size());
  return std::move(trace_);
}

}  // namespace tessera::workload
