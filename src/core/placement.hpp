// Placement (layer 3) for one (stream, pool, tag): where in its arena a block goes. It keeps the free index,
// chooses a free block (best fit, or a good fit where the arena grows down), carves blocks from it and
// merges freed blocks with their free neighbours. Pure host code: it never calls a driver.
//
// Growing direction. A small arena grows up: blocks are carved from the low end of a free block, so a
// region fills from its base, and its frontier (the untouched end, dlmalloc's "top") is its last block. A
// large arena is the mirror image: blocks are carved from the high end, the region fills from its top
// down, and its frontier is its first block. The frontier of each pool is then the opposite kind of sliver
// — a large arena's ends where its lowest live block starts (a tail), a small arena's starts where its
// highest live block ends (a head) — and a block built over slivers at the limit (sliver_sharing.cpp) can
// take one of each, where two heads could not be combined.
#pragma once

#include <cstdint>

#include "core/arena.hpp"
#include "core/block.hpp"
#include "core/free_index.hpp"

namespace tessera::core {

class Placement {
 public:
  // `reclaim_list` is shared by every placement of one allocator: free blocks that may hold idle pages, in
  // the order they were freed. The placement keeps it current as blocks are carved and merged.
  Placement(std::uint32_t index, StreamId stream, SizePool pool, TagId tag, Bytes granule, bool grows_down,
            ReclaimList& reclaim_list, PrivatePoolIndex private_pool = shared_cache, bool whole_pages = false)
      : arena_(index, stream, pool, tag, granule, private_pool),
        grows_down_(grows_down),
        whole_pages_(whole_pages),
        reclaim_list_(&reclaim_list),
        free_(grows_down) {}
  ~Placement();
  Placement(const Placement&) = delete;
  Placement& operator=(const Placement&) = delete;

  Arena& arena() noexcept { return arena_; }
  const Arena& arena() const noexcept { return arena_; }
  bool grows_down() const noexcept { return grows_down_; }
  // Moves every block of the arena that is in a reclaim list into `to`, which its blocks join from now on: a
  // graph pool's free blocks wait in a list that no reclaim reads (placements.hpp). Those moved go to the
  // front, as the oldest freed, in the order they were in.
  void move_reclaim_list(ReclaimList& to);

  // The free block a request of `size` bytes goes into; null when none holds it. Where the arena grows up,
  // the best fit: the smallest free block that holds it, the lowest address among equals (the region's
  // free top competes by size too). Where it grows down, the good fit (below).
  Block* fit(Bytes size) const {
    if (grows_down_) return good_fit(size);
    Block* found = free_.best_fit(size);
    for (const Region& region : arena_.regions()) {
      Block* top = region.last_block;
      if (top->is_free() && top->size >= size && (found == nullptr || top->size < found->size)) found = top;
    }
    return found;
  }

  // Where the arena grows down: the region's free frontier to carve a request of `size` bytes from instead
  // of `fit`, when `fit` is a hole worth sparing — a free block of at least spared_hole_min_granules, at least twice
  // the request, that holds the largest request this arena has served and, carved, would no longer hold it.
  // Null otherwise. Whether the frontier's pages are worth it is the allocator's call (tessera_allocator.cpp).
  Block* frontier_sparing(const Block& fit, Bytes size) const noexcept;
  // Whether frontier_sparing() could spare `fit`: the fast path's one comparison.
  bool may_spare(const Block& fit) const noexcept { return fit.size >= spared_hole_min_granules * arena_.granule(); }
  // Where in a free block a block of `size` bytes is carved.
  Address carve_address(const Block& free_block, Bytes size) const noexcept {
    return grows_down_ ? free_block.end() - size : free_block.address;
  }
  // Whether the `size` bytes that take() would carve from a free block have an accessible page under every
  // slot: carving them needs no driver call. The allocator's fast-path test. Where pages are whole handles,
  // a block over part of a page whose rest lies in the free block is not: the page backer decides whether
  // it shares the page or the page goes back (page_backing.cpp, release_straddled). A page whose rest lies
  // under a live neighbour is pinned already, and shared.
  bool is_cached(const Block& free_block, Bytes size) const noexcept {
    const Region& region = arena_.region_of(free_block);
    const Address at = carve_address(free_block, size);
    const std::size_t first = arena_.slot_of(region, at);
    const std::size_t last = arena_.slot_of(region, at + size - 1);
    if (whole_pages_ && region.page_runs_past(first, last) && runs_into(region, free_block, first, last)) return false;
    if (first == last) return region.is_accessible(first);  // most blocks: one bit
    return region.all_accessible({first, last - first + 1});
  }

  // A newly reserved range: one free block, the region's frontier.
  void add_region(Address base, Bytes span) { arena_.add_region(base, span); }
  // Carves `size` bytes from a free block at carve_address(); the rest stays free. The block returned is live.
  // Its size counts toward the largest request served (frontier_sparing).
  Block* take(Block* free_block, Bytes size, Bytes requested);
  // Carves [at, at + size) from inside a free block as a lent block; what lies before and after stays free.
  Block* lend(Block* free_block, Address at, Bytes size);
  // Makes a live or pending block free again and merges it with its free neighbours.
  Block* give_back(Block* block, std::uint64_t clock);
  // Where the arena grows down: the region's free frontier when it lies directly below `block` (the next
  // blocks are carved from its top, just below `block`); null otherwise.
  Block* frontier_below(const Block& block) const noexcept {
    Block* below = block.previous;
    return grows_down_ && below != nullptr && below->previous == nullptr && below->is_free() ? below : nullptr;
  }
  // A free block that now holds idle pages it was not freed with (pages mapped ahead): the newest freed in
  // the reclaim list, so that reclaim takes them last, as pages freed now.
  void note_idle_pages(Block* block) { make_newest_freed(block); }
  // A freed block that must wait for events: neither live nor reusable.
  static void mark_pending(Block* block) {
    block->live = false;
    block->pending = true;
  }

