// What an allocator did to its device memory during a replay, as the snapshot's segment changes
// (SegmentChange), each placed between the trace's events: from Tessera's allocator through its observer,
// from the baseline models through their segment observer. Collected only when the replay keeps its state
// (--snapshot); otherwise the replay makes no log.
#pragma once

#include <vector>

#include "tessera/allocator_observer.hpp"
#include "tessera/baselines.hpp"
#include "tessera/snapshot.hpp"

namespace tessera::replay_detail {

class SegmentLog final : public AllocatorObserver {
 public:
  // The changes from now on come before trace event `before_event` (after the last: the event count).
  void set_place(std::size_t before_event) noexcept { place_ = before_event; }

  // For BaselineOptions::on_segment; the log must outlive the model.
  SegmentObserver baseline_observer();

  // Tessera's pages: made and given back change the pooled bytes, mapped and unmapped move them to and from
  // an address.
  void chunks_created(std::uint64_t count, Bytes bytes) override;
  void chunks_released(std::uint64_t count, Bytes bytes) override;
  void pages_mapped(std::span<const PageMapping> mappings) override;
  void pages_unmapped(std::span<const PageMapping> mappings) override;
  // A sliver's bytes move from its home to the shared block that uses them, and back: each physical byte is
  // shown once, where it is used.
  void slivers_mapped(std::span<const SliverMapping> slivers) override;
  void slivers_unmapped(std::span<const SliverMapping> slivers) override;

  std::size_t size() const noexcept { return changes_.size(); }
  std::vector<SegmentChange> take() { return std::move(changes_); }

 private:
  void add(SegmentChange::Kind kind, Address address, Bytes size, StreamId stream = {}) {
    changes_.push_back({kind, address, size, stream, place_});
  }

  std::vector<SegmentChange> changes_;
  std::size_t place_ = 0;
};

}  // namespace tessera::replay_detail
