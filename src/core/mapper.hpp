// The mapper (mechanism, layer 2): the only code of the core that calls a Driver. It owns the physical
// memory the allocator holds — the chunks created and the page pool of pages not mapped now — and keeps
// each region's page table in step with every map and unmap. Policy (the allocator's files) decides which
// pages go where and asks for operations in its own words: back these slots, take these idle pages, give
// these chunks back, record an event; the mapper chooses the driver calls (map or map_part, one set_access
// per run of slots), proves the device idle before it unmaps, rolls back what a failed call left half
// done, and tells the observers what changed.
//
// Nothing here decides: no limit, no ordering of candidates, no retry beyond a smaller chunk.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/arena.hpp"
#include "core/imported_block.hpp"
#include "core/observers.hpp"
#include "core/page_pool.hpp"
#include "core/region.hpp"
#include "core/shared_block.hpp"
#include "tessera/allocator.hpp"
#include "tessera/driver.hpp"

namespace tessera::core {

// A page to map at slot `head` of the block being backed.
struct Assignment {
  std::size_t head;
  Page page;
};

// A mapped page that is idle: wholly inside a free block of `arena`, at slot `head` of one of its regions.
struct IdlePage {
  Arena* arena;
  std::uint32_t region;
  std::size_t head;
  std::uint32_t granules;
};

class Mapper {
 public:
  Mapper(Driver& driver, Observers& observers)
      : driver_(driver), observers_(observers), granule_(driver.granularity()) {}
  ~Mapper() {
    destroy_events(spare_events_);
    destroy_events(stale_events_);
    for (const HostBuffer& backup : stale_backups_) (void)driver_.free_host(backup);
  }
  Mapper(const Mapper&) = delete;
  Mapper& operator=(const Mapper&) = delete;

  // What the driver offers.
  Bytes granule() const noexcept { return granule_; }
  Bytes capacity() const noexcept { return driver_.capacity(); }
  const DriverCapabilities& capabilities() const noexcept { return driver_.capabilities(); }

  // Physical memory held from the device: chunks created and not released, mapped or pooled.
  Bytes held() const noexcept { return held_; }
  // The pages held and not mapped now. Read-only: only the mapper changes it, through the calls below.
  const PagePool& pool() const noexcept { return pool_; }
  // A pooled page of at most `granules` (PagePool::take_at_most), now the caller's to map or pool again.
  std::optional<Page> take_pooled(std::size_t granules, bool split) { return pool_.take_at_most(granules, split); }
  // The same from a chunk none of which is mapped (PagePool::take_from_whole_chunk).
  std::optional<Page> take_pooled_whole(std::size_t granules, bool split) {
    return pool_.take_from_whole_chunk(granules, split);
  }
  // A page the caller took or cut from a new chunk and does not map (after all): pooled again.
  void pool_page(const Page& page) { pool_.put(page); }

  // Virtual ranges.
  Result<Address> reserve(Bytes span) { return driver_.reserve(span); }
  Result<void> release_range(Address base) { return driver_.release_reservation(base); }
  // A shared block's range: a spare one of the same span where one is kept, else a new one. Released, it is
  // kept as a spare (up to max_spare_ranges_): blocks over slivers come back every iteration at the same
  // sizes, and their reserve and release calls came with them. Only virtual space is kept.
  Result<Address> reserve_shared(Bytes span);
  Result<void> release_shared(Address base, Bytes span);
  // Releases every spare range (empty_cache, the allocator's end); one whose release fails stays a spare.
  Result<void> release_spare_ranges();
  std::size_t spare_ranges() const noexcept { return spare_ranges_.size(); }

  // A new chunk of at most `granules` (lowered to what was created): the size asked first, then halves of
  // it down to one granule, while the device itself runs out of memory. Held from now on, none of it pooled.
  Result<ChunkId> create_chunk(std::uint32_t& granules);
  // Gives wholly pooled chunks back to the device, largest first, until at most `granules_to_keep` stay
  // pooled or no chunk is wholly pooled (the pooled parts of a chunk still partly mapped stay).
  Result<void> release_pooled(std::size_t granules_to_keep);
  // Gives `chunk` back to the device when all of it is pooled; a failure leaves it pooled.
  Result<void> release_pooled_chunk(ChunkId chunk);

  // Backs slots of a region: maps each assignment (sorted by head) — the whole chunk in one call where the
  // page is all of it — then enables access once per run of consecutive slots. On a failure nothing mapped
  // here stays accessible: each page is unmapped and pooled, or, where even the unmap fails, kept in the
  // page table without access so that no block is handed out over it.
  Result<void> map_pages(Region& region, std::span<const Assignment> assignments);
  // Gives access to the pages of `touched` that an earlier failure left mapped without it.
  Result<void> restore_access(Region& region, SlotRange touched);
  // Takes idle pages back into the pool: first the proof (a synchronize of every stream their blocks were
  // freed on), then one unmap each, in order, until one fails. Answers the granules taken; each page taken
  // is appended to `taken` where given.
  struct Unmapped {
    std::size_t granules = 0;
    Result<void> failure;
    bool proven = true;  // false: the proof failed, nothing was unmapped
  };
  Unmapped unmap_idle(std::span<const IdlePage> idle, std::vector<Page>* taken);

