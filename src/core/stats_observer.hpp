// Statistics in PyTorch's vocabulary plus Tessera's own, computed from the observer's events only. The live
// bytes and their peaks are the usage observer's (usage_observer.hpp), which counts every block event anyway:
// Observers::stats() puts them in.
#pragma once

#include <algorithm>

#include "tessera/allocator.hpp"

namespace tessera::core {

class StatsObserver final : public AllocatorObserver {
 public:
  void chunks_created(std::uint64_t count, Bytes bytes) override {
    AllocatorStats& common = stats_.common;
    common.num_device_alloc += count;
    common.reserved_bytes += bytes;
    stats_.pooled_bytes += bytes;
    common.peak_reserved_bytes = std::max(common.peak_reserved_bytes, common.reserved_bytes);
  }
  void chunks_released(std::uint64_t count, Bytes bytes) override {
    stats_.common.num_device_free += count;
    stats_.common.reserved_bytes -= bytes;
    stats_.pooled_bytes -= bytes;
  }
  void pages_mapped(std::span<const PageMapping> mappings) override {
    const Bytes bytes = bytes_of(mappings);
    stats_.pages_mapped += mappings.size();
    stats_.mapped_bytes += bytes;
    stats_.pooled_bytes -= bytes;
  }
  void pages_unmapped(std::span<const PageMapping> mappings) override {
    const Bytes bytes = bytes_of(mappings);
    stats_.pages_unmapped += mappings.size();
    stats_.mapped_bytes -= bytes;
    stats_.pooled_bytes += bytes;
  }
  void stitched(std::uint64_t pages) override {
    stats_.stitches += 1;
    stats_.pages_stitched += pages;
  }
  void shared(std::uint64_t slivers) override {
    stats_.shared_blocks += 1;
    stats_.slivers_shared += slivers;
  }
  void slivers_mapped(std::span<const SliverMapping> slivers) override {
    stats_.sliver_mappings += slivers.size();
    for (const SliverMapping& sliver : slivers) stats_.sliver_mapped_bytes += sliver.size;
  }
  void slivers_unmapped(std::span<const SliverMapping> slivers) override {
    stats_.sliver_mappings -= slivers.size();
    for (const SliverMapping& sliver : slivers) stats_.sliver_mapped_bytes -= sliver.size;
  }
  void reclaimed(std::uint64_t pages) override { stats_.pages_reclaimed += pages; }
  void synchronized(bool whole_device) override {
    stats_.syncs += 1;
    if (whole_device) stats_.common.num_sync_all_streams += 1;
  }
  void alloc_retried() override { stats_.common.num_alloc_retries += 1; }
  void out_of_memory(Bytes) override { stats_.common.num_ooms += 1; }
  void tag_paused(TagId, Bytes, Bytes) override { stats_.pauses += 1; }
  void tag_resumed(TagId, Bytes) override { stats_.resumes += 1; }

  const TesseraStats& stats() const noexcept { return stats_; }  // less the live bytes

 private:
  static Bytes bytes_of(std::span<const PageMapping> mappings) {
    Bytes bytes = 0;
    for (const PageMapping& mapping : mappings) bytes += mapping.size;
    return bytes;
  }

  TesseraStats stats_;
};

}  // namespace tessera::core
