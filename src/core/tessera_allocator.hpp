// Tessera's allocator: the policy (layer 4) over placement (placement.hpp), bookkeeping (arena.hpp,
// region.hpp, page_pool.hpp) and the mapper (mapper.hpp), the one part of the core that calls the driver.
// The class is shared by the files that implement one concern each:
//   tessera_allocator.cpp     the public contract and the out-of-memory ladder: allocate, free, record_stream,
//                             empty_cache, streams and pending frees
//   page_backing.cpp          which pages back a block: pooled, new, or taken from idle blocks
//   page_reclaim.cpp          taking idle pages back, giving chunks back, garbage collection
//   sliver_sharing.cpp        the ladder's last step: a block over slivers of half-used granules
//   tag_pause.cpp             pausing and resuming the memory of a tag
//   allocator_inspection.cpp  stats, snapshot, history, the out-of-memory report and check()
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/budget.hpp"
#include "core/mapper.hpp"
#include "core/pending_frees.hpp"
#include "core/observers.hpp"
#include "core/placement.hpp"
#include "core/shared_blocks.hpp"
#include "core/spin_mutex.hpp"
#include "core/tag_book.hpp"
#include "support/address_table.hpp"
#include "support/fork_guard.hpp"
#include "tessera/allocator.hpp"

namespace tessera::core {

class TesseraAllocatorImpl final : public TesseraAllocator, private PoolProbe, private detail::ForkMember {
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
  Usage usage() const override;
  void reset_peak_usage() override;
  AllocatorSnapshot snapshot() const override;
  void add_observer(AllocatorObserver& observer) override;
  std::optional<std::string> check() const override;
  void record_history(std::size_t max_events) override;
  void set_history_stacks(StackCapture capture) override;
  AllocationHistory history() const override;
  std::vector<std::string> tags() const override;

 protected:
  Result<void> do_pause(std::string_view tag, bool backup) override;
  Result<void> do_resume(std::string_view tag) override;
  Result<Address> do_allocate(Bytes size, StreamId stream) override;
  Result<void> do_deallocate(Address address) override;
  Result<void> do_record_stream(Address address, StreamId stream) override;

 private:
  // A sliver: the free bytes from `at` to the end (a head) or from the start (a tail) of a mapped slot.
  struct Sliver {
    Arena* arena = nullptr;
    Block* free_block = nullptr;
    Address at = 0;
    Bytes size = 0;
    Page granule;  // the one granule of a chunk mapped at that slot
  };

  // The backing of one block in progress (page_backing.cpp): what it still needs — [next, end) of each run
  // of slots without a page —, the pages chosen for it, and the pages reclaim took from other blocks on the
  // way (to count what it stitches). Kept between backings only so that its vectors keep their capacity.
  struct Gap {
    std::size_t next;
    std::size_t end;
  };
  struct Backing {
    std::uint32_t page_limit = 1;  // the most granules one page may hold for this block (page_limit_for)
    std::vector<Gap> gaps;
    std::vector<Assignment> assignments;
    std::vector<Page> reclaimed;

    std::size_t missing() const;
    std::uint64_t stitched();  // sorts `reclaimed`
    void start() {
      gaps.clear();
      assignments.clear();
      reclaimed.clear();
    }
  };

  // Every bit of the stream counts; the pool and the tag share one word, so that the fast path compares two.
  using ArenaKey = std::pair<std::uintptr_t, std::uint64_t>;
  static ArenaKey arena_key(StreamId stream, MemoryPool pool, TagId tag) noexcept {
    return {static_cast<std::uintptr_t>(stream), std::uint64_t{tag} << 8 | static_cast<std::uint8_t>(pool)};
  }

  struct Unbacked {
    std::size_t blocks = 0;
    Bytes bytes = 0;
  };

  static BlockEvent block_event(const Arena& arena, const Block& block) {
    return BlockEvent{block.address, block.size, block.requested, arena.stream(), arena.pool()};
  }
  template <class Notify>
  void notify(Notify&& call) {
    observers_.notify(std::forward<Notify>(call));
  }

  // tessera_allocator.cpp
  [[gnu::noinline]] Result<Address> allocate_with_stack(Bytes size, StreamId stream);
  [[gnu::noinline]] Result<Address> allocate_slow(Bytes size, StreamId stream);
  [[gnu::noinline]] Result<void> deallocate_slow(Address address);
  [[gnu::always_inline]] inline Bytes round_size(Bytes size) const;  // tessera_allocator.cpp alone calls it
  MemoryPool pool_for(Bytes rounded) const noexcept {
    return rounded <= config_.small_max ? MemoryPool::small : MemoryPool::large;
  }
  // Null when the tag is paused (last_placement_ is never a paused tag's).
  Placement* placement_for(StreamId stream, MemoryPool pool, TagId tag) {
    const ArenaKey key = arena_key(stream, pool, tag);
    if (last_placement_ != nullptr && last_key_ == key) return last_placement_;  // a loop allocates alike
    return find_or_add_placement(key);
  }
  Placement* find_or_add_placement(ArenaKey key);
  Placement& placement_of(const Arena& arena) { return *placements_[arena.index()]; }
  Bytes region_span(Bytes at_least) const;
  // The granules a contiguous placement in `fit` (null: none) would still need pages for.
  std::size_t pages_to_place(Placement& placement, const Block* fit, Bytes rounded) const;
  // A block in `fit`, the free block the placement chose for the request (null: choose now). take_idle:
  // whether the block may take the pages of idle cached blocks when none can be created.
  Result<Address> place(Placement& placement, Block* fit, Bytes rounded, Bytes requested, StreamId stream,
                        bool take_idle);
  // Records a block just taken as live and tells the observers: the end of every allocation (inline: the
  // end of the fast path too; tessera_allocator.cpp alone calls it).
  [[gnu::always_inline]] inline Address hand_out(Block* block, StreamId stream, MemoryPool pool);
  Result<void> process_pending(bool wait);

