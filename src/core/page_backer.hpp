// The page backer (policy, layer 4): which pages back a block — pooled, new, or taken from idle cached
// blocks (page_backing.cpp) — and which go back: idle pages reclaimed into the pool, chunks given back to
// the device (page_reclaim.cpp). It decides; the mapper makes every driver call and alone changes the page
// pool. It keeps one scratch backing between calls only so that its vectors keep their capacity: no call
// here calls another that uses it (reclaim does not back), so nothing nests on it.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/budget.hpp"
#include "core/mapper.hpp"
#include "core/observers.hpp"
#include "core/placements.hpp"
#include "tessera/allocator.hpp"

namespace tessera::core {

class PageBacker {
 public:
  PageBacker(Mapper& mapper, const Budget& budget, Placements& placements, Observers& observers,
             const AllocatorConfig& config);
  PageBacker(const PageBacker&) = delete;
  PageBacker& operator=(const PageBacker&) = delete;

  // The largest page (page_max), and the largest chunk (chunk_max; the page where the driver cannot map
  // part of a chunk), in granules.
  std::uint32_t page_max_granules() const noexcept { return page_max_granules_; }
  std::uint32_t chunk_max_granules() const noexcept { return chunk_max_granules_; }
  // Whether pooled runs may be cut into smaller pages (the driver maps parts of a chunk).
  bool pages_split() const noexcept { return chunk_max_granules_ > page_max_granules_; }
  // The largest page for a block of the arena: page_max; under a tag other than the default, up to a chunk.
  // A tagged block is paused and resumed whole, so the inside of it as one page costs no memory that a
  // granule page would save, and a pause unmaps it with one call instead of one per granule.
  std::uint32_t page_limit_for(const Arena& arena) const noexcept {
    return arena.tag() == default_tag ? page_max_granules_ : chunk_max_granules_;
  }

  // Which pooled pages a tagged block takes before it creates a chunk (a default-tag block takes any).
  enum class TaggedPages : std::uint8_t {
    // An allocation: only chunks none of which is mapped, so that pausing the tag gives all of them back
    // (a default-tag chunk grows past its block, and its surplus would otherwise pin it).
    own_chunks,
    // A resume: any, first those it took from idle blocks into the pool for the tag's blocks (tag_pause.cpp);
    // creating chunks beside them would leave those pooled and held.
    any,
  };
  // Maps a page under every slot `block` touches that has none (the order in page_backing.cpp). take_idle:
  // whether it may take the pages of idle cached blocks when no page can be created. On a failure nothing
  // of it stays mapped or taken: the pages obtained on the way are pooled.
  Result<void> back(Arena& arena, const Block& block, bool take_idle, TaggedPages tagged = TaggedPages::own_chunks);
  // Pages of at most `page_limit` granules for slots [first, first + count) of a range of the caller's own
  // (a shared block's middle): pooled, then new within the limit, appended to `pages` in slot order. On a
  // failure none is appended and those obtained are pooled again.
  Result<void> pages_for(std::size_t first, std::size_t count, std::uint32_t page_limit,
                         std::vector<Assignment>& pages);
  // One page of at most `granules`, pooled or else cut from a new chunk within the limit: out of memory when
  // neither is possible.
  Result<Page> page_of_at_most(std::uint32_t granules);

  // Takes up to `granules` of idle pages back into the pool, oldest freed first — where `own` is given, those
  // of that stream's arenas before any other's; each page taken is appended to `taken` where given.
  Result<std::size_t> reclaim(std::size_t granules, std::vector<Page>* taken,
                              std::optional<StreamId> own = std::nullopt);
  // The same from `list` (a pool's held list, placements.hpp) instead of the reclaim list.
  Result<std::size_t> reclaim_from(ReclaimList& list, std::size_t granules, std::vector<Page>* taken,
                                   std::optional<StreamId> own = std::nullopt);
  // Gives pooled chunks, then idle pages as whole chunks, back to the device until at most `target` bytes
  // are held or nothing more can go.
  Result<void> give_back_above(Bytes target);
  // PyTorch's garbage_collection_threshold: past it, idle pages go back, oldest first. Never fails the
  // caller: pages that cannot go back stay held.
  void collect_garbage();

 private:
  // What a block in progress still needs — [next, end) of each run of slots without a page —, the pages
  // chosen for it, and the pages reclaim took from other blocks on the way (to count what it stitches).
  struct Gap {
    std::size_t next;
    std::size_t end;
  };
  struct Backing {
    std::uint32_t page_limit = 1;  // the most granules one page may hold for this block (page_limit_for)
    bool grows = false;            // whether a new chunk may grow past what the block needs (growth())
    bool own_chunks = false;       // pooled pages only from chunks none of which is mapped (a tag's block)
    bool takes_edges = false;      // a new handle runs over the block's unbacked shared edges too
    std::vector<Gap> gaps;
    std::vector<Assignment> assignments;
    std::vector<Page> reclaimed;

    std::size_t missing() const;
    std::uint64_t stitched();  // sorts `reclaimed`
    void start(std::uint32_t limit) {
      page_limit = limit;
      grows = false;
      own_chunks = false;
      takes_edges = false;
      gaps.clear();
      assignments.clear();
      reclaimed.clear();
    }
  };

