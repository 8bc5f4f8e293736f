// "memory-saver": a model of how RL frameworks pause memory today, torch_memory_saver and vLLM's
// CuMemAllocator (sleep mode). An allocation made under a tag other than "default" gets its own physical
// handle: a virtual range reserved for it, one page of its size rounded up to the granularity created and
// mapped there, access set (reserve, create, map, set_access: four driver calls per allocation, and four to
// give it back: unmap, release_chunk, release_reservation, after a stream synchronization). pause(tag)
// synchronizes the device, then for each live allocation of the tag copies it to a host buffer where
// backup was asked, unmaps it and releases its page; the range stays reserved, so the address survives.
// resume(tag) creates a page for each again, maps it at the same address, sets access, and copies the
// backup back. Untagged memory goes through the PyTorch caching allocator's model with expandable segments
// off, as both tools require (they refuse to work, or free nothing, with expandable segments on).
//
// A tagged allocation or a resume that finds no memory first gives the untagged model's cached segments
// back and tries once more: PyTorch's out-of-memory path frees cached blocks before it fails, and the RL
// frameworks call torch.cuda.empty_cache() before they wake the engine. Out of memory after that is an
// answer here (the allocations resumed so far stay resumed, the others paused with their backups);
// torch_memory_saver itself aborts the process.
//
// Private pools (CUDA graphs): torch_memory_saver has none of its own. It replaces cudaMalloc and cudaFree
// under PyTorch's caching allocator, which keeps the graphs' private pools above it (its cuda_graph helper
// only opens a region around torch.cuda.graph), so a graph's freed memory stays in PyTorch's pool. The hooks
// go to the untagged model, PyTorch's rules. A tagged allocation keeps its own handle even while a pool is
// active: its free gives the handle back, which no other allocation can reuse, so the graph's memory stays
// apart; that it is not kept for the graph favours the model (docs/baselines.md, "Private pools").
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "baselines/device_memory.hpp"
#include "baselines/models.hpp"
#include "tessera/tags.hpp"

namespace tessera::baselines {
namespace {

// The untagged model's errors name it ("pytorch: ..."); a caller of this allocator must read its own name.
Error as_own(Error error) {
  constexpr std::string_view inner = "pytorch: ";
  if (error.message.starts_with(inner)) error.message = "memory-saver: " + error.message.substr(inner.size());
  return error;
}

Result<void> as_own(Result<void> result) {
  if (result) return result;
  return as_own(std::move(result).error());
}

class MemorySaver final : public DeviceAllocator {
 public:
  MemorySaver(Driver& driver, std::unique_ptr<DeviceAllocator> untagged, SegmentObserver on_segment)
      : memory_(driver), untagged_(std::move(untagged)), on_segment_(std::move(on_segment)) {}

  ~MemorySaver() override {
    for (auto& [address, allocation] : tagged_) give_back(address, allocation);
  }

  std::string_view name() const noexcept override { return "memory-saver"; }

  Result<void> empty_cache() override { return untagged_->empty_cache(); }

  AllocatorStats stats() const override {
    AllocatorStats stats = untagged_->stats();
    stats.requested_bytes += tagged_requested_;
    stats.allocated_bytes += tagged_allocated_;
    stats.reserved_bytes += tagged_resident_;
    stats.num_device_alloc += device_allocs_;
    stats.num_device_free += device_frees_;
    // Peaks of the sums, as this model saw them after each of its own calls.
    stats.peak_requested_bytes = std::max(stats.peak_requested_bytes, peak_requested_);
    stats.peak_allocated_bytes = std::max(stats.peak_allocated_bytes, peak_allocated_);
    stats.peak_reserved_bytes = std::max(stats.peak_reserved_bytes, peak_reserved_);
    return stats;
  }

 protected:
  Result<Address> do_allocate(Bytes size, StreamId stream) override {
    const TagId tag = current_tag();
    if (tag == default_tag) {
      auto address = untagged_->allocate(size, stream);
      note_peaks();
      if (!address) return as_own(std::move(address).error());
      return address;
    }
    const Bytes rounded = align_up(size, memory_.granularity());
    auto base = memory_.reserve(rounded);
    if (!base) return std::move(base).error();
    ChunkId page{};
    if (auto mapped = map_page(*base, rounded, page); !mapped) {
      memory_.release_reservation(*base);
      return std::move(mapped).error();
    }
    tagged_.emplace(*base, Allocation{size, rounded, tag, stream, page, false, {}});
    notify(SegmentEvent::Kind::alloc, *base, rounded, stream);
    tagged_requested_ += size;
    tagged_allocated_ += rounded;
    tagged_resident_ += rounded;
    ++device_allocs_;
    note_peaks();
    return *base;
  }

  Result<void> do_deallocate(Address block) override {
    const auto found = tagged_.find(block);
    if (found == tagged_.end()) return as_own(untagged_->deallocate(block));
    Allocation& allocation = found->second;
    // The page goes back at once: wait for the work on its stream first.
    if (!allocation.paused) {
      if (auto synced = memory_.driver().synchronize_stream(allocation.stream); !synced) return synced;
    }
    tagged_requested_ -= allocation.size;
    tagged_allocated_ -= allocation.rounded;
    give_back(block, allocation);
    tagged_.erase(found);
    return {};
  }

  Result<void> do_begin_allocate_to_pool(PoolId pool, StreamFilter accepts, tessera::PoolKind kind) override {
    return as_own(untagged_->begin_allocate_to_pool(pool, std::move(accepts), kind));
  }
  Result<void> do_end_allocate_to_pool(PoolId pool) override { return as_own(untagged_->end_allocate_to_pool(pool)); }
  Result<void> do_release_pool(PoolId pool) override { return as_own(untagged_->release_pool(pool)); }

