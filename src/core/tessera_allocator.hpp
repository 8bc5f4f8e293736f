// The Tessera allocator's class, shared by the files that implement one concern each:
//   tessera_allocator.cpp     the requests: allocate, free, record_stream, empty_cache, placement, streams
//   page_backing.cpp          the pages: where a block's pages come from, reclaim, release, garbage collection
//   allocator_inspection.cpp  stats, snapshot, history, the out-of-memory report and check()
//   sliver_sharing.cpp        the ladder's last step: a block over slivers of half-used granules
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
#include "core/spin_mutex.hpp"
#include "core/stats_observer.hpp"
#include "driver/fork_guard.hpp"
#include "tessera/allocator.hpp"

namespace tessera::core {

class TesseraAllocatorImpl final : public TesseraAllocator, private detail::ForkMember {
 public:
  TesseraAllocatorImpl(Driver& driver, const AllocatorConfig& config);
  ~TesseraAllocatorImpl() override;
  TesseraAllocatorImpl(const TesseraAllocatorImpl&) = delete;
  TesseraAllocatorImpl& operator=(const TesseraAllocatorImpl&) = delete;

  std::string_view name() const noexcept override { return "tessera"; }
  const AllocatorConfig& config() const noexcept override { return config_; }

  Result<void> empty_cache() override;
  Result<void> set_memory_fraction(double fraction) override;
  AllocatorStats stats() const override;
  TesseraStats tessera_stats() const override;
  AllocatorSnapshot snapshot() const override;
  void add_observer(AllocatorObserver& observer) override;
  std::optional<std::string> check() const override;
  void record_history(std::size_t max_events) override;
  AllocationHistory history() const override;

 protected:
  Result<Address> do_allocate(Bytes size, StreamId stream) override;
  Result<void> do_deallocate(Address address) override;
  Result<void> do_record_stream(Address address, StreamId stream) override;

 private:

  // arena null: a shared block, taken apart once the events completed.
  struct Pending {
    Arena* arena;
    Block* block;
    std::vector<EventId> events;
  };

  // A block built over slivers (sliver_sharing.cpp) in a virtual range of its own. Its mappings, in slot
  // order: a granule lent by a home arena (not owned: the home slot maps it too and a lent block there
  // keeps its bytes), then pages of its own, then another lent granule; [first_mapped, end_mapped) of them
  // are mapped.
  struct SharedMapping {
    std::size_t slot;
    Page page;
    Arena* home = nullptr;  // lent: the arena, and the lent block that holds the sliver there
    Block* lent = nullptr;
    bool mapped = false;
  };
  struct SharedBlock {
    Block block;  // arena null
    MemoryPool pool = MemoryPool::large;
    StreamId stream{};
    Address base = 0;
    Bytes span = 0;
    std::vector<SharedMapping> mappings;
    std::size_t first_mapped = 0;
    std::size_t end_mapped = 0;
    bool reserved = true;  // its virtual range not yet released
  };
  // A sliver: the free bytes from `at` to the end (a head) or from the start (a tail) of a mapped slot.
  struct Sliver {
    Arena* arena = nullptr;
    Block* free_block = nullptr;
    Address at = 0;
    Bytes size = 0;
    Page granule;  // the one granule of a chunk mapped at that slot
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
  static BlockEvent block_event(const Arena& arena, const Block& block) {
    return BlockEvent{block.address, block.size, block.requested, arena.stream(), arena.pool()};
  }
  Bytes round_size(Bytes size) const;
  Arena* arena_for(StreamId stream, MemoryPool pool) {
    const std::pair key{static_cast<std::uintptr_t>(stream), pool};
    if (last_arena_ != nullptr && last_arena_key_ == key) return last_arena_;  // a loop allocates alike
    return find_or_add_arena(key);
  }
  Arena* find_or_add_arena(std::pair<std::uintptr_t, MemoryPool> key);
  Bytes region_span(Bytes at_least) const;
  // take_idle: whether the block may take the pages of idle cached blocks when none can be created.
  Result<Address> place(Bytes rounded, Bytes requested, StreamId stream, bool take_idle);
  // Records a block just taken as live and tells the observers: the end of every allocation.
  Address hand_out(Block* block, StreamId stream, MemoryPool pool);
  std::size_t pages_to_place(Bytes rounded, StreamId stream);
  MemoryPool pool_for(Bytes rounded) const noexcept {
    return rounded <= config_.small_max ? MemoryPool::small : MemoryPool::large;
  }
  Result<EventId> record_event_on(StreamId stream);
  void destroy_or_defer(EventId event);
  bool device_proven_idle();
  Result<void> process_pending(bool wait);

  // page_backing.cpp
  Result<void> back_with_pages(Arena& arena, const Block& block, bool take_idle);
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

  // sliver_sharing.cpp
  bool can_share_slivers() const noexcept;
  // Fails (out of memory) when it would need more than max_middle whole pages between the slivers.
  Result<Address> place_over_slivers(Bytes rounded, Bytes requested, StreamId stream, std::size_t max_middle);
  void find_slivers(StreamId stream, std::vector<Sliver>& heads, std::vector<Sliver>& tails) const;
  Result<void> free_shared(Block* block);
  bool take_apart(Block* block);
  SharedBlock* shared_of(const Block* block);

  // allocator_inspection.cpp
  AllocatorSnapshot snapshot_locked() const;
  std::optional<std::string> check_shared(Bytes& requested, Bytes& allocated, std::size_t& live_blocks,
                                          std::size_t lent_blocks, std::size_t& mapped_slots,
                                          std::unordered_map<std::uint64_t, std::size_t>& mapped_of_chunk) const;
  Error out_of_memory(Bytes requested, std::string_view why);

  // fork(): no thread of the child may find the lock held by a thread the child does not have.
  void prepare_fork() noexcept override { mutex_.lock(); }
  void after_fork_in_parent() noexcept override { mutex_.unlock(); }
  void after_fork_in_child() noexcept override { mutex_.unlock(); }

  mutable SpinMutex mutex_;
  Driver& driver_;
  AllocatorConfig config_;
  Bytes granule_;
  std::uint32_t page_max_granules_;
  std::uint32_t chunk_max_granules_;  // page_max_granules_ where the driver cannot map part of a chunk
  Bytes limit_;
  bool share_slivers_;  // the option, where the driver can map a granule at two addresses
  Bytes held_ = 0;  // pages created and not released: mapped plus pooled
  std::uint64_t clock_ = 0;
  ReclaimList reclaim_list_;  // before arenas_: the arenas unlink their blocks as they go
  std::vector<std::unique_ptr<Arena>> arenas_;
  std::map<std::pair<std::uintptr_t, MemoryPool>, Arena*> arena_by_key_;  // every bit of the stream counts
  std::pair<std::uintptr_t, MemoryPool> last_arena_key_{};
  Arena* last_arena_ = nullptr;
  AddressTable<Block*> live_;  // a block's arena is block->arena: null for a shared block
  std::unordered_map<const Block*, std::vector<StreamId>> extra_streams_;
  std::vector<Pending> pending_;
  std::vector<std::unique_ptr<SharedBlock>> shared_;
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
  detail::ForkGuardMembership fork_membership_{*this, detail::ForkRank::allocator};  // last: leaves first
};

}  // namespace tessera::core
