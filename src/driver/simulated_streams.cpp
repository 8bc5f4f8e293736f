#include "driver/simulated_streams.hpp"

namespace tessera::detail {

namespace {
std::uintptr_t key(StreamId stream) { return static_cast<std::uintptr_t>(stream); }
}  // namespace

void SimulatedStreams::hold(StreamId stream) { streams_[key(stream)].held = true; }

void SimulatedStreams::complete(StreamId stream) {
  StreamState& state = streams_[key(stream)];
  state.held = false;
  state.completed = state.submitted;
}

PlatformHandle SimulatedStreams::create_event() {
  const PlatformHandle event = next_event_++;
  events_.emplace(event, EventState{});
  return event;
}

void SimulatedStreams::record(PlatformHandle event, StreamId stream) {
  StreamState& state = streams_[key(stream)];
  state.submitted += 1;
  if (!state.held) state.completed = state.submitted;
  events_[event] = EventState{stream, state.submitted};
}

bool SimulatedStreams::query(PlatformHandle event) const {
  const EventState& recorded = events_.at(event);
  if (recorded.ticket == 0) return true;
  auto stream = streams_.find(key(recorded.stream));
  return stream->second.completed >= recorded.ticket;
}

void SimulatedStreams::synchronize_event(PlatformHandle event) {
  const EventState& recorded = events_.at(event);
  if (recorded.ticket == 0) return;
  StreamState& state = streams_[key(recorded.stream)];
  if (state.completed < recorded.ticket) state.completed = recorded.ticket;
}

void SimulatedStreams::destroy_event(PlatformHandle event) { events_.erase(event); }

void SimulatedStreams::synchronize_stream(StreamId stream) {
  StreamState& state = streams_[key(stream)];
  state.completed = state.submitted;
}

void SimulatedStreams::synchronize_all() {
  for (auto& [unused, state] : streams_) state.completed = state.submitted;
}

}  // namespace tessera::detail
