// Pausing and resuming the memory of a tag (policy; allocator.hpp states the contract).
//
// A tag's blocks live in arenas of their own (the arena key holds the tag), so its pages sit under its own
// regions: a pause unmaps every page of those regions — live blocks' and cached ones — and the regions
// themselves stay reserved, their blocks where they were. A paused live block keeps its address because
// its block stays in its region, live; the placement never carves from it. The pages go to the pool and
// from there back to the device; other tags go on allocating, stitching and collecting garbage with them.
// A resume backs each paused live block again as an allocation is backed (page_backing.cpp): pooled
// pages, then idle pages taken back from anywhere, then new ones.
//
// Shared blocks (sliver_sharing.cpp) take slivers only from arenas of their own tag, so a pause never
// takes another tag's bytes. Theirs are unmapped first and mapped last: they map granules of the tag's
// regions a second time.
//
// A graph pool under the tag (private_pooling.cpp) is paused as the rest, but its resume maps again every
// slot that was mapped at the pause, free blocks' too: the graph replays into the addresses of the blocks
// it freed during capture, whose bytes it writes before it reads them.
#include <fmt/format.h>

#include <algorithm>

#include "core/tessera_allocator.hpp"

namespace tessera::core {

TagId TesseraAllocatorImpl::tag_of(const Block* block) const {
  return block->arena != nullptr ? block->arena->tag() : shared_.of(block)->tag;
}

bool TesseraAllocatorImpl::is_paused(const Block* block) const { return tags_.is_paused(tag_of(block)); }

std::vector<std::string> TesseraAllocatorImpl::tags() const {
  std::lock_guard lock(mutex_);
  return tags_.names();
}

template <class Visit>
void TesseraAllocatorImpl::visit_live_blocks(TagId tag, Visit&& visit) {
  for (const auto& placement : placements_) {
    Arena& arena = placement->arena();
    if (arena.tag() != tag) continue;
    for (std::uint32_t index = 0; index < arena.regions().size(); ++index) {
      for (Block* block = arena.region(index).first_block; block != nullptr; block = block->next) {
        if (block->live) visit(arena, *block);
      }
    }
  }
}

// The caller's blocks under the tag, live now: those of its arenas (not the lent slivers), then its shared ones.
template <class Visit>
void TesseraAllocatorImpl::visit_tag_blocks(TagId tag, Visit&& visit) {
  visit_live_blocks(tag, [&](Arena&, Block& block) {
    if (!block.lent) visit(block);
  });
  for (const auto& shared : shared_) {
    if (shared->tag == tag && shared->block.live) visit(shared->block);
  }
}

// The proof: the pending frees waited for (all of them: their blocks go back to their arenas), then a
// synchronize of every stream the tag's blocks were used on.
Result<void> TesseraAllocatorImpl::prove_tag_idle(TagId tag) {
  if (auto done = process_pending(true); !done) return done;
  std::vector<StreamId> streams;
  auto add = [&](StreamId stream) {
    if (std::find(streams.begin(), streams.end(), stream) == streams.end()) streams.push_back(stream);
  };
  for (const auto& placement : placements_) {
    if (placement->arena().tag() == tag) add(placement->arena().stream());
  }
  for (const auto& shared : shared_) {
    if (shared->tag == tag) add(shared->stream);
  }
  pending_.visit_users([&](const Block* block, std::span<const StreamId> users) {
    if (tag_of(block) == tag) std::for_each(users.begin(), users.end(), add);
  });
  return mapper_.synchronize(streams);
}

// A host copy of the requested bytes of each live block allocated with OnPause::back_up, and of every live
// block when `every_block`; on a failure the copies made here go again.
Result<void> TesseraAllocatorImpl::back_up_tag(TagId tag, bool every_block) {
  if (!mapper_.capabilities().host_backup) {
    return make_error(Errc::unsupported, "the driver cannot copy device memory to host memory (no host_backup)");
  }
  std::vector<const Block*> made;
  Result<void> failure;
  auto back_up = [&](Block& block) {
    if (!failure.ok() || tags_.has_backup(&block)) return;
    if (!every_block && block.on_pause != OnPause::back_up) return;
    auto backup = tags_.buffer_for(block.requested);
    if (!backup) {
      failure = std::move(backup).error();
      return;
    }
    if (auto copied = mapper_.back_up(*backup, block.address, block.requested); !copied) {
      tags_.release_buffer(*backup);
      failure = std::move(copied).error();
      return;
    }
    tags_.keep_backup(&block, *backup);
    made.push_back(&block);
  };
  visit_tag_blocks(tag, back_up);
  if (!failure.ok()) {
    for (const Block* block : made) tags_.drop_backup(block);
  }
  return failure;
}

TesseraAllocatorImpl::Unbacked TesseraAllocatorImpl::blocks_without_backup(TagId tag) {
  Unbacked lost;
  visit_tag_blocks(tag, [&](const Block& block) {
    if (tags_.has_backup(&block)) return;
    ++lost.blocks;
    lost.bytes += block.requested;
  });
  return lost;
}

// The cache serves the next pause of a tag that pauses: a kept buffer is worth its host memory only while
// some live block of such a tag, not backed up now, would take it (BackupCache::take's rule). A block that
// grew, or went, leaves its old buffer to no one: it is freed here, at every pause and resume, so the cache
// never holds more than one buffer for each such block, of at most twice its bytes.
void TesseraAllocatorImpl::trim_backup_cache() {
  if (!tags_.keeps_buffers()) return;
  std::vector<Bytes> wanted;
  for (const TagBook::State& state : tags_.states()) {
    if (!state.paused_before) continue;
    visit_tag_blocks(state.tag, [&](const Block& block) {
      if (!tags_.has_backup(&block)) wanted.push_back(block.requested);
    });
  }
  tags_.keep_buffers_only_for(std::move(wanted));
}

Result<void> TesseraAllocatorImpl::unmap_tag(TagId tag) {
  for (const auto& shared : shared_) {
    if (shared->tag != tag) continue;
    if (auto done = mapper_.unmap_shared(*shared); !done) return done;
  }
  for (const auto& placement : placements_) {
    Arena& arena = placement->arena();
    if (arena.tag() != tag) continue;
    for (std::uint32_t index = 0; index < arena.regions().size(); ++index) {
      if (auto done = mapper_.unmap_region(arena.region(index)); !done) return done;
    }
  }
  return {};
}

void TesseraAllocatorImpl::record_graph_runs(TagId tag) {
  for (const auto& placement : placements_) {
    Arena& arena = placement->arena();
    if (arena.tag() != tag || pools_.kind_of(arena.private_pool()) != PoolKind::graph) continue;
    for (std::uint32_t index = 0; index < arena.regions().size(); ++index) {
      const Region& region = arena.region(index);
      for (std::size_t slot = region.table_begin(); slot < region.table_end();) {
        if (!region.is_mapped(slot)) {
          ++slot;
          continue;
        }
        std::size_t end = slot;
        while (end < region.table_end() && region.is_mapped(end)) ++end;
        tags_.add_mapped_run(tag, {&arena, index, SlotRange{slot, end - slot}});
        slot = end;
      }
    }
  }
}

// Every granule a live block of the tag touches gets a page again, and every run a graph pool had mapped.
// `missing`: the granules that lacked one.
Result<void> TesseraAllocatorImpl::map_tag(TagId tag, std::size_t& missing) {
  missing = 0;
  // The runs of graph pools still live (one released while paused gives only its live blocks' pages back).
  std::vector<TagBook::MappedRun> runs;
  if (const auto* recorded = tags_.mapped_runs(tag)) {
    for (const TagBook::MappedRun& run : *recorded) {
      if (pools_.kind_of(run.arena->private_pool()) == PoolKind::graph) runs.push_back(run);
    }
  }
  auto in_runs = [&](const Arena& arena) {
    return std::any_of(runs.begin(), runs.end(), [&](const TagBook::MappedRun& run) { return run.arena == &arena; });
  };
  for (const TagBook::MappedRun& run : runs) {
    const Region& region = run.arena->region(run.region);
    for (std::size_t slot = run.slots.first; slot < run.slots.end(); ++slot) missing += region.is_mapped(slot) ? 0 : 1;
  }
  visit_live_blocks(tag, [&](Arena& arena, Block& block) {
    if (in_runs(arena)) return;  // counted with its runs, which hold every slot it touches
    const Region& region = arena.region_of(block);
    const SlotRange touched = arena.touched_slots(block);
    for (std::size_t slot = touched.first; slot < touched.end(); ++slot) {
      // A granule shared with the block before it is counted there.
      const bool counted = slot == touched.first && block.previous != nullptr && block.previous->live &&
                           arena.touched_slots(*block.previous).end() > slot;
      missing += !counted && !region.is_mapped(slot) ? 1 : 0;
    }
  });
  for (const auto& shared : shared_) {
    if (shared->tag != tag || !shared->block.live) continue;
    for (const SharedMapping& mapping : shared->mappings) {
      if (!mapping.is_sliver() && !mapping.mapped) missing += mapping.page.granules;
    }
  }
  // Idle pages are taken back once for all the blocks, before any new page is created for them; the blocks
  // then take them whatever chunk they are of (TaggedPages::any).
  if (const std::size_t pooled = mapper_.pool().granules(); missing > pooled) {
    if (auto taken = backer_.reclaim(missing - pooled, nullptr); !taken) return std::move(taken).error();
  }
  Result<void> failure;
  visit_live_blocks(tag, [&](Arena& arena, Block& block) {
    if (failure.ok()) failure = backer_.back(arena, block, true, PageBacker::TaggedPages::any);
  });
  if (!failure.ok()) return failure;
  for (const TagBook::MappedRun& run : runs) {
    // The run as a block of its own, for the backer: it maps what the run lacks, as for an allocation.
    Region& region = run.arena->region(run.region);
    Block span;
    span.address = region.slot_address(run.slots.first, granule());
    span.size = run.slots.count * granule();
    span.region = run.region;
    if (auto done = backer_.back(*run.arena, span, true, PageBacker::TaggedPages::any); !done) return done;
  }
  for (const auto& shared : shared_) {
    if (shared->tag != tag || !shared->block.live) continue;
    if (auto done = remap_shared(*shared); !done) return done;
  }
  return {};
}

// A shared block's own pages come from the pool or are created (within the limit); its slivers are the
// granules its lent blocks' slots map now.
Result<void> TesseraAllocatorImpl::remap_shared(SharedBlock& shared) {
  std::vector<SharedMapping> fresh;
  auto give_back_fresh = [&] {
    for (const SharedMapping& mapping : fresh) {
      if (!mapping.is_sliver() && !mapping.mapped) mapper_.pool_page(mapping.page);
    }
  };
  for (const SharedMapping& mapping : shared.mappings) {
    if (mapping.mapped) {
      fresh.push_back(mapping);
      continue;
    }
    if (mapping.is_sliver()) {
      const Region& region = mapping.home->region_of(*mapping.lent);
      SharedMapping sliver = mapping;
      sliver.page = region.granule_at(mapping.home->slot_of(region, mapping.lent->address));
      fresh.push_back(sliver);
      continue;
    }
    std::size_t slot = mapping.slot;
    std::uint32_t needed = mapping.page.granules;
    while (needed > 0) {
      auto page = backer_.page_of_at_most(needed);
      if (!page) {
        give_back_fresh();
        return std::move(page).error();
      }
      fresh.push_back({slot, *page, nullptr, nullptr, false});
      slot += page->granules;
      needed -= page->granules;
    }
  }
  shared.mappings = std::move(fresh);
  if (auto mapped = mapper_.map_shared(shared); !mapped) {
    // What was not mapped goes back to the pool; what was is undone by the caller's unmap_tag.
    for (SharedMapping& mapping : shared.mappings) {
      if (!mapping.is_sliver() && !mapping.mapped) mapper_.pool_page(mapping.page);
    }
    return mapped;
  }
  return {};
}

Result<void> TesseraAllocatorImpl::restore_backups(TagId tag) {
  Result<void> failure;
  tags_.visit_backups([&](const Block* block, const HostBuffer& backup) {
    if (!failure.ok() || tag_of(block) != tag) return;
    failure = mapper_.restore(block->address, backup, block->requested);
  });
  return failure;
}

// A paused block's bytes are nowhere on the device and no work can be queued on them: it goes at once.
Result<void> TesseraAllocatorImpl::free_paused(Block* block) {
  tags_.drop_backup(block);
  pending_.forget_users(block);
  live_.erase(block->address);
  if (Arena* arena = block->arena; arena != nullptr) {
    const BlockEvent event = block_event(*arena, *block);
    placements_.give_back(block);
    notify([&](AllocatorObserver& observer) { observer.block_freed(event); });
    return {};
  }
  const SharedBlock* shared = shared_.of(block);
  const BlockEvent event = block_event(*shared);
  block->live = false;
  if (!take_apart(block)) pending_.retry_later(nullptr, block);  // tried again at the next drain
  notify([&](AllocatorObserver& observer) { observer.block_freed(event); });
  return {};
}

Bytes TesseraAllocatorImpl::live_bytes_of(TagId tag) {
  Bytes bytes = 0;
  visit_tag_blocks(tag, [&](const Block& block) { bytes += block.size; });
  return bytes;
}

Result<void> TesseraAllocatorImpl::do_pause(std::string_view name, bool backup) {
  std::lock_guard lock(mutex_);
  auto tag = tags_.known(name, "pause");
  if (!tag) return std::move(tag).error();
  TagBook::State& state = *tags_.state_of(*tag);
  if (!state.paused) {
    if (auto exported = refuse_pause_if_exported(*tag, name); !exported) return exported;
    if (auto done = prove_tag_idle(*tag); !done) {
      return make_error(done.error().code, fmt::format("tessera: pause of tag '{}': proving the device done with its "
                                                       "blocks failed; nothing changed: {}",
                                                       name, done.error().message));
    }
    if (auto done = back_up_tag(*tag, backup); !done) {
      return make_error(done.error().code, fmt::format("tessera: pause of tag '{}': copying its blocks to host "
                                                       "memory failed; nothing changed: {}",
                                                       name, done.error().message));
    }
    tags_.set_paused(state, true);
    record_graph_runs(*tag);
    trim_backup_cache();
    placements_.forget_cached();
    const Bytes paused_bytes = live_bytes_of(*tag);
    Bytes backup_bytes = 0;
    tags_.visit_backups([&](const Block* block, const HostBuffer& buffer) {
      backup_bytes += tag_of(block) == *tag ? buffer.size : 0;
    });
    notify([&](AllocatorObserver& observer) { observer.tag_paused(*tag, paused_bytes, backup_bytes); });
  } else if (backup) {
    if (auto lost = blocks_without_backup(*tag); lost.blocks > 0) {
      return make_error(Errc::invalid_argument,
                        fmt::format("tessera: pause of tag '{}' with backup: the tag is already paused, and {} of its "
                                    "blocks ({} bytes) were paused without a backup, so their contents are gone; "
                                    "nothing changed. Resume it (those blocks then hold unspecified bytes) before "
                                    "pausing it with a backup",
                                    name, lost.blocks, lost.bytes));
    }
  }
  if (auto done = unmap_tag(*tag); !done) {
    return make_error(done.error().code, fmt::format("tessera: pause of tag '{}': unmapping its pages failed; the tag "
                                                     "is paused with its backups, and pausing it again unmaps the "
                                                     "rest: {}",
                                                     name, done.error().message));
  }
  if (auto done = mapper_.release_pooled(0); !done) {
    return make_error(done.error().code, fmt::format("tessera: pause of tag '{}': giving its pages back to the device "
                                                     "failed; they stay pooled, and pausing again retries: {}",
                                                     name, done.error().message));
  }
  return {};
}

Result<void> TesseraAllocatorImpl::do_resume(std::string_view name) {
  std::lock_guard lock(mutex_);
  auto tag = tags_.known(name, "resume");
  if (!tag) return std::move(tag).error();
  TagBook::State& state = *tags_.state_of(*tag);
  if (!state.paused) return {};
  // Frees waiting for events give their pages first (a block over slivers keeps its pages until then).
  if (auto done = process_pending(true); !done) {
    return make_error(done.error().code, fmt::format("tessera: resume of tag '{}': waiting for pending frees failed; "
                                                     "the tag stays paused with its backups: {}",
                                                     name, done.error().message));
  }
  std::size_t missing = 0;
  if (auto mapped = map_tag(*tag, missing); !mapped) {
    // Back to the state the pause left: nothing of the tag mapped, new pages given back.
    (void)unmap_tag(*tag);
    (void)mapper_.release_pooled(0);
    const Error& error = mapped.error();
    if (error.code != Errc::out_of_memory) {
      return make_error(error.code, fmt::format("tessera: resume of tag '{}' failed; the tag stays paused with its "
                                                "backups: {}",
                                                name, error.message));
    }
    notify([&](AllocatorObserver& observer) { observer.out_of_memory(missing * granule()); });
    return make_error(Errc::out_of_memory,
                      fmt::format("tessera: out of memory resuming tag '{}': its blocks need {} bytes of pages; {} "
                                  "bytes are free on the device under the limit of {} and {} pooled. The tag stays "
                                  "paused with its backups: free memory and resume again ({})",
                                  name, missing * granule(), budget_.free_bytes(), budget_.limit(),
                                  mapper_.pool().granules() * granule(), error.message));
  }
  if (auto restored = restore_backups(*tag); !restored) {
    return make_error(restored.error().code, fmt::format("tessera: resume of tag '{}': copying its backups back "
                                                         "failed; the tag stays paused with every backup and its "
                                                         "pages mapped, and resuming again copies them: {}",
                                                         name, restored.error().message));
  }
  const Bytes resumed = live_bytes_of(*tag);
  tags_.forget_mapped_runs(*tag);
  tags_.drop_backups_if([&](const Block* block) { return tag_of(block) == *tag; });
  tags_.set_paused(state, false);
  trim_backup_cache();
  notify([&](AllocatorObserver& observer) { observer.tag_resumed(*tag, resumed); });
  return {};
}

}  // namespace tessera::core
