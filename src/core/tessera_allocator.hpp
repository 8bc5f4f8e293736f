// Tessera's allocator: the facade (layer 4) that holds the lock, the fast path and the out-of-memory ladder,
// over components that own their state and are reached only through their interfaces (docs/architecture.md
// has the table): the mapper (mapper.hpp, the one part of the core that calls the driver), the budget, the
// placements, the page backer, the pending frees, the shared blocks, the tag book, the private pools and the
// observers. The
// facade's own steps are split by concern:
//   tessera_allocator.cpp     the public contract and the out-of-memory ladder: allocate, free, record_stream,
//                             empty_cache, streams and pending frees
//   sliver_sharing.cpp        the ladder's last step: a block over slivers of half-used granules
//   tag_pause.cpp             pausing and resuming the memory of a tag
//   private_pooling.cpp       allocating to private pools, and what a pool's release gives back
//   allocator_inspection.cpp  stats, snapshot, history, the out-of-memory report and check()
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "core/budget.hpp"
#include "core/ipc_book.hpp"
#include "core/mapper.hpp"
#include "core/page_backer.hpp"
#include "core/pending_frees.hpp"
#include "core/observers.hpp"
#include "core/placements.hpp"
#include "core/private_pools.hpp"
#include "core/shared_blocks.hpp"
#include "core/spin_mutex.hpp"
#include "core/stack_capturer.hpp"
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
  Result<ExportedBlock> export_block(Address address) override;
  Result<Address> import_block(const ExportedBlock& block) override;
  Result<void> close_import(Address address) override;
  std::size_t exported_blocks() const override;
  std::size_t imported_blocks() const override;

 protected:
  Result<void> do_pause(std::string_view tag, bool backup) override;
  Result<void> do_resume(std::string_view tag) override;
  Result<void> do_begin_allocate_to_pool(PoolId pool, StreamFilter accepts, PoolKind kind) override;
  Result<void> do_end_allocate_to_pool(PoolId pool) override;
  Result<void> do_release_pool(PoolId pool) override;
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
    Page page;  // the one granule of a chunk mapped at that slot, as a page
  };

  struct Unbacked {
    std::size_t blocks = 0;
    Bytes bytes = 0;
  };

  // What the observers are told of a block (pending: a free that waits for events).
  static BlockEvent block_event(const Block& block, StreamId stream, SizePool pool, bool pending = false) {
    return BlockEvent{block.address, block.size, block.requested, stream, pool, pending};
  }
  static BlockEvent block_event(const Arena& arena, const Block& block) {
    return block_event(block, arena.stream(), arena.pool());
  }
  static BlockEvent block_event(const SharedBlock& shared, bool pending = false) {
    return block_event(shared.block, shared.stream, shared.pool, pending);
  }
  template <class Notify>
  void notify(Notify&& call) {
    observers_.notify(std::forward<Notify>(call));
  }
  template <class Notify>
  void notify_block(Notify&& call) {
    observers_.notify_block(std::forward<Notify>(call));
  }

  Bytes granule() const noexcept { return mapper_.granule(); }

  // tessera_allocator.cpp
  [[gnu::noinline]] Result<Address> allocate_with_stack(Bytes size, StreamId stream);
  [[gnu::noinline]] Result<Address> allocate_slow(Bytes size, StreamId stream);
  [[gnu::noinline]] Result<void> deallocate_slow(Address address);
  [[gnu::always_inline]] inline Bytes round_size(Bytes size) const;  // tessera_allocator.cpp alone calls it
  SizePool pool_for(Bytes rounded) const noexcept {
    return rounded <= config_.small_max ? SizePool::small : SizePool::large;
  }
  // Null when the tag is paused (the cached placement is never a paused tag's).
  Placement* placement_for(StreamId stream, SizePool pool, TagId tag, PrivatePoolIndex private_pool) {
    const Placements::Key key = Placements::key(stream, pool, tag, private_pool);
    if (Placement* cached = placements_.cached(key)) return cached;
    return find_or_add_placement(key);
  }
  Placement* find_or_add_placement(Placements::Key key);
  Bytes region_span(Bytes at_least) const;
  // The granules a contiguous placement in `fit` (null: none) would still need pages for.
  std::size_t pages_to_place(Placement& placement, const Block* fit, Bytes rounded) const;
  // The frontier a request goes to instead of its cached fit, to spare a hole (placement.hpp,
  // frontier_sparing), or null: the fit it is.
  Block* spare_hole(Placement& placement, const Block& fit, Bytes rounded) const;
  // spare_hole() works while at most this share of the limit is held. Measured (docs/allocator.md, "Sparing
  // a hole"): with any share up to all of it, medium_b4_ctx1024_train needs 2 granules more min_capacity.
  static constexpr double spare_holes_while_held = 0.25;
  // A block in `fit`, the free block the placement chose for the request (null: choose now). take_idle:
  // whether the block may take the pages of idle cached blocks when none can be created.
  Result<Address> place(Placement& placement, Block* fit, Bytes rounded, Bytes requested, StreamId stream,
                        bool take_idle);
  // Records a block just taken as live and tells the observers: the end of every allocation (inline: the
  // end of the fast path too; tessera_allocator.cpp alone calls it).
  [[gnu::always_inline]] inline Address hand_out(Block* block, StreamId stream, SizePool pool);
  Result<void> process_pending(bool wait);

  // sliver_sharing.cpp
  bool can_share_slivers() const noexcept;  // the option, where the driver can map a granule at two addresses
  // The most whole pages a block over slivers may map before the contiguous placement in `fit` takes idle
  // pages: any, unless that placement lacks at most contiguous_lacking_max of the block's granules and at
  // least sliver_block_saving_min fewer than the block spans, and then fewer than it lacks (none, in
  // practice). A block over slivers saves at most two granules of memory; the pages between them are taken
  // from idle blocks, which map pages back when they are reused, and each free takes the block apart again:
  // every use moves them twice.
  std::size_t sliver_middle_before_idle(Placement& placement, const Block* fit, Bytes rounded) const;
  // Measured (docs/benchmarks.md, "A multi-stream workload"): with half instead of two fifths the rl workload
  // needs 2 granules more min_capacity, and so it does with 64 granules and no share; with a third, or 128
  // granules, fsdp at 1.05 x peak live took 184 to 186 ms instead of 166 (before reclaim took a stream's own
  // idle pages first); with no bound at all, niu_b10_ctx200_train_mixed needs 4 granules more.
  static constexpr double contiguous_lacking_max = 0.4;
  static constexpr std::size_t sliver_block_saving_min = 64;
  // Fails (out of memory) when it would need more than max_middle whole pages between the slivers.
  Result<Address> place_over_slivers(Bytes rounded, Bytes requested, StreamId stream, TagId tag,
                                     PrivatePoolIndex private_pool, std::size_t max_middle);
  void find_slivers(StreamId stream, TagId tag, PrivatePoolIndex private_pool, std::vector<Sliver>& heads,
                    std::vector<Sliver>& tails) const;
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
  // Before a pause unmaps: the runs of mapped slots under the tag's graph pools, for the resume.
  void record_graph_runs(TagId tag);
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

  // block_export.cpp
  // An exported block's free, before the ordinary one: proves its streams done, then unmaps and retires its
  // pages. On a failure the block stays live and exported.
  Result<void> retire_exported(Block* block);
  // Refuses a pause of `tag` while it holds an exported live block, naming it.
  Result<void> refuse_pause_if_exported(TagId tag, std::string_view name);
  // private_pooling.cpp
  // Whether blocks of `private_pool` may be built over slivers: not in a graph pool, whose freed blocks'
  // addresses its graph replays into (a shared block's range goes when it is freed).
  bool slivers_allowed_in(PrivatePoolIndex private_pool) const;
  // Whether any block of the pool's arenas is live or waits for events.
  bool holds_blocks(PrivatePoolIndex private_pool) const;
  // A released pool's cached memory goes back to the shared cache: its idle pages into the page pool.
  Result<void> give_back_pool(PrivatePoolIndex private_pool);
  std::optional<std::string> check_private_pools() const;

  // allocator_inspection.cpp
  PoolHeld held_by(SizePool pool) const override;  // PoolProbe: under the lock, as every notify is
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
  // The child's exports are its own: it must not keep its parent's handles live once the parent is gone.
  void after_fork_in_child() noexcept override {
    ipc_.forget_liveness_in_child();
    mutex_.unlock();
  }

  mutable SpinMutex mutex_;
  StackCapturer stacks_;  // read before mutex_ is taken
  AllocatorConfig config_;
  Observers observers_;  // before mapper_, which tells them what it does
  Mapper mapper_;
  Budget budget_;
  PendingFrees pending_;
  Placements placements_;
  support::AddressTable<Block*> live_;  // a block's arena is block->arena: null for a shared block
  SharedBlocks shared_;
  TagBook tags_;
  PrivatePools pools_;
  IpcBook ipc_;
  PageBacker backer_;
  detail::ForkGuardMembership fork_membership_{*this, detail::ForkRank::allocator};  // last: leaves first
};

}  // namespace tessera::core
