// The Tessera allocator's class, shared by the files that implement one concern each:
//   tessera_allocator.cpp     the requests: allocate, free, record_stream, empty_cache, placement, streams
//   page_backing.cpp          the pages: where a block's pages come from, reclaim, release, garbage collection
//   allocator_inspection.cpp  stats, snapshot, history, the out-of-memory report and check()
//   history_recorder.cpp      the allocation history ring (an observer) and its trace
// Every driver call of the allocator is in these files; layers 2 and 3 (arena, free index, page pool) make
// none.
#pragma once

#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/address_table.hpp"
#include "core/arena.hpp"
#include "core/page_pool.hpp"
#include "core/history_recorder.hpp"
#include "core/stats_observer.hpp"
#include "tessera/allocator.hpp"

namespace tessera::core {

class TesseraAllocatorImpl final : public TesseraAllocator {
 public:
  TesseraAllocatorImpl(Driver& driver, const AllocatorConfig& config);
  ~TesseraAllocatorImpl() override;
  TesseraAllocatorImpl(const TesseraAllocatorImpl&) = delete;
  TesseraAllocatorImpl& operator=(const TesseraAllocatorImpl&) = delete;

  std::string_view name() const noexcept override { return "tessera"; }
  const AllocatorConfig& config() const noexcept override { return config_; }

  Result<Address> allocate(Bytes size, StreamId stream) override;
  Result<void> deallocate(Address address) override;
  Result<void> record_stream(Address address, StreamId stream) override;
  Result<void> empty_cache() override;
  Result<void> set_memory_fraction(double fraction) override;
  AllocatorStats stats() const override;
  TesseraStats tessera_stats() const override;
  AllocatorSnapshot snapshot() const override;
  void add_observer(AllocatorObserver& observer) override;
  std::optional<std::string> check() const override;
  void record_history(std::size_t max_events) override;
  AllocationHistory history() const override;

 private:
  struct LiveEntry {
    Arena* arena = nullptr;
    Block* block = nullptr;
  };

  struct Pending {
    Arena* arena;
    Block* block;
    std::vector<EventId> events;
  };

  // A page to map at `head` for the block being backed.
  struct Assignment {
    std::size_t head;
    Page page;
  };

  // What the backing of one block still needs: [next, end) of each run of slots without a page.
  struct Gap {
    std::size_t next;
    std::size_t end;
  };

  // A page that reclaim may take: wholly inside a free block.
  struct IdlePage {
    Arena* arena;
    std::uint32_t region;
    std::size_t head;
    std::uint32_t granules;
  };

  template <class Notify>
  void notify(Notify&& call) {
    call(stats_);
    call(history_);
    for (AllocatorObserver* observer : observers_) call(*observer);
  }

  // tessera_allocator.cpp
  BlockEvent block_event(const Arena& arena, const Block& block) const;
  Bytes round_size(Bytes size) const;
  Arena* arena_for(StreamId stream, MemoryPool pool);
  Bytes region_span(Bytes at_least) const;
  Result<Address> place(Bytes rounded, Bytes requested, StreamId stream);
  Result<EventId> record_event_on(StreamId stream);
  void destroy_or_defer(EventId event);
  bool device_proven_idle();
  Result<void> process_pending(bool wait);

  // page_backing.cpp
  Result<void> back_with_pages(Arena& arena, const Block& block);
  std::size_t fill_gaps_from_pool();
  Result<void> create_for_gaps(const SlotRange& inner, std::size_t extend_to);
  Result<PageId> create_chunk(std::uint32_t& granules);
  bool pages_split() const noexcept { return chunk_max_granules_ > page_max_granules_; }
  std::size_t growth_room(const Arena& arena, const Block& block, const SlotRange& touched) const;
  Result<std::size_t> reclaim(std::size_t granules);
  void drop_exhausted_candidates();
  Result<void> release_pooled_pages(std::size_t granules_to_keep);
  Result<void> give_back_above(Bytes target);
  void collect_garbage();
  void return_assignments_to_pool();
  std::size_t gap_granules() const;

  // allocator_inspection.cpp
  AllocatorSnapshot snapshot_locked() const;
  Error out_of_memory(Bytes requested, std::string_view why);

  mutable std::mutex mutex_;
  Driver& driver_;
  AllocatorConfig config_;
  Bytes granule_;
  std::uint32_t page_max_granules_;
  std::uint32_t chunk_max_granules_;  // page_max_granules_ where the driver cannot map part of a chunk
  Bytes limit_;
  Bytes held_ = 0;  // pages created and not released: mapped plus pooled
  std::uint64_t clock_ = 0;
  ReclaimList reclaim_list_;  // before arenas_: the arenas unlink their blocks as they go
  std::vector<std::unique_ptr<Arena>> arenas_;
  std::map<std::pair<std::uintptr_t, MemoryPool>, Arena*> arena_by_key_;  // every bit of the stream counts
  std::pair<std::uintptr_t, MemoryPool> last_arena_key_{};
  Arena* last_arena_ = nullptr;
  AddressTable<LiveEntry> live_;
  std::unordered_map<const Block*, std::vector<StreamId>> extra_streams_;
  std::vector<Pending> pending_;
  std::vector<EventId> stale_events_;  // events whose destroy failed: tried again at the next processing
  PagePool pool_;
  StatsObserver stats_;
  HistoryRecorder history_;
  std::vector<AllocatorObserver*> observers_;
  // Scratch, kept to avoid allocations on the slow path.
  std::vector<Gap> gaps_;
  std::vector<Assignment> assignments_;
  std::vector<IdlePage> idle_;
  std::vector<Block*> visited_;
  std::vector<Page> reclaimed_;  // pages reclaim took during one backing (parts of chunks)
};

}  // namespace tessera::core
