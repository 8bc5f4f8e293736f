// Which pages back a block (PageBacker, page_backer.hpp).
//
// A block whose slots are not all backed gets, for each run of slots without a page, cheapest first:
//   1. pooled pages (created earlier, unmapped now), the largest that fits the hole — or, where the driver
//      maps parts of a chunk, a piece of a larger pooled run;
//   2. with reclaim:first, the pages of idle cached blocks (page_reclaim.cpp), then the pool again;
//   3. new pages while the memory held stays within the limit: one page of up to page_max (a chunk under a
//      tag other than the default) for the slots wholly inside the block (only this block touches them),
//      one granule at the block's shared edges (where pages cannot be cut from a chunk, while at most half
//      the limit is held and the block is small beside the room, the edges not yet backed join its handle) —
//      all cut from one new chunk (up to chunk_max) where the driver maps parts of a chunk, made larger than
//      the block needs while the device has room (growth()), the rest pooled for the blocks that follow;
//   4. with reclaim:when_full, the pages of idle cached blocks, then the pool again (where slivers are shared,
//      only after a block over slivers could not be built: sliver_sharing.cpp);
//   5. where pooled pages cannot be split and are too large for the holes, they go back to the device and
//      granule pages replace them.
// Far from the limit, a block at its region's frontier also maps pooled granules just below itself, where
// the next blocks are carved (map_ahead).
// Taking idle pages is stitching: pages freed in scattered places become one contiguous block.
#include <fmt/format.h>

#include <algorithm>

#include "core/page_backer.hpp"