  std::size_t fill_gaps_from_pool();
  std::size_t growth(std::size_t need, std::size_t room) const;
  bool missed_by_placement(std::size_t demand) const;
  bool far_from_limit(std::size_t share) const;
  // One-granule pages cut from chunks: the rules that merge or map ahead work only there.
  bool granule_pages() const;
  // Whether pages may be merged (coalesce, runs ahead): granule pages, and no chunk shared with other processes.
  bool merges_pages() const;
  bool room_to_spare() const;
  void coalesce(std::vector<Assignment>& assignments, const SlotRange& inner);
  // The fewest granules merged into one page by coalesce(): the map calls it saves (1.45 us each, modelled)
  // must be worth a page that is unmapped only whole (8 put niu_b10_ctx150_train 4 granules over its
  // min_capacity).
  static constexpr std::uint32_t coalesce_min_granules = 16;
  // The most a new chunk grows past a block for demand so far (growth()).
  static constexpr Bytes growth_step = 64 * MiB;
  // A chunk grows for none of a block's misses while more than a growth's worth, and more than this share of
  // what is held, is mapped and not live (missed_by_placement()). The share keeps a large trace's rounding at
  // blocks' edges (some 80 MiB of cs336-xl's 41 GiB) from passing for idle pages. Measured (docs/allocator.md,
  // "Pages and chunks"): 32 to 128 meet the same bars; with no share, cs336-xl_b4_ctx256_fwd_mixed took 178 ->
  // 326 ms under per_call; with the rule near the limit too, fsdp at 1.1 x peak live took 63 -> 96 ms.
  static constexpr std::size_t idle_share_of_held = 64;
  Result<void> create_for_gaps(const SlotRange& inner, std::size_t extend_to);
  Block* map_ahead(const Arena& arena, const Block& block, const SlotRange& touched);
  // The most granules map_ahead() maps below a block. Below a block of fewer than coalesce_min_granules
  // (granule pages), as many as cost one set-access call in map calls (24 x 1.45 us < 36 us, modelled):
  // what a next block of up to that many then saves. Below a larger block, whose own run is one mapping,
  // 5: each costs a map call that a next large block's own run would have covered. Measured
  // (docs/allocator.md, "Pages and chunks"): 4 leaves the attention micro-benchmark above the pytorch
  // model's time; more costs the workloads of large blocks map calls.
  static constexpr std::size_t ahead_after_small = 24;
  static constexpr std::size_t ahead_after_large = 5;
  // map_ahead() works while at most this share of the limit is held. Its pages are pooled ones, held
  // already, and reclaim takes them back as any idle page, so near the limit it spares the next block a
  // set-access call at the risk of an unmap. Measured (docs/benchmarks.md, "Warm-up driver calls"): with a
  // quarter, the former bound, medium_b4_ctx128_train at 1.05 x peak live made 791 set-access calls against
  // 340 with room; with 0.98 or more, gpt2small needed one granule more min_capacity.
  static constexpr double ahead_while_held = 0.95;
  // map_ahead() maps runs of granules as one page each while at most 1/ahead_runs_share of the limit is
  // held, granule pages past it. A run goes back only whole, so merged pages must stay few beside the limit.
  // Measured (docs/allocator.md, "Pages and chunks"): with 32, min_capacity is unchanged on all 27 traces and
  // small_b4_ctx128_fwd_bf16 made 233 calls instead of 465; with 16, medium_b4_ctx128_train needed 3 granules
  // more, with 4 gpt2small 3 more.
  static constexpr std::size_t ahead_runs_share = 32;
  std::size_t growth_room(const Arena& arena, const Block& block, const SlotRange& touched) const;
  void return_to_pool();
  void release_straddled(Arena& arena, const Block& block, const SlotRange& touched);
  // Where handles are mapped whole: a block's own slots are one handle while at most this share of the
  // limit is held, and a block may cover part of a free handle (sharing it) only while the part it
  // pins is at most 1/straddle_share_of_room of the room left under the limit. Measured on the bench-seed
  // scenarios and the shared traces on the ascend platform (docs/benchmarks.md): with 16 one scenario needs
  // 0.56% more min_capacity; with 64 three take more than twice the pytorch model's driver time.
  static constexpr double whole_handles_while_held = 0.9;
  static constexpr std::size_t straddle_share_of_room = 32;
  // A block's handle takes in its unbacked shared edges while at most half the limit is held and the
  // block is at most 1/edge_share_of_room of the room left. Measured likewise: with 32 to 128 a 255-granule
  // block of the attention micro-benchmark, or a smaller one of three other traces, pinned under a live
  // neighbour's edge, needed 1 to 249 granules more min_capacity; 256 costs none on any trace.
  static constexpr std::size_t edge_share_of_room = 256;

  Mapper& mapper_;
  const Budget& budget_;
  Placements& placements_;
  Observers& observers_;
  const AllocatorConfig& config_;
  Bytes granule_;
  std::uint32_t page_max_granules_;
  std::uint32_t chunk_max_granules_;
  // Where the driver maps whole handles only (no partial_map): the largest handle made for the slots only
  // one block touches, far from the limit or under a tag (chunk_max in granules) — one create and one map
  // call for them instead of one each per granule.
  std::uint32_t whole_handle_granules_;
  Backing backing_;
};

}  // namespace tessera::core
