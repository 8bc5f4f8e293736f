// Streams for drivers without a device (host, sim). Work "submitted" to a stream completes at once unless
// a test holds the stream; then every event recorded on it stays pending until complete() or a
// synchronize call (waiting on simulated work is what finishes it).
#pragma once

#include <cstdint>
#include <unordered_map>

#include "driver/platform_driver.hpp"

namespace tessera::detail {

class SimulatedStreams final : public StreamControl {
 public:
  void hold(StreamId stream) override;
  void complete(StreamId stream) override;

  PlatformHandle create_event();
  void record(PlatformHandle event, StreamId stream);
  bool query(PlatformHandle event) const;
  void synchronize_event(PlatformHandle event);
  void destroy_event(PlatformHandle event);
  void synchronize_stream(StreamId stream);
  void synchronize_all();

 private:
  struct StreamState {
    std::uint64_t submitted = 0;
    std::uint64_t completed = 0;
    bool held = false;
  };
  struct EventState {
    StreamId stream{};
    std::uint64_t ticket = 0;  // 0: never recorded, which counts as complete (as cudaEventQuery does)
  };

  std::unordered_map<std::uintptr_t, StreamState> streams_;
  std::unordered_map<PlatformHandle, EventState> events_;
  PlatformHandle next_event_ = 1;
};

}  // namespace tessera::detail
