// The allocation history: a ring of the newest allocs and frees, fed by the observer like the statistics,
// turned into a trace (with the addresses the blocks had) when someone asks for it.
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/allocator.hpp"

namespace tessera::core {

class HistoryRecorder final : public AllocatorObserver {
 public:
  // 0 stops recording and forgets; otherwise keeps the newest `max_events` of what is kept.
  void resize(std::size_t max_events);

  void block_allocated(const BlockEvent& block) override {
    if (capacity_ != 0) push({block.address, block.requested, block.stream, now_us(), true});
  }
  void block_freed(const BlockEvent& block) override {
    if (capacity_ != 0) push({block.address, block.requested, block.stream, now_us(), false});
  }

  // The recorded window as a trace; `state` (taken at the same moment) supplies the blocks allocated
  // before the window and still live.
  AllocationHistory build(AllocatorSnapshot state) const;

 private:
  struct Entry {
    Address address;
    Bytes requested;
    StreamId stream;
    std::int64_t time_us;
    bool alloc;
  };

  static std::int64_t now_us();
  void push(const Entry& entry);
  const Entry& at(std::size_t index) const { return ring_[(first_ + index) % ring_.size()]; }

  std::vector<Entry> ring_;  // grows up to capacity_, then wraps
  std::size_t capacity_ = 0;
  std::size_t first_ = 0;    // the oldest entry, once the ring is full
  std::size_t dropped_ = 0;
};

}  // namespace tessera::core
