#include "replay/segment_log.hpp"

namespace tessera::replay_detail {

SegmentObserver SegmentLog::baseline_observer() {
  return [this](const SegmentEvent& event) {
    switch (event.kind) {
      case SegmentEvent::Kind::alloc: add(SegmentChange::Kind::alloc, event.address, event.size, event.stream); break;
      case SegmentEvent::Kind::free: add(SegmentChange::Kind::free, event.address, event.size, event.stream); break;
      case SegmentEvent::Kind::map: add(SegmentChange::Kind::map, event.address, event.size, event.stream); break;
      case SegmentEvent::Kind::unmap: add(SegmentChange::Kind::unmap, event.address, event.size, event.stream); break;
    }
  };
}

void SegmentLog::chunks_created(std::uint64_t /*count*/, Bytes bytes) { add(SegmentChange::Kind::pooled, 0, bytes); }

void SegmentLog::chunks_released(std::uint64_t /*count*/, Bytes bytes) { add(SegmentChange::Kind::unpooled, 0, bytes); }

// The stream is the region's; the snapshot writer takes it from the allocator's state.
void SegmentLog::pages_mapped(std::span<const PageMapping> mappings) {
  for (const PageMapping& mapping : mappings) {
    add(SegmentChange::Kind::unpooled, 0, mapping.size);
    add(SegmentChange::Kind::map, mapping.address, mapping.size);
  }
}

void SegmentLog::pages_unmapped(std::span<const PageMapping> mappings) {
  for (const PageMapping& mapping : mappings) {
    add(SegmentChange::Kind::unmap, mapping.address, mapping.size);
    add(SegmentChange::Kind::pooled, 0, mapping.size);
  }
}

void SegmentLog::slivers_mapped(std::span<const SliverMapping> slivers) {
  for (const SliverMapping& sliver : slivers) {
    add(SegmentChange::Kind::unmap, sliver.home, sliver.used);
    add(SegmentChange::Kind::map, sliver.used_at, sliver.used);
  }
}

void SegmentLog::slivers_unmapped(std::span<const SliverMapping> slivers) {
  for (const SliverMapping& sliver : slivers) {
    add(SegmentChange::Kind::unmap, sliver.used_at, sliver.used);
    add(SegmentChange::Kind::map, sliver.home, sliver.used);
  }
}

}  // namespace tessera::replay_detail
