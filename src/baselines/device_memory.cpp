#include "baselines/device_memory.hpp"

#include <algorithm>

namespace tessera::baselines {

DeviceMemory::DeviceMemory(Driver& driver) : driver_(driver) {}

DeviceMemory::~DeviceMemory() {
  for (EventId event : events_) (void)driver_.destroy_event(event);
  (void)retry_leftovers();
}

Result<Address> DeviceMemory::reserve(Bytes size) { return driver_.reserve(size); }

void DeviceMemory::release_reservation(Address base) {
  if (!driver_.release_reservation(base)) leftover_reservations_.push_back(base);
}

Result<void> DeviceMemory::create_and_map(Address at, Bytes page_size, AccessCalls access, std::span<ChunkId> pages) {
  std::size_t created = 0;
  std::size_t mapped = 0;
  auto undo = [&] {
    for (std::size_t i = 0; i < created; ++i) {
      if (i < mapped) {
        unmap_and_release(at + i * page_size, pages[i], page_size);
      } else if (!driver_.release_chunk(pages[i])) {
        leftover_pages_.push_back({pages[i], page_size});
        leftover_page_bytes_ += page_size;
      }
    }
  };
  for (; created < pages.size(); ++created) {
    auto page = driver_.create_chunk(page_size);
    if (!page) {
      undo();
      return std::move(page).error();
    }
    pages[created] = *page;
  }
  for (; mapped < pages.size(); ++mapped) {
    auto done = driver_.map(at + mapped * page_size, pages[mapped]);
    if (!done) {
      undo();
      return std::move(done).error();
    }
  }
  if (driver_.capabilities().needs_set_access) {
    const bool whole = access == AccessCalls::whole_range;
    for (std::size_t i = 0; i < (whole ? 1 : pages.size()); ++i) {
      auto done = driver_.set_access(at + i * page_size, whole ? pages.size() * page_size : page_size);
      if (!done) {
        undo();
        return std::move(done).error();
      }
    }
  }
  return {};
}

Result<void> DeviceMemory::map_existing(Address at, Bytes page_size, AccessCalls access,
                                        std::span<const ChunkId> pages) {
  std::size_t mapped = 0;
  auto undo = [&] {
    for (std::size_t i = 0; i < mapped; ++i) unmap(at + i * page_size);
  };
  for (; mapped < pages.size(); ++mapped) {
    auto done = driver_.map(at + mapped * page_size, pages[mapped]);
    if (!done) {
      undo();
      return std::move(done).error();
    }
  }
  if (driver_.capabilities().needs_set_access) {
    const bool whole = access == AccessCalls::whole_range;
    for (std::size_t i = 0; i < (whole ? 1 : pages.size()); ++i) {
      auto done = driver_.set_access(at + i * page_size, whole ? pages.size() * page_size : page_size);
      if (!done) {
        undo();
        return std::move(done).error();
      }
    }
  }
  return {};
}

void DeviceMemory::unmap(Address at) {
  if (!driver_.unmap(at)) leftover_mappings_.push_back(at);
}

void DeviceMemory::unmap_and_release(Address at, ChunkId page, Bytes page_size) {
  if (!driver_.unmap(at)) {
    leftover_mappings_.push_back(at);
    leftover_pages_.push_back({page, page_size});
    leftover_page_bytes_ += page_size;
    return;
  }
  if (!driver_.release_chunk(page)) {
    leftover_pages_.push_back({page, page_size});
    leftover_page_bytes_ += page_size;
  }
}

bool DeviceMemory::has_leftovers() const noexcept {
  return !leftover_mappings_.empty() || !leftover_pages_.empty() || !leftover_reservations_.empty();
}

Result<void> DeviceMemory::retry_leftovers() {
  Result<void> first;
  auto note = [&](Result<void> done) {
    const bool ok = done.ok();
    if (!ok && first.ok()) first = std::move(done);
    return ok;
  };
  // Mappings first: a page goes only when unmapped, a reservation only when nothing is mapped in it.
  std::erase_if(leftover_mappings_, [&](Address at) { return note(driver_.unmap(at)); });
  std::erase_if(leftover_pages_, [&](const LeftoverPage& page) {
    if (!note(driver_.release_chunk(page.page))) return false;
    leftover_page_bytes_ -= page.size;
    return true;
  });
  std::erase_if(leftover_reservations_, [&](Address base) { return note(driver_.release_reservation(base)); });
  return first;
}

Result<EventId> DeviceMemory::acquire_event() {
  if (!events_.empty()) {
    const EventId event = events_.back();
    events_.pop_back();
    return event;
  }
  return driver_.create_event();
}

void DeviceMemory::release_event(EventId event) { events_.push_back(event); }

}  // namespace tessera::baselines
