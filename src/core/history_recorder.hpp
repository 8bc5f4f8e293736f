// The allocation history: a ring of the newest allocs and frees, and of the pages mapped, unmapped and pooled
// between them, fed by the observer like the statistics, turned into a trace (with the addresses the blocks
// had) and segment changes when someone asks for it. An alloc may carry the stack that made it.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "tessera/allocator.hpp"

namespace tessera::core {

class HistoryRecorder final : public AllocatorObserver {
 public:
  // 0 stops recording and forgets; otherwise keeps the newest `max_events` of what is kept.
  void resize(std::size_t max_events);
  bool recording() const noexcept { return capacity_ != 0; }

  // The stack the next recorded alloc files (taken on the allocating thread before the allocator's lock; empty:
  // none); clear_next_stack() drops it when capturing stops.
  void set_next_stack(std::shared_ptr<const Stack> stack);
  void clear_next_stack() noexcept { next_stack_ = 0; }

  void block_allocated(const BlockEvent& block) override {
    if (capacity_ != 0) push_block(block, Kind::alloc);
    next_stack_ = 0;
  }
  void block_freed(const BlockEvent& block) override {
    if (capacity_ != 0) push_block(block, Kind::free);
  }
  // Pages made and given back change the pooled bytes; mappings move bytes between the pool and an address.
  void chunks_created(std::uint64_t /*count*/, Bytes bytes) override {
    if (capacity_ != 0) pooled_delta_ += static_cast<std::int64_t>(bytes);
  }
  void chunks_released(std::uint64_t /*count*/, Bytes bytes) override {
    if (capacity_ != 0) pooled_delta_ -= static_cast<std::int64_t>(bytes);
  }
  void pages_mapped(std::span<const PageMapping> mappings) override;
  void pages_unmapped(std::span<const PageMapping> mappings) override;
  // A sliver's bytes move from its home to the shared block that uses them, and back.
  void slivers_mapped(std::span<const SliverMapping> slivers) override;
  void slivers_unmapped(std::span<const SliverMapping> slivers) override;

  // The recorded window as a trace and segment changes; `state` (taken at the same moment) supplies the
  // blocks allocated before the window and still live.
  AllocationHistory build(AllocatorSnapshot state) const;

 private:
  enum class Kind : std::uint8_t { alloc, free, map, unmap, pooled, unpooled };
  struct Entry {
    Address address;
    Bytes size;  // alloc, free: requested bytes
    StreamId stream;
    std::int64_t time_us;
    Kind kind;
    std::uint32_t stack;  // alloc: index into stacks_ (0: none)
  };

  static std::int64_t now_us();
  void push_block(const BlockEvent& block, Kind kind);
  void flush_pooled();  // the pooled bytes gained or lost since the last block entry, as one entry
  void push(const Entry& entry);
  const Entry& at(std::size_t index) const { return ring_[(first_ + index) % ring_.size()]; }

  std::vector<Entry> ring_;  // grows up to capacity_, then wraps
  std::size_t capacity_ = 0;
  std::size_t first_ = 0;    // the oldest entry, once the ring is full
  std::size_t dropped_ = 0;
  std::int64_t pooled_delta_ = 0;
  // Each stack object once (a capture hands out one object per distinct stack): allocations in a loop share
  // theirs. stacks_[0] is none.
  std::unordered_map<const Stack*, std::uint32_t> stack_ids_;
  std::vector<std::shared_ptr<const Stack>> stacks_;
  std::uint32_t next_stack_ = 0;
};

}  // namespace tessera::core
