#include "core/mapper.hpp"

#include <algorithm>

namespace tessera::core {

namespace {

// A sliver's granule mapped at `at`, for the observers: the shared block uses the bytes its home's lent block
// holds, at the same offset into the granule.
SliverMapping sliver_of(const SharedMapping& mapping, Address at, Bytes granule) {
  const Address home = mapping.lent->address;
  return {at, granule, home, at + home % granule, mapping.lent->size};
}

}  // namespace

Result<ChunkId> Mapper::create_chunk(std::uint32_t& granules) {
  while (true) {
    auto chunk = driver_.create_chunk(granules * granule_);
    if (chunk) {
      pool_.add_chunk(*chunk, granules);
      held_ += granules * granule_;
      observers_.notify([&](AllocatorObserver& observer) { observer.chunks_created(1, granules * granule_); });
      return chunk;
    }
    if (chunk.error().code != Errc::out_of_memory || granules == 1) return chunk;
    granules = std::max<std::uint32_t>(1, granules / 2);
  }
}

Result<void> Mapper::release_pooled(std::size_t granules_to_keep) {
  release_retired();
  std::uint64_t released = 0;
  Bytes released_bytes = 0;
  Result<void> failure;
  while (pool_.granules() > granules_to_keep) {
    const std::optional<Page> chunk = pool_.take_whole_chunk();
    if (!chunk) break;
    if (auto done = release_taken_chunk(*chunk); !done) {
      failure = std::move(done);
      break;
    }
    ++released;
    released_bytes += chunk->granules * granule_;
  }
  if (released > 0) {
    observers_.notify([&](AllocatorObserver& observer) { observer.chunks_released(released, released_bytes); });
  }
  return failure;
}

Result<void> Mapper::release_pooled_chunk(ChunkId chunk) {
  const std::optional<Page> whole = pool_.take_chunk_if_whole(chunk);
  if (!whole) return {};
  if (auto done = release_taken_chunk(*whole); !done) return done;
  const Bytes bytes = whole->granules * granule_;
  observers_.notify([&](AllocatorObserver& observer) { observer.chunks_released(1, bytes); });
  return {};
}

Result<void> Mapper::release_taken_chunk(const Page& chunk) {
  if (auto done = driver_.release_chunk(chunk.chunk); !done) {
    pool_.put(chunk);
    return done;
  }
  pool_.forget_chunk(chunk.chunk);
  held_ -= chunk.granules * granule_;
  return {};
}

// A page that is all of its chunk is mapped whole: the call every driver has. A part of a chunk, and a
// sliver's granule (mapped a second time), need map_part.
Result<void> Mapper::map(Address at, const Page& page, bool sliver) {
  if (!sliver && page.offset == 0 && page.granules == pool_.chunk_granules(page.chunk)) {
    return driver_.map(at, page.chunk);
  }
  return driver_.map_part(at, page.chunk, page.offset * granule_, page.granules * granule_);
}

Result<void> Mapper::map_pages(Region& region, std::span<const Assignment> assignments) {
  std::size_t mapped = 0;
  std::vector<PageMapping> mappings;  // for the observers
  mappings.reserve(assignments.size());
  Result<void> failure;
  for (const Assignment& assignment : assignments) {
    const Address at = region.slot_address(assignment.head, granule_);
    if (auto done = map(at, assignment.page, false); !done) {
      failure = std::move(done);
      break;
    }
    region.set_page(assignment.head, assignment.page);
    ++mapped;
    mappings.push_back({at, assignment.page.granules * granule_});
  }
  for (std::size_t start = 0; start < mapped && failure.ok();) {
    std::size_t end = start + 1;
    while (end < mapped && assignments[end - 1].head + assignments[end - 1].page.granules == assignments[end].head) {
      ++end;
    }
    const std::size_t first = assignments[start].head;
    const std::size_t last = assignments[end - 1].head + assignments[end - 1].page.granules;
    if (auto done = driver_.set_access(region.slot_address(first, granule_), (last - first) * granule_); !done) {
      failure = std::move(done);
    }
    start = end;
  }
  if (failure.ok()) {
    observers_.notify([&](AllocatorObserver& observer) { observer.pages_mapped(mappings); });
    return {};
  }
  // The rollback: no page may stay mapped with access unknown.
  std::vector<PageMapping> kept;
  for (std::size_t i = 0; i < mapped; ++i) {
    const Assignment& assignment = assignments[i];
    if (!driver_.unmap(mappings[i].address)) {
      // Stays mapped, but maybe without access: marked so, it is never handed out before access is set.
      region.set_accessible(assignment.head, false);
      kept.push_back(mappings[i]);
      continue;
    }
    pool_.put(region.clear_page(assignment.head));
  }
  for (std::size_t i = mapped; i < assignments.size(); ++i) pool_.put(assignments[i].page);
  if (!kept.empty()) observers_.notify([&](AllocatorObserver& observer) { observer.pages_mapped(kept); });
  return failure;
}

Result<void> Mapper::restore_access(Region& region, SlotRange touched) {
  for (std::size_t slot = touched.first; slot < touched.end(); ++slot) {
    if (!region.is_mapped(slot) || region.is_accessible(slot)) continue;
    const std::size_t head = region.head_of(slot);
    const Bytes size = region.page_granules_at(head) * granule_;
    if (auto done = driver_.set_access(region.slot_address(head, granule_), size); !done) return done;
    region.set_accessible(head, true);
  }
  return {};
}

Mapper::Unmapped Mapper::unmap_idle(std::span<const IdlePage> idle, std::vector<Page>* taken) {
  Unmapped result;
  // The proof: every stream whose freed blocks give pages has finished the work queued before now.
  std::vector<StreamId> streams;
  for (const IdlePage& page : idle) {
    if (std::find(streams.begin(), streams.end(), page.arena->stream()) == streams.end()) {
      streams.push_back(page.arena->stream());
    }
  }
  for (StreamId stream : streams) {
    if (auto done = driver_.synchronize_stream(stream); !done) {
      result.failure = std::move(done);
      result.proven = false;
      return result;
    }
    observers_.notify([](AllocatorObserver& observer) { observer.synchronized(false); });
  }
  std::vector<PageMapping> unmapped_pages;  // for the observers
  unmapped_pages.reserve(idle.size());
  for (const IdlePage& page : idle) {
    Region& region = page.arena->region(page.region);
    const Address at = region.slot_address(page.head, granule_);
    if (auto done = driver_.unmap(at); !done) {
      result.failure = std::move(done);
      break;
    }
    const Page unmapped = region.clear_page(page.head);
    if (taken != nullptr) taken->push_back(unmapped);
    pool_.put(unmapped);
    unmapped_pages.push_back({at, page.granules * granule_});
    result.granules += page.granules;
  }
  if (!unmapped_pages.empty()) {
    observers_.notify([&](AllocatorObserver& observer) {
      observer.pages_unmapped(unmapped_pages);
      observer.reclaimed(unmapped_pages.size());
    });
  }
  return result;
}

Result<void> Mapper::map_shared(SharedBlock& shared) {
  Result<void> failure;
  std::vector<PageMapping> mapped;  // for the observers
  std::vector<SliverMapping> slivers_mapped;
  for (SharedMapping& mapping : shared.mappings) {
    if (mapping.mapped) continue;
    const Address at = shared.base + mapping.slot * granule_;
    if (auto done = map(at, mapping.page, mapping.is_sliver()); !done) {
      failure = std::move(done);
      break;
    }
    mapping.mapped = true;
    if (mapping.is_sliver()) {
      slivers_mapped.push_back(sliver_of(mapping, at, granule_));
    } else {
      mapped.push_back({at, mapping.page.granules * granule_});
    }
  }
  if (failure.ok()) failure = driver_.set_access(shared.base, shared.span);
  if (!mapped.empty()) observers_.notify([&](AllocatorObserver& observer) { observer.pages_mapped(mapped); });
  if (!slivers_mapped.empty()) {
    observers_.notify([&](AllocatorObserver& observer) { observer.slivers_mapped(slivers_mapped); });
  }
  return failure;
}

Result<void> Mapper::unmap_shared(SharedBlock& shared) {
  std::vector<PageMapping> unmapped;  // for the observers
  std::vector<SliverMapping> slivers_unmapped;
  Result<void> done;
  for (SharedMapping& mapping : shared.mappings) {
    if (!mapping.mapped) continue;
    const Address at = shared.base + mapping.slot * granule_;
    if (auto unmap = driver_.unmap(at); !unmap) {
      done = std::move(unmap);
      break;
    }
    mapping.mapped = false;
    if (mapping.is_sliver()) {
      slivers_unmapped.push_back(sliver_of(mapping, at, granule_));
    } else {
      pool_.put(mapping.page);
      unmapped.push_back({at, mapping.page.granules * granule_});
    }
  }
  if (!unmapped.empty()) {
    observers_.notify([&](AllocatorObserver& observer) { observer.pages_unmapped(unmapped); });
  }
  if (!slivers_unmapped.empty()) {
    observers_.notify([&](AllocatorObserver& observer) { observer.slivers_unmapped(slivers_unmapped); });
  }
  return done;
}

Result<EventId> Mapper::record_event(StreamId stream) {
  EventId event{};
  if (!spare_events_.empty()) {
    event = spare_events_.back();
    spare_events_.pop_back();
  } else if (auto created = driver_.create_event(); created) {
    event = *created;
  } else {
    return created;
  }
  if (auto recorded = driver_.record_event(event, stream); !recorded) {
    destroy_event(event);  // spare or new: a record that failed may have left it in any state
    return std::move(recorded).error();
  }
  return event;
}

void Mapper::recycle_event(EventId event) {
  if (driver_.capabilities().reusable_events && spare_events_.size() < max_spare_events_) {
    spare_events_.push_back(event);
  } else {
    destroy_event(event);
  }
}

Result<Address> Mapper::reserve_shared(Bytes span) {
  const auto spare = std::ranges::find(spare_ranges_, span, &SpareRange::span);
  if (spare == spare_ranges_.end()) return driver_.reserve(span);
  const Address base = spare->base;
  spare_ranges_.erase(spare);
  return base;
}

Result<void> Mapper::release_shared(Address base, Bytes span) {
  if (spare_ranges_.size() < max_spare_ranges_) {
    spare_ranges_.push_back({base, span});
    return {};
  }
  return driver_.release_reservation(base);
}

Result<void> Mapper::release_spare_ranges() {
  Result<void> failure;
  std::erase_if(spare_ranges_, [&](const SpareRange& spare) {
    auto released = driver_.release_reservation(spare.base);
    const bool ok = released.ok();
    if (!ok && failure.ok()) failure = std::move(released);
    return ok;
  });
  return failure;
}

void Mapper::release_spare_events() {
  for (EventId event : spare_events_) destroy_event(event);
  spare_events_.clear();
}

void Mapper::destroy_event(EventId event) {
  if (!driver_.destroy_event(event)) stale_events_.push_back(event);
}

void Mapper::retry_stale_events() {
  std::erase_if(stale_events_, [&](EventId event) { return driver_.destroy_event(event).ok(); });
  std::erase_if(stale_backups_, [&](const HostBuffer& backup) { return driver_.free_host(backup).ok(); });
}

Result<void> Mapper::synchronize(std::span<const StreamId> streams) {
  for (StreamId stream : streams) {
    if (auto done = driver_.synchronize_stream(stream); !done) return done;
    observers_.notify([](AllocatorObserver& observer) { observer.synchronized(false); });
  }
  return {};
}

Result<void> Mapper::unmap_region(Region& region) {
  std::vector<PageMapping> unmapped;  // for the observers
  Result<void> failure;
  for (std::size_t slot = region.table_begin(); slot < region.table_end() && region.mapped_slots() > 0; ++slot) {
    if (region.page_granules_at(slot) == 0) continue;
    const Address at = region.slot_address(slot, granule_);
    if (auto done = driver_.unmap(at); !done) {
      failure = std::move(done);
      break;
    }
    const Page page = region.clear_page(slot);
    pool_.put(page);
    unmapped.push_back({at, page.granules * granule_});
  }
  if (!unmapped.empty()) observers_.notify([&](AllocatorObserver& observer) { observer.pages_unmapped(unmapped); });
  return failure;
}

void Mapper::free_backup(const HostBuffer& backup) {
  if (!driver_.free_host(backup)) stale_backups_.push_back(backup);
}

bool Mapper::prove_idle(std::span<const StreamId> streams, std::span<const EventId> events) {
  if (driver_.synchronize_device()) return true;
  for (StreamId stream : streams) {
    if (!driver_.synchronize_stream(stream)) return false;
  }
  for (EventId event : events) {
    if (!driver_.synchronize_event(event)) return false;
  }
  return true;
}

void Mapper::unmap_all(SharedBlock& shared) {
  for (SharedMapping& mapping : shared.mappings) {
    if (mapping.mapped && driver_.unmap(shared.base + mapping.slot * granule_) && !mapping.is_sliver()) {
      pool_.put(mapping.page);
    }
  }
  if (shared.reserved) (void)driver_.release_reservation(shared.base);
}

void Mapper::unmap_all(Region& region) {
  for (std::size_t slot = region.table_begin(); slot < region.table_end(); ++slot) {
    if (region.page_granules_at(slot) == 0) continue;
    if (driver_.unmap(region.slot_address(slot, granule_))) pool_.put(region.clear_page(slot));
  }
  (void)driver_.release_reservation(region.base);
}

void Mapper::release_all_pooled() {
  for (ChunkId chunk : pool_.idle_retired_chunks()) {
    if (driver_.release_chunk(chunk)) pool_.drop_chunk(chunk);
  }
  while (const std::optional<Page> chunk = pool_.take_whole_chunk()) (void)driver_.release_chunk(chunk->chunk);
}

void Mapper::destroy_events(std::span<const EventId> events) {
  for (EventId event : events) (void)driver_.destroy_event(event);
}

Result<void> Mapper::retire_pages(Region& region, SlotRange range) {
  std::vector<Assignment> unmapped_pages;
  std::vector<PageMapping> unmapped;  // for the observers
  Result<void> failure;
  for (std::size_t slot = range.first; slot < range.end();) {
    const std::uint32_t granules = region.page_granules_at(slot);
    const Address at = region.slot_address(slot, granule_);
    if (auto done = driver_.unmap(at); !done) {
      failure = std::move(done);
      break;
    }
    unmapped_pages.push_back({slot, region.clear_page(slot)});
    unmapped.push_back({at, granules * granule_});
    slot += granules;
  }
  if (!unmapped.empty()) observers_.notify([&](AllocatorObserver& observer) { observer.pages_unmapped(unmapped); });
  if (failure.ok()) {
    for (const Assignment& page : unmapped_pages) pool_.retire(page.page);
    release_retired();
    return {};
  }
  // Back as it was: the same pages at the same slots (map_pages' own rollback pools what it cannot map).
  if (!unmapped_pages.empty()) (void)map_pages(region, unmapped_pages);
  return failure;
}

void Mapper::release_retired() {
  std::uint64_t released = 0;
  Bytes released_bytes = 0;
  for (ChunkId chunk : pool_.idle_retired_chunks()) {
    if (!driver_.release_chunk(chunk)) continue;
    const Bytes bytes = Bytes{pool_.chunk_granules(chunk)} * granule_;
    pool_.drop_chunk(chunk);
    held_ -= bytes;
    ++released;
    released_bytes += bytes;
  }
  if (released > 0) {
    observers_.notify([&](AllocatorObserver& observer) { observer.chunks_released(released, released_bytes); });
  }
}

Result<ImportedBlock> Mapper::import_block(const ExportedBlock& exported) {
  Bytes span = 0;
  for (const ExportedPiece& piece : exported.pieces) span += piece.size;
  auto base = driver_.reserve(span);
  if (!base) return std::move(base).error();
  ImportedBlock block{.base = *base, .span = span, .size = exported.size, .chunks = {}, .mappings = {}};
  auto undo = [&](Error error) -> Result<ImportedBlock> {
    (void)close_import(block);
    return error;
  };
  std::vector<ChunkId> imported(exported.chunks.size(), ChunkId{0});
  Address at = *base;
  for (const ExportedPiece& piece : exported.pieces) {
    const ExportedChunk& from = exported.chunks[piece.chunk];
    if (imported[piece.chunk] == ChunkId{0}) {
      auto chunk = driver_.import_chunk(from.descriptor, from.offset, from.size);
      if (!chunk) return undo(std::move(chunk).error());
      imported[piece.chunk] = *chunk;
      block.chunks.push_back(*chunk);
    }
    const ChunkId chunk = imported[piece.chunk];
    auto mapped = piece.chunk_offset == 0 && piece.size == from.size
                      ? driver_.map(at, chunk)
                      : driver_.map_part(at, chunk, piece.chunk_offset, piece.size);
    if (!mapped) return undo(std::move(mapped).error());
    block.mappings.push_back(at);
    at += piece.size;
  }
  if (auto access = driver_.set_access(*base, span); !access) return undo(std::move(access).error());
  return block;
}

Result<void> Mapper::close_import(ImportedBlock& block) {
  while (!block.mappings.empty()) {
    if (auto done = driver_.unmap(block.mappings.back()); !done) return done;
    block.mappings.pop_back();
  }
  while (!block.chunks.empty()) {
    if (auto done = driver_.release_chunk(block.chunks.back()); !done) return done;
    block.chunks.pop_back();
  }
  if (block.base != 0) {
    if (auto done = driver_.release_reservation(block.base); !done) return done;
    block.base = 0;
  }
  return {};
}

}  // namespace tessera::core
