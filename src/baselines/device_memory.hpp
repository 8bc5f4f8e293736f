// The baselines' only way to the device: virtual ranges, pages mapped under them, and a pool of events
// (PyTorch pools its events too). Every step that fails is undone; what the driver refuses to give back is
// kept as a leftover and retried later and at destruction, so that no page or reservation ever leaks.
#pragma once

#include <optional>
#include <span>
#include <vector>

#include "tessera/driver.hpp"

namespace tessera::baselines {

// How many set_access calls enable a fresh range: one over all of it (cuMemSetAccess over an expandable
// segment's new pages) or one per page (GMLake's per-chunk mapping).
enum class AccessCalls : std::uint8_t { whole_range, per_page };

class DeviceMemory {
 public:
  explicit DeviceMemory(Driver& driver);
  ~DeviceMemory();
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  Driver& driver() noexcept { return driver_; }
  Bytes granularity() const noexcept { return driver_.granularity(); }

  Result<Address> reserve(Bytes size);
  void release_reservation(Address base);  // a refusal becomes a leftover

  // Creates `pages.size()` pages of `page_size`, maps them side by side from `at` and enables access. On
  // any failure everything is undone and the error is the driver's (Errc::out_of_memory when a page could
  // not be created).
  Result<void> create_and_map(Address at, Bytes page_size, AccessCalls access, std::span<ChunkId> pages);
  // Maps pages that already exist side by side from `at` (a second mapping of each) and enables them.
  Result<void> map_existing(Address at, Bytes page_size, AccessCalls access, std::span<const ChunkId> pages);

  // Removes the mapping at `at`; a refusal becomes a leftover.
  void unmap(Address at);
  // Removes the mapping at `at` and releases its page; refusals become leftovers.
  void unmap_and_release(Address at, ChunkId chunk, Bytes page_size);

  // Page bytes still held only because the driver refused to let them go.
  Bytes leftover_bytes() const noexcept { return leftover_page_bytes_; }
  bool has_leftovers() const noexcept;
  // Tries again to give back every leftover; the first refusal is returned, the rest stay for later.
  Result<void> retry_leftovers();

  Result<EventId> acquire_event();
  void release_event(EventId event);  // back to the pool, not to the driver

 private:
  struct LeftoverPage {
    ChunkId page;
    Bytes size;
  };

  Driver& driver_;
  std::vector<EventId> events_;
  std::vector<Address> leftover_mappings_;
  std::vector<LeftoverPage> leftover_pages_;
  std::vector<Address> leftover_reservations_;
  Bytes leftover_page_bytes_ = 0;
};

}  // namespace tessera::baselines