  // A free frontier stays out of the free index, so that growing and shrinking there costs no index update.
  // Where the arena grows down, the region's last block stays out too (the space its topmost blocks left
  // when freed). The fit weighs the blocks kept out by size beside the index's answer, and takes one only
  // when it is strictly smaller: on ties the holes inside win (chosen by measurement, docs/allocator.md).
  // Every other free block is indexed.
  bool kept_out_of_index(const Block* block) const noexcept {
    return grows_down_ ? (block->previous == nullptr || block->next == nullptr) : block->next == nullptr;
  }
  static bool indexed(const Block* block) { return FreeIndex::contains(block); }
  // Every free block: those in the free index, then those of each region kept out of it.
  template <class Visit>
  void visit_free(Visit&& visit) const {
    free_.visit_all(visit);
    for (const Region& region : arena_.regions()) {
      if (region.first_block->is_free() && !indexed(region.first_block)) visit(region.first_block);
      if (region.last_block != region.first_block && region.last_block->is_free() && !indexed(region.last_block)) {
        visit(region.last_block);
      }
    }
  }

 private:
  // Whether a page under slot `first` or `last` runs on past them into what stays of `free_block`: its
  // low end at or above the free block's start, or its high end at or below the free block's end.
  bool runs_into(const Region& region, const Block& free_block, std::size_t first, std::size_t last) const noexcept {
    const Bytes granule = arena_.granule();
    if (region.is_mapped(first) && region.page_granules_at(first) == 0 &&
        region.slot_address(region.head_of(first), granule) >= free_block.address) {
      return true;
    }
    if (!region.is_mapped(last + 1) || region.page_granules_at(last + 1) != 0) return false;
    const std::size_t head = region.head_of(last + 1);
    return region.slot_address(head + region.page_granules_at(head), granule) <= free_block.end();
  }

  // Among the free blocks that hold `size` and are at most good_fit_limit_ times the best fit's size, the
  // highest: the best fit (the blocks kept out of the index compete by size, and win only when strictly
  // smaller), then up to good_fit_candidates_ of the index's blocks in its order, then those kept out.
  // The free edges (kept out of the index) are weighed by size, never by height: of the edges that hold the
  // request the smallest is the one that competes, and where no indexed block holds it, that edge is the
  // answer even when the other edge is higher (both ends of a region can be free).
  Block* good_fit(Bytes size) const {
    auto fits = [size](const Block* block) { return block->is_free() && block->size >= size; };
    Block* edge_fit = nullptr;
    for (const Region& region : arena_.regions()) {
      Block* last = region.last_block;
      Block* first = region.first_block;
      if (fits(last) && (edge_fit == nullptr || last->size < edge_fit->size)) edge_fit = last;
      if (fits(first) && (edge_fit == nullptr || first->size < edge_fit->size)) edge_fit = first;
    }
    if (free_.empty()) return edge_fit;  // nothing to weigh against: a loop that carves from the frontier
    return good_fit_weighing(size, edge_fit);
  }
  Block* good_fit_weighing(Bytes size, Block* edge_fit) const;

  // Carves `size` bytes from the low end of a free block.
  Block* take_low(Block* free_block, Bytes size, Bytes requested);
  // Carves `size` bytes from the high end of a region's free first block, which stays the frontier.
  Block* take_below_frontier(Block* frontier, Bytes size, Bytes requested);
  // Carves [at, at + size) from inside a free block.
  Block* take_at(Block* free_block, Address at, Bytes size, Bytes requested);
  void recycle(Block* block);
  void make_newest_freed(Block* block);
  void index_insert(Block* block);  // no-op for a block kept out of the index
  void index_erase(Block* block);

  // A large arena takes, among the free blocks up to this many times the best fit's size, the highest: an
  // address-ordered good fit. Blocks that outlive an iteration (optimizer state created in the first step,
  // say) then settle at the top, beside the parameters, instead of in whichever hole fits best amid the
  // activations, and the next iteration's activations find longer runs of free space below them.
  static constexpr Bytes good_fit_limit_ = 2;
  // How many indexed free blocks, smallest first, the good fit weighs at most (with 8, every shared trace
  // has the min_capacity it has with no bound; with 4, one does not).
  static constexpr std::size_t good_fit_candidates_ = 16;
  // The smallest hole frontier_sparing() spares, in granules (128 MiB at CUDA's 2 MiB granule); it spares
  // none for a request of more than half the hole, which would take most of the pool to the frontier.
  // Measured (docs/allocator.md, "Sparing a hole"): with 32 granules, niu_b10_ctx200_train spared holes among
  // its activations and created 132 MiB more at unlimited capacity; with 128 the same traces meet the same
  // bars; without the half, opt-125m created 64 MiB more. In granules so that a small-granule driver (the
  // host driver's 64 KiB) spares holes at the same scale, and the fuzzer reaches the path.
  static constexpr std::size_t spared_hole_min_granules = 64;

  Arena arena_;  // before free_: the index unlinks its blocks before they are destroyed
  bool grows_down_;
  bool whole_pages_;
  ReclaimList* reclaim_list_;
  FreeIndex free_;
  Bytes largest_request_ = 0;  // the largest block take() has carved
};

}  // namespace tessera::core