namespace tessera::core {

PageBacker::PageBacker(Mapper& mapper, const Budget& budget, Placements& placements, Observers& observers,
                       const AllocatorConfig& config)
    : mapper_(mapper),
      budget_(budget),
      placements_(placements),
      observers_(observers),
      config_(config),
      granule_(mapper.granule()),
      page_max_granules_(static_cast<std::uint32_t>(std::clamp<Bytes>(config.page_max / granule_, 1, 1024))),
      chunk_max_granules_(mapper.capabilities().partial_map
                              ? static_cast<std::uint32_t>(std::clamp<Bytes>(config.chunk_max / granule_,
                                                                             page_max_granules_, 1u << 24))
                              : page_max_granules_),
      whole_handle_granules_(static_cast<std::uint32_t>(
          std::clamp<Bytes>(config.chunk_max / granule_, page_max_granules_, 1u << 24))) {}

std::size_t PageBacker::Backing::missing() const {
  std::size_t missing = 0;
  for (const Gap& gap : gaps) missing += gap.end - gap.next;
  return missing;
}

std::size_t PageBacker::fill_gaps_from_pool() {
  Backing& backing = backing_;
  std::size_t filled = 0;
  for (Gap& gap : backing.gaps) {
    while (gap.next < gap.end) {
      const std::size_t most = std::min<std::size_t>(gap.end - gap.next, backing.page_limit);
      auto page = backing.own_chunks ? mapper_.take_pooled_whole(most, pages_split()) : mapper_.take_pooled(most, pages_split());
      if (!page) break;
      backing.assignments.push_back({gap.next, *page});
      gap.next += page->granules;
      filled += page->granules;
    }
  }
  return filled;
}

// How far past the block's last slot a new page may reach: through the unmapped start of the free block
// after it, when the device has room to spare (at most half of the limit held) — growth at the end of a
// region then maps whole large pages, as expandable segments do, instead of a granule at each block's
// edge. Near the limit pages stay within the block, so that no page is left pinned by a neighbour.
std::size_t PageBacker::growth_room(const Arena& arena, const Block& block, const SlotRange& touched) const {
  const Block* after = block.next;
  if (page_max_granules_ == 1 || after == nullptr || !after->is_free() || budget_.above_half()) return 0;
  const Region& region = arena.region_of(block);
  const std::size_t end = std::min(arena.inner_slots(*after).end(), touched.end() + page_max_granules_);
  std::size_t reach = touched.end();
  while (reach < end && !region.is_mapped(reach)) ++reach;
  return reach;
}

// How many granules a new chunk makes beyond the `need` of the block being backed, pooled for the blocks that follow:
// demand so far (a quarter of what is held, at most growth_step) or, for a block larger than all that is held (the
// first, large allocations), as much again as it needs — at most half a chunk, and at most a quarter of what stays free
// under the limit after the block, so that near the limit chunks are cut to the block again and what min_capacity
// counts is unchanged; none for a block that missed by placement, not demand (below). The step is small beside large
// traces and bounds what stays pooled once demand stops growing (avg_frag at unlimited capacity counts it as waste).
// Pooled pages are taken before any page is created, by any block, so the surplus is spent by the next blocks that
// miss; what it costs is memory held early (docs/allocator.md, "Pages and chunks"). Only the default tag's blocks grow
// a chunk, and a tagged block, when allocated (not on resume: TaggedPages), takes pooled pages from chunks none of
// which is mapped before it creates any, and pooled pages of chunks mapped elsewhere only when it can create none:
// while there is room its chunks are its own, so that pausing the tag gives all of them back. A shared block's pages
// (pages_for) are made at the limit, where there is nothing to grow into.
std::size_t PageBacker::growth(std::size_t need, std::size_t room) const {
  if (!pages_split() || !backing_.grows) return 0;
  const std::size_t held = mapper_.held() / granule_;
  const std::size_t step = std::max<std::size_t>(1, growth_step / granule_);
  const std::size_t demand = std::max<std::size_t>(std::min(held / 4, step), held < need ? need : 0);
  if (missed_by_placement(demand)) return 0;
  const std::size_t free_after = room > need ? room - need : 0;
  return std::min<std::size_t>({demand, chunk_max_granules_ / 2, free_after / 4});
}

// Whether the mapped memory already exceeds what is live by more than a growth's worth (`demand` granules, and
// at least 1/idle_share_of_held of all held), far from the limit: then the block misses pages because of where
// it was placed among idle cached ones, not because demand rose, and a chunk grown for it would stay pooled —
// nothing reclaims there. While demand rises (a first iteration), what is mapped and not live is the rounding
// at blocks' edges and a few freed blocks, far below it.
bool PageBacker::missed_by_placement(std::size_t demand) const {
  const Bytes pooled = mapper_.pool().granules() * granule_;
  if (budget_.above_half() || mapper_.held() < pooled) return false;
  const Bytes mapped = mapper_.held() - pooled;
  const Bytes live = observers_.usage().allocated_bytes();
  if (mapped <= live) return false;
  const std::size_t idle = (mapped - live) / granule_;
  return idle > std::max(demand, mapper_.held() / granule_ / idle_share_of_held);
}

Result<void> PageBacker::create_for_gaps(const SlotRange& inner, std::size_t extend_to) {
  Backing& backing = backing_;
  Result<void> failure;
  // The chunk pages are cut from: [next, end) of it still unassigned.
  ChunkId chunk{0};
  std::uint32_t chunk_next = 0;
  std::uint32_t chunk_end = 0;
  std::size_t still_needed = backing.missing();
  std::vector<Gap>& gaps = backing.gaps;
  if (!gaps.empty() && extend_to > gaps.back().end) {
    // Growth past the block stays within half the limit, and its pages run in page_max steps from the
    // last gap's start: what they cover beyond the gap is what the chunk must hold more.
    const Gap& last = gaps.back();
    const std::size_t half_room = budget_.room_below_half();
    extend_to = std::min(extend_to, last.end + (half_room > still_needed ? half_room - still_needed : 0));
    const std::size_t length = last.end - last.next;
    const std::size_t steps = (length + page_max_granules_ - 1) / page_max_granules_;
    still_needed += std::min(extend_to - last.next, steps * page_max_granules_) - length;
  }
  for (Gap& gap : gaps) {
    const bool extends = &gap == &gaps.back() && extend_to > gap.end;
    while (gap.next < gap.end) {
      // The widest page that may start here: on into the free space after the block, or over the slots
      // only this block touches (its unbacked edges too, where it takes them), or one granule at a shared edge.
      std::size_t owned_end = gap.next + 1;
      if (backing.takes_edges) {
        owned_end = gap.end;
      } else if (gap.next >= inner.first && gap.next < inner.end()) {
        owned_end = std::min(gap.end, inner.end());
      }
      const std::size_t page_end = extends ? std::max(extend_to, owned_end) : owned_end;
      auto granules = static_cast<std::uint32_t>(std::min<std::size_t>(page_end - gap.next, backing.page_limit));
      if (chunk_next == chunk_end) {
        const std::size_t room = budget_.room();
        if (room == 0) break;
        // One chunk for what the block still needs and what the blocks after it will likely need (growth),
        // where pages can be cut from it; else one page.
        const std::size_t need = pages_split() ? std::max<std::size_t>(still_needed, granules) : granules;
        auto size = static_cast<std::uint32_t>(
            std::min<std::size_t>({need + growth(need, room), pages_split() ? chunk_max_granules_ : need, room}));
        auto made = mapper_.create_chunk(size);
        if (!made) {
          if (made.error().code != Errc::out_of_memory) failure = std::move(made).error();
          break;
        }
        chunk = *made;
        chunk_next = 0;
        chunk_end = size;
      }
      granules = std::min(granules, chunk_end - chunk_next);
      backing.assignments.push_back({gap.next, Page{chunk, granules, chunk_next}});
      chunk_next += granules;
      still_needed -= std::min<std::size_t>(still_needed, granules);
      gap.next = std::min<std::size_t>(gap.next + granules, gap.end);
    }
    if (!failure.ok() || gap.next < gap.end) break;
  }
  if (chunk_next < chunk_end) mapper_.pool_page(Page{chunk, chunk_end - chunk_next, chunk_next});  // the rest waits
  return failure;
}

// Up to ahead_while_held of the limit, a block backed at its region's frontier where the arena grows down (the next
// blocks are carved just below it) maps pooled granules below itself too, under the same set-access call: the next
// blocks there find their pages mapped and cost no driver call. Granule pages, so that a block carved over one pins
// no more than one granule — but runs, one call each, while at most 1/ahead_runs_share of the limit is held (so that
// all runs together stay under that share); pooled ones only (a chunk's surplus), so that nothing is created for
// them and nothing more is held; at most half of the pool (rounded up), so that the other arenas (the small pool,
// other streams), which cannot use pages mapped here without an unmap, still find pooled pages (all of it raised the
// peak reserved of niu_b10_ctx200_train_mixed by 66 MiB: docs/allocator.md). Only where a block that lacks pages
// takes idle ones back (reclaim:when_full; with `never` these would be stranded here), and not in a private pool,
// whose free blocks keep their pages out of every reclaim's reach. Called before the block's own pages are mapped;
// answers the frontier when it took any.
Block* PageBacker::map_ahead(const Arena& arena, const Block& block, const SlotRange& touched) {
  const Region& region = arena.region_of(block);
  if (!backing_.grows || config_.reclaim != AllocatorConfig::Reclaim::when_full || !granule_pages() ||
      mapper_.held() > budget_.share(ahead_while_held) || arena.private_pool() != shared_cache ||
      region.is_mapped(touched.first)) {
    return nullptr;
  }
  Block* frontier = placements_.of(arena).frontier_below(block);
  if (frontier == nullptr) return nullptr;
  const std::size_t most_below = touched.count >= coalesce_min_granules ? ahead_after_large : ahead_after_small;
  const std::size_t most = std::min<std::size_t>(most_below, (mapper_.pool().granules() + 1) / 2);
  const SlotRange below = arena.inner_slots(*frontier);
  // Far from the limit, each page is the largest pooled run that fits the unmapped slots still in reach:
  // one map call where granule pages made one a granule.
  const bool runs = merges_pages() && far_from_limit(ahead_runs_share);
  std::vector<Assignment> ahead;  // from the block down
  std::size_t slot = touched.first;
  std::size_t taken = 0;
  while (taken < most && slot > below.first && slot - 1 < below.end() && !region.is_mapped(slot - 1)) {
    std::size_t reach = 1;  // unmapped slots just below `slot`
    while (runs && taken + reach < most && slot - reach > below.first && !region.is_mapped(slot - reach - 1)) {
      ++reach;
    }
    auto page = mapper_.take_pooled(reach, pages_split());
    if (!page) break;
    slot -= page->granules;
    taken += page->granules;
    ahead.push_back({slot, *page});
  }
  if (ahead.empty()) return nullptr;
  // Every one lies below the block's pages: in front of them, lowest first, the assignments stay sorted.
  backing_.assignments.insert(backing_.assignments.begin(), ahead.rbegin(), ahead.rend());
  return frontier;
}

// Whether at most 1/`share` of the limit is held: far enough from it that a page larger than a granule
// will not be what a later request lacks. A quarter for merged mappings (room_to_spare), measured: within one
// granule of min_capacity on every shared trace. (Whole handles have their own rule: release_straddled.)
bool PageBacker::far_from_limit(std::size_t share) const { return mapper_.held() <= budget_.limit() / share; }
bool PageBacker::granule_pages() const { return pages_split() && page_max_granules_ == 1; }
bool PageBacker::room_to_spare() const { return merges_pages() && far_from_limit(4); }
// Where chunks can be shared with another process, no page is merged: a page is shared whole, so a block over
// part of a merged page (a smaller block carved where a larger one was freed, or over a run mapped ahead) could
// not be exported, and every block of whole granules in a large arena must be (block_export.cpp).
bool PageBacker::merges_pages() const { return granule_pages() && !mapper_.capabilities().shareable_chunks; }

// Merges the pages of a run of the block's own slots (`inner`: no other block touches them) that are
// consecutive granules of one chunk at consecutive slots into one page, mapped with one call — at least
// coalesce_min_granules of them, where the call saved is worth a page that goes back only whole. The
// block's shared edges keep their granule pages, so a neighbour never pins a merged page. Only with
// one-granule pages (page_max): a larger page_max is the largest page the user allows.
void PageBacker::coalesce(std::vector<Assignment>& assignments, const SlotRange& inner) {
  auto joins = [&](const Assignment& run, const Assignment& next) {
    return next.head == run.head + run.page.granules && next.page.chunk == run.page.chunk &&
           next.page.offset == run.page.offset + run.page.granules && next.head + next.page.granules <= inner.end();
  };
  std::size_t out = 0;
  for (std::size_t i = 0; i < assignments.size();) {
    std::size_t j = i + 1;
    Assignment run = assignments[i];
    if (run.head >= inner.first && run.head + run.page.granules <= inner.end()) {
      while (j < assignments.size() && joins(run, assignments[j])) {
        run.page.granules += assignments[j].page.granules;
        ++j;
      }
    }
    if (run.page.granules >= coalesce_min_granules && j - i > 1) {
      assignments[out++] = run;
    } else {
      for (std::size_t k = i; k < j; ++k) assignments[out++] = assignments[k];
    }
    i = j;
  }
  assignments.resize(out);
}

void PageBacker::return_to_pool() {
  for (const Assignment& assignment : backing_.assignments) mapper_.pool_page(assignment.page);
  backing_.assignments.clear();
}

Result<void> PageBacker::back(Arena& arena, const Block& block, bool take_idle_when_full, TaggedPages tagged) {
  Backing& backing = backing_;
  Region& region = arena.region_of(block);
  const SlotRange touched = arena.touched_slots(block);
  if (!mapper_.capabilities().partial_map && arena.private_pool() == shared_cache) release_straddled(arena, block, touched);
  if (region.all_accessible(touched)) return {};  // the fast path: cached memory

  // Pages left mapped without access by an earlier failure get their access now, or the block fails.
  if (auto done = mapper_.restore_access(region, touched); !done) return done;

  backing.start(page_limit_for(arena));
  const bool far = mapper_.held() <= budget_.share(whole_handles_while_held);
  if (!pages_split() && (arena.tag() != default_tag || far)) backing.page_limit = whole_handle_granules_;
  // Where pages cannot be cut from a chunk, far from the limit: a shared edge in the block's own handle saves
  // a create per block carved at the frontier (half of all creates on the seed's scenarios). That handle goes
  // back only when every block touching it is free, so only while at most half the limit is held and the
  // block is small beside the room left (edge_share_of_room).
  backing.takes_edges = !pages_split() && !budget_.above_half() && touched.count * edge_share_of_room <= budget_.room();
  backing.grows = arena.tag() == default_tag && page_max_granules_ == 1 && config_.garbage_collection_threshold == 0 &&
                  config_.reclaim != AllocatorConfig::Reclaim::first;
  backing.own_chunks = arena.tag() != default_tag && tagged == TaggedPages::own_chunks;
  for (std::size_t slot = touched.first; slot < touched.end(); ++slot) {
    if (region.is_mapped(slot)) continue;
    if (!backing.gaps.empty() && backing.gaps.back().end == slot) {
      backing.gaps.back().end += 1;
    } else {
      backing.gaps.push_back({slot, slot + 1});
    }
  }
  const SlotRange inner = arena.inner_slots(block);
  using Reclaim = AllocatorConfig::Reclaim;
  auto take_idle = [&]() -> Result<void> {
    const std::size_t missing = backing.missing();
    if (missing == 0) return {};
    auto taken = reclaim(missing, &backing.reclaimed, arena.stream());
    if (!taken) return std::move(taken).error();
    fill_gaps_from_pool();
    return {};
  };
  auto fail = [&](Error error) -> Result<void> {
    return_to_pool();
    return error;
  };

  fill_gaps_from_pool();
  if (config_.reclaim == Reclaim::first) {
    if (auto done = take_idle(); !done) return fail(std::move(done).error());
  }
  if (backing.missing() > 0) {
    const std::size_t extend_to = backing.gaps.back().end == touched.end() ? growth_room(arena, block, touched) : 0;
    if (auto done = create_for_gaps(inner, extend_to); !done) return fail(std::move(done).error());
  }
  if (backing.missing() > 0 && backing.own_chunks) {
    backing.own_chunks = false;  // no room for a chunk of its own: pooled pages of chunks shared with others
    fill_gaps_from_pool();
  }
  if (backing.missing() > 0 && config_.reclaim == Reclaim::when_full && take_idle_when_full) {
    if (auto done = take_idle(); !done) return fail(std::move(done).error());
  }
  if (backing.missing() > 0 && !mapper_.pool().empty() && !pages_split()) {
    // What is pooled does not fit the holes and cannot be cut: trade it for granule pages.
    if (auto done = mapper_.release_pooled(0); !done) return fail(std::move(done).error());
    backing.takes_edges = false;
    if (auto done = create_for_gaps(SlotRange{}, 0); !done) return fail(std::move(done).error());
  }
  if (const std::size_t missing = backing.missing(); missing > 0) {
    return fail(make_error(Errc::out_of_memory, fmt::format("needs {} more granule(s) of {} bytes", missing, granule_)));
  }

  // Mapped in address order, so that access is enabled once per run of consecutive new pages.
  std::vector<Assignment>& assignments = backing.assignments;
  std::sort(assignments.begin(), assignments.end(),
            [](const Assignment& a, const Assignment& b) { return a.head < b.head; });
  const std::uint64_t moved = backing.stitched();
  if (room_to_spare()) coalesce(assignments, inner);
  Block* frontier = map_ahead(arena, block, touched);
  auto mapped = mapper_.map_pages(region, assignments);
  assignments.clear();  // on a failure, the mapper pooled them again
  // Reclaim must find the pages mapped ahead (and any a failed rollback left mapped there).
  if (frontier != nullptr) placements_.of(arena).note_idle_pages(frontier);
  if (!mapped) return mapped;
  if (moved > 0) observers_.notify([&](AllocatorObserver& observer) { observer.stitched(moved); });
  collect_garbage();
  return {};
}

// Where handles are mapped whole, a handle that a block covers only in part, the rest of it free beside the
// block, would be pinned whole by the block: none of it can be unmapped while the block lives. That is
// what a handle per block costs near the limit (a free hole inside a live block's handle is what the next
// large request lacks). So such a handle is shared only while what it pins is small beside the room left
// under the limit (straddle_share_of_room); otherwise it is unmapped (after the proof that its stream is
// done with it) and goes back to the device, and the block gets pages of its own. Only a handle whose
// other part lies in free blocks: one under a live neighbour is pinned already. Never in a private pool,
// whose free blocks keep their pages (a graph replays into them). A failed proof or unmap leaves the
// handles not unmapped shared, as far from the limit; a failed release leaves the handle pooled, held.
void PageBacker::release_straddled(Arena& arena, const Block& block, const SlotRange& touched) {
  const Region& region = arena.region_of(block);
  const std::size_t room = budget_.room();
  std::vector<IdlePage> straddled;
  auto consider = [&](std::size_t slot) {
    if (!region.is_mapped(slot)) return;
    const std::size_t head = region.head_of(slot);
    const std::uint32_t granules = region.page_granules_at(head);
    const std::size_t covered = std::min(head + granules, touched.end()) - std::max(head, touched.first);
    const std::size_t pinned = granules - covered;
    if (pinned == 0 || pinned * straddle_share_of_room <= room) return;
    if (!straddled.empty() && straddled.back().head == head) return;  // one page over the whole block
    const Address low = region.slot_address(head, granule_);
    const Address high = region.slot_address(head + granules, granule_);
    const Block* below = block.previous;
    const Block* above = block.next;
    if (low < block.address && (below == nullptr || !below->is_free() || below->address > low)) return;
    if (high > block.end() && (above == nullptr || !above->is_free() || above->end() < high)) return;
    straddled.push_back({&arena, block.region, head, granules});
  };
  consider(touched.first);
  consider(touched.end() - 1);
  if (straddled.empty()) return;
  std::vector<Page> unmapped;
  (void)mapper_.unmap_idle(straddled, &unmapped);
  // Pooled, a handle too large for the holes it would fill would only wait, held.
  for (const Page& page : unmapped) (void)mapper_.release_pooled_chunk(page.chunk);
}

Result<void> PageBacker::pages_for(std::size_t first, std::size_t count, std::uint32_t page_limit,
                                   std::vector<Assignment>& pages) {
  Backing& backing = backing_;
  backing.start(page_limit);
  if (count > 0) backing.gaps.push_back({first, first + count});
  fill_gaps_from_pool();
  Result<void> created;
  if (backing.missing() > 0) created = create_for_gaps(SlotRange{first, count}, 0);
  if (!created.ok() || backing.missing() > 0) {
    return_to_pool();
    if (!created.ok()) return created;
    return make_error(Errc::out_of_memory, fmt::format("needs {} more granule(s) of {} bytes", backing.missing(), granule_));
  }
  std::sort(backing.assignments.begin(), backing.assignments.end(),
            [](const Assignment& a, const Assignment& b) { return a.head < b.head; });
  pages.insert(pages.end(), backing.assignments.begin(), backing.assignments.end());
  backing.assignments.clear();
  return {};
}

Result<Page> PageBacker::page_of_at_most(std::uint32_t granules) {
  if (std::optional<Page> pooled = mapper_.take_pooled(granules, pages_split())) return *pooled;
  auto size = static_cast<std::uint32_t>(std::min<std::size_t>(granules, budget_.room()));
  if (size == 0) {
    return make_error(Errc::out_of_memory, fmt::format("no page of up to {} granule(s): none pooled and no room under "
                                                       "the limit of {} bytes",
                                                       granules, budget_.limit()));
  }
  auto chunk = mapper_.create_chunk(size);  // lowers `size` to what was created
  if (!chunk) return std::move(chunk).error();
  return Page{*chunk, size, 0};
}

// The pages of this block that reclaim took from other blocks during this backing. Pages are parts of
// chunks: a page moved when it overlaps a part that reclaim took (disjoint parts, sorted, so only the
// neighbours of its place can overlap it).
std::uint64_t PageBacker::Backing::stitched() {
  auto before = [](const Page& a, const Page& b) { return a.chunk != b.chunk ? a.chunk < b.chunk : a.offset < b.offset; };
  std::sort(reclaimed.begin(), reclaimed.end(), before);
  auto overlaps = [](const Page& a, const Page& b) {
    return a.chunk == b.chunk && a.offset < b.offset + b.granules && b.offset < a.offset + a.granules;
  };
  std::uint64_t moved = 0;
  for (const Assignment& assignment : assignments) {
    const Page& page = assignment.page;
    const auto next = std::upper_bound(reclaimed.begin(), reclaimed.end(), page, before);
    const bool took = (next != reclaimed.end() && overlaps(*next, page)) ||
                      (next != reclaimed.begin() && overlaps(*std::prev(next), page));
    moved += took ? 1 : 0;
  }
  return moved;
}

}  // namespace tessera::core