  // page_backing.cpp
  Result<void> back_with_pages(Arena& arena, const Block& block, bool take_idle, Backing& backing);
  std::size_t fill_gaps_from_pool(Backing& backing);
  Result<void> create_for_gaps(Backing& backing, const SlotRange& inner, std::size_t extend_to);
  bool pages_split() const noexcept { return chunk_max_granules_ > page_max_granules_; }
  // The largest page for a block of the arena: page_max; under a tag other than the default, up to a chunk.
  // A tagged block is paused and resumed whole, so the inside of it as one page costs no memory that a
  // granule page would save, and a pause unmaps it with one call instead of one per granule.
  std::uint32_t page_limit_for(const Arena& arena) const noexcept {
    return arena.tag() == default_tag ? page_max_granules_ : chunk_max_granules_;
  }
  std::size_t growth_room(const Arena& arena, const Block& block, const SlotRange& touched) const;
  void return_to_pool(Backing& backing);

  // page_reclaim.cpp
  // Takes up to `granules` of idle pages back into the pool, oldest freed first; each page taken is
  // appended to `taken` where given.
  Result<std::size_t> reclaim(std::size_t granules, std::vector<Page>* taken);
  Result<void> give_back_above(Bytes target);
  void collect_garbage();

  // sliver_sharing.cpp
  bool can_share_slivers() const noexcept;
  // Fails (out of memory) when it would need more than max_middle whole pages between the slivers.
  Result<Address> place_over_slivers(Bytes rounded, Bytes requested, StreamId stream, TagId tag,
                                     std::size_t max_middle);
  void find_slivers(StreamId stream, TagId tag, std::vector<Sliver>& heads, std::vector<Sliver>& tails) const;
  Result<void> free_shared(Block* block);
  bool take_apart(Block* block);

  // tag_pause.cpp
  TagId tag_of(const Block* block) const;
  bool is_paused(const Block* block) const;
  Result<void> prove_tag_idle(TagId tag);
  Result<void> back_up_tag(TagId tag, bool every_block);
  Unbacked blocks_without_backup(TagId tag);  // its live blocks that hold no backup
  // Frees the kept backup buffers that no live block of a tag that pauses could take (backup_cache.hpp).
  void trim_backup_cache();
  // Unmaps every page under the tag (its shared blocks first: they map granules of its regions), pooling them.
  Result<void> unmap_tag(TagId tag);
  Result<void> map_tag(TagId tag, std::size_t& missing);
  Result<void> remap_shared(SharedBlock& shared);
  Result<void> restore_backups(TagId tag);
  Result<void> free_paused(Block* block);
  // visit(Arena&, Block&) for every live block of the tag's arenas, lent slivers included.
  template <class Visit>
  void visit_live_blocks(TagId tag, Visit&& visit);
  // visit(Block&) for the caller's live blocks under the tag: its arenas' (not the lent slivers) and its
  // shared blocks.
  template <class Visit>
  void visit_tag_blocks(TagId tag, Visit&& visit);
  Bytes live_bytes_of(TagId tag);

  // allocator_inspection.cpp
  PoolHeld held_by(MemoryPool pool) const override;  // PoolProbe: under the lock, as every notify is
  AllocatorSnapshot snapshot_locked() const;
  std::vector<TagStats> tag_stats() const;
  std::optional<std::string> check_tags() const;
  std::optional<std::string> check_shared(Bytes& requested, Bytes& allocated, std::size_t& live_blocks,
                                          std::size_t lent_blocks, std::size_t& mapped_slots,
                                          std::unordered_map<std::uint64_t, std::size_t>& mapped_of_chunk) const;
  Error out_of_memory(Bytes requested, std::string_view why);

  // fork(): no thread of the child may find the lock held by a thread the child does not have.
  void prepare_fork() noexcept override { mutex_.lock(); }
  void after_fork_in_parent() noexcept override { mutex_.unlock(); }
  void after_fork_in_child() noexcept override { mutex_.unlock(); }

  mutable SpinMutex mutex_;
  // The history's stack capture, read before mutex_ is taken (allocator_inspection.cpp): on only while the
  // history records with a capture set.
  std::atomic<bool> capture_on_{false};
  SpinMutex capture_mutex_;
  std::shared_ptr<const StackCapture> capture_;
  // Takes the stack for the allocation about to be made (capture_on_ was seen set): null when none.
  std::shared_ptr<const Stack> capture_stack();
  AllocatorConfig config_;
  Observers observers_;  // before mapper_, which tells them what it does
  Mapper mapper_;
  Bytes granule_;
  std::uint32_t page_max_granules_;
  std::uint32_t chunk_max_granules_;  // page_max_granules_ where the driver cannot map part of a chunk
  Budget budget_;
  PendingFrees pending_;
  bool share_slivers_;  // the option, where the driver can map a granule at two addresses
  std::uint64_t clock_ = 0;
  ReclaimList reclaim_list_;  // before placements_: they unlink their blocks as they go
  std::vector<std::unique_ptr<Placement>> placements_;  // by Arena::index()
  std::map<ArenaKey, Placement*> placement_by_key_;
  ArenaKey last_key_{};
  Placement* last_placement_ = nullptr;
  support::AddressTable<Block*> live_;  // a block's arena is block->arena: null for a shared block
  SharedBlocks shared_;
  TagBook tags_;
  Backing backing_;
  detail::ForkGuardMembership fork_membership_{*this, detail::ForkRank::allocator};  // last: leaves first
};

}  // namespace tessera::core