  // A shared block's mappings not mapped yet, in order (the slivers' granules with map_part), then access
  // over its whole range. On a failure what was mapped stays mapped (marked so) for take_apart to undo.
  Result<void> map_shared(SharedBlock& shared);
  // Unmaps what a shared block maps, pooling its own pages (not the lent granules), until an unmap fails
  // (what was done stays done).
  Result<void> unmap_shared(SharedBlock& shared);

  // Pausing a tag (tag_pause.cpp). The proof: every stream in `streams` finished what was queued before now.
  Result<void> synchronize(std::span<const StreamId> streams);
  // Unmaps every page of the region, pooling them, until one unmap fails (what was done stays done). The
  // caller proved the device done with the live blocks over them and backed up what it keeps.
  Result<void> unmap_region(Region& region);
  // A host buffer for a backup, and the copies into it and back.
  Result<HostBuffer> allocate_backup(Bytes size) { return driver_.allocate_host(size); }
  Result<void> back_up(const HostBuffer& backup, Address at, Bytes size) {
    return driver_.copy_to_host(backup, at, size);
  }
  Result<void> restore(Address at, const HostBuffer& backup, Bytes size) {
    return driver_.copy_to_device(at, backup, size);
  }
  // A free that fails is tried again at the next retry_stale_events(): host memory is never leaked.
  void free_backup(const HostBuffer& backup);

  // Sharing with another process (block_export.cpp). An exported chunk: a descriptor the caller owns.
  Result<ExportedChunk> export_chunk(ChunkId chunk) { return driver_.export_chunk(chunk); }
  // Unmaps the pages of slots [range) — each page starts and ends inside it — and retires them (page_pool.hpp):
  // never pooled nor handed out again; their chunks go back once none of them is mapped (release_retired).
  // The caller proved the device done with them. An unmap that fails stops it, and the pages unmapped so far
  // are mapped back: the range is as it was, and the failure is answered.
  Result<void> retire_pages(Region& region, SlotRange range);
  // Gives back every chunk with retired granules of which nothing is mapped; one whose release fails stays
  // held, tried again at the next call (release_pooled calls it too).
  void release_retired();
  // Maps `exported` in a reservation of its own: each chunk imported once, each piece mapped in order, access
  // over the whole range. On a failure nothing stays (what was done is undone).
  Result<ImportedBlock> import_block(const ExportedBlock& exported);
  // Unmaps, releases the imported chunks, then the range, until a call fails: what was undone leaves
  // `block`, so that a second call finishes. The caller proved the device done with it.
  Result<void> close_import(ImportedBlock& block);

  // Stream order. An event is recorded on a spare one where there is one, created otherwise.
  Result<EventId> record_event(StreamId stream);
  // An event whose work completed, kept to be recorded again, as PyTorch keeps its events: a free after
  // record_stream then costs a record and a query, not a create and a destroy besides. At most
  // max_spare_events_ are kept (the rest are destroyed), and none where the driver's events are not
  // reusable_events (Ascend); release_spare_events() destroys them all.
  void recycle_event(EventId event);
  void release_spare_events();
  std::size_t spare_events() const noexcept { return spare_events_.size(); }
  // A destroy that fails is tried again at the next retry_stale_events(): never leaked.
  void destroy_event(EventId event);
  void retry_stale_events();
  // Stale events keep allocations off the fast path until destroyed; stale host buffers only wait for the
  // next retry (the slow path, a resume, empty_cache), so that the fast path checks one vector.
  bool has_stale_events() const noexcept { return !stale_events_.empty(); }
  Result<bool> query_event(EventId event) { return driver_.query_event(event); }
  Result<void> wait_event(EventId event) { return driver_.synchronize_event(event); }

  // Teardown, when the allocator goes: observers are not told (they may be gone already).
  // Proof that the device finished all work: a device-wide synchronize, failing that each stream and event.
  bool prove_idle(std::span<const StreamId> streams, std::span<const EventId> events);
  // The proof before an imported block's close: whatever this process queued is done.
  Result<void> synchronize_device() { return driver_.synchronize_device(); }
  void unmap_all(Region& region);
  void unmap_all(SharedBlock& shared);
  void release_all_pooled();
  void destroy_events(std::span<const EventId> events);

 private:
  Result<void> map(Address at, const Page& page, bool sliver);
  // Releases a chunk taken whole out of the pool, or puts it back when the driver refuses.
  Result<void> release_taken_chunk(const Page& chunk);

  Driver& driver_;
  Observers& observers_;
  Bytes granule_;
  Bytes held_ = 0;
  PagePool pool_;
  std::vector<EventId> spare_events_;  // completed, to be recorded again
  std::vector<EventId> stale_events_;  // events whose destroy failed
  // Far more than the events waiting at once in any trace we hold (fsdp: 33), so that none is destroyed
  // in steady state; CUDA has no small limit on events (Ascend's hardware event ids have one: none is kept
  // there, reusable_events).
  static constexpr std::size_t max_spare_events_ = 1024;
  struct SpareRange {
    Address base;
    Bytes span;
  };
  std::vector<SpareRange> spare_ranges_;
  // A range costs only virtual space. With 64, niu_b10_ctx200_train_mixed at 1.05 x peak live makes 51
  // reserve and release calls instead of 531 (docs/benchmarks.md, "Spare ranges for blocks over slivers").
  static constexpr std::size_t max_spare_ranges_ = 64;
  std::vector<HostBuffer> stale_backups_;  // host buffers whose free failed
};

}  // namespace tessera::core