  Result<void> do_record_stream(Address block, StreamId stream) override {
    if (tagged_.contains(block)) return {};  // its frees synchronize the device's streams anyway
    return as_own(untagged_->record_stream(block, stream));
  }

  Result<void> do_pause(std::string_view tag_name, bool backup) override {
    const std::optional<TagId> tag = find_tag(tag_name);
    if (!tag) return {};  // nothing was ever allocated under it
    Driver& driver = memory_.driver();
    bool synced = false;
    for (auto& [address, allocation] : tagged_) {
      if (allocation.tag != *tag || allocation.paused) continue;
      if (!synced) {
        if (auto done = driver.synchronize_device(); !done) return done;
        synced = true;
      }
      if (backup) {
        auto buffer = driver.allocate_host(allocation.size);
        if (!buffer) return std::move(buffer).error();
        if (auto copied = driver.copy_to_host(*buffer, address, allocation.size); !copied) {
          (void)driver.free_host(*buffer);
          return copied;
        }
        allocation.backup = *buffer;
      }
      notify(SegmentEvent::Kind::free, address, allocation.rounded, allocation.stream);
      memory_.unmap_and_release(address, allocation.page, allocation.rounded);
      allocation.paused = true;
      tagged_resident_ -= allocation.rounded;
      ++device_frees_;
    }
    return {};
  }

  Result<void> do_resume(std::string_view tag_name) override {
    const std::optional<TagId> tag = find_tag(tag_name);
    if (!tag) return {};
    Driver& driver = memory_.driver();
    for (auto& [address, allocation] : tagged_) {
      if (allocation.tag != *tag || !allocation.paused) continue;
      ChunkId page{};
      if (auto mapped = map_page(address, allocation.rounded, page); !mapped) {
        if (mapped.error().code != Errc::out_of_memory) return mapped;
        return make_error(Errc::out_of_memory,
                          fmt::format("memory-saver: resume of tag '{}': no page of {} bytes for the block at {:#x}",
                                      tag_name, allocation.rounded, address));
      }
      allocation.page = page;
      allocation.paused = false;
      notify(SegmentEvent::Kind::alloc, address, allocation.rounded, allocation.stream);
      tagged_resident_ += allocation.rounded;
      ++device_allocs_;
      note_peaks();
      if (allocation.backup.id != 0) {
        if (auto copied = driver.copy_to_device(address, allocation.backup, allocation.size); !copied) return copied;
        (void)driver.free_host(allocation.backup);
        allocation.backup = {};
      }
    }
    return {};
  }

 private:
  struct Allocation {
    Bytes size = 0;
    Bytes rounded = 0;
    TagId tag = default_tag;
    StreamId stream{};
    ChunkId page{};
    bool paused = false;
    HostBuffer backup;
  };

  // One page of `size` mapped at `at` with access; on out of memory, once more after the untagged cache is
  // given back.
  Result<void> map_page(Address at, Bytes size, ChunkId& page) {
    auto mapped = memory_.create_and_map(at, size, AccessCalls::whole_range, std::span<ChunkId>(&page, 1));
    if (mapped || mapped.error().code != Errc::out_of_memory) return mapped;
    if (auto emptied = untagged_->empty_cache(); !emptied) return emptied;
    return memory_.create_and_map(at, size, AccessCalls::whole_range, std::span<ChunkId>(&page, 1));
  }

  // The page (unless paused), the backup, and the range.
  void give_back(Address address, Allocation& allocation) {
    if (!allocation.paused) {
      notify(SegmentEvent::Kind::free, address, allocation.rounded, allocation.stream);
      memory_.unmap_and_release(address, allocation.page, allocation.rounded);
      tagged_resident_ -= allocation.rounded;
      ++device_frees_;
    }
    if (allocation.backup.id != 0) (void)memory_.driver().free_host(allocation.backup);
    allocation.backup = {};
    memory_.release_reservation(address);
  }

  // A handle's page is a segment of its own to the observer: made and given back at allocation and free, and
  // at pause and resume too (the range stays reserved, but nothing is mapped in it while paused).
  void notify(SegmentEvent::Kind kind, Address address, Bytes size, StreamId stream) const {
    if (on_segment_) on_segment_(SegmentEvent{kind, address, size, stream, false});
  }

  void note_peaks() {
    const AllocatorStats untagged = untagged_->stats();
    peak_requested_ = std::max(peak_requested_, untagged.requested_bytes + tagged_requested_);
    peak_allocated_ = std::max(peak_allocated_, untagged.allocated_bytes + tagged_allocated_);
    peak_reserved_ = std::max(peak_reserved_, untagged.reserved_bytes + tagged_resident_);
  }

  DeviceMemory memory_;
  std::unique_ptr<DeviceAllocator> untagged_;
  SegmentObserver on_segment_;
  std::map<Address, Allocation> tagged_;  // by address: pause and resume walk it in a fixed order
  Bytes tagged_requested_ = 0;
  Bytes tagged_allocated_ = 0;
  Bytes tagged_resident_ = 0;  // pages of tagged allocations that are not paused
  Bytes peak_requested_ = 0;
  Bytes peak_allocated_ = 0;
  Bytes peak_reserved_ = 0;
  std::uint64_t device_allocs_ = 0;
  std::uint64_t device_frees_ = 0;
};

}  // namespace

Result<std::unique_ptr<DeviceAllocator>> make_memory_saver_model(Driver& driver, const BaselineOptions& options) {
  auto untagged = make_pytorch_caching_model(driver, options);
  if (!untagged) return std::move(untagged).error();
  return std::unique_ptr<DeviceAllocator>(std::make_unique<MemorySaver>(driver, std::move(untagged).value(), options.on_segment));
}

}  // namespace tessera::baselines
