// Pages going back: taken from idle cached blocks into the pool (reclaim), and chunks given back to the
// device (empty_cache, a lowered memory fraction, garbage collection).
//
// A page is idle when it lies wholly inside a free block; the reclaim list holds the free blocks that may
// hold idle pages, oldest freed first. The mapper proves the device done with them before any unmap.
#include <algorithm>

#include "core/page_backer.hpp"

namespace tessera::core {

Result<std::size_t> PageBacker::reclaim(std::size_t granules, std::vector<Page>* taken, std::optional<StreamId> own) {
  return reclaim_from(placements_.reclaim_list(), granules, taken, own);
}

// A stream's own idle pages go first where it asks: it freed them itself, and the other streams' would be
// missed there again — on the fsdp workload at 1.05 x peak live, the pages moved between the streams' arenas
// every step, each move proven by a synchronize (docs/benchmarks.md, "A multi-stream workload").
Result<std::size_t> PageBacker::reclaim_from(ReclaimList& reclaim_list, std::size_t granules,
                                             std::vector<Page>* taken, std::optional<StreamId> own) {
  std::vector<IdlePage> idle;
  std::vector<Block*> visited;
  std::size_t found = 0;
  auto visit = [&](Block& block) {
    const Region& region = block.arena->region_of(block);
    const SlotRange inner = region.within_table(block.arena->inner_slots(block));
    for (std::size_t slot = inner.first; slot < inner.end() && found < granules;) {
      const std::uint32_t size = region.page_granules_at(slot);
      if (size > 0 && slot + size <= inner.end()) {
        idle.push_back({block.arena, block.region, slot, size});
        found += size;
        slot += size;
      } else {
        ++slot;
      }
    }
    visited.push_back(&block);
  };
  for (const bool own_pass : {true, false}) {
    if (own_pass && !own) continue;
    for (Block& block : reclaim_list) {
      if (found >= granules) break;
      if (own && (block.arena->stream() == *own) != own_pass) continue;
      visit(block);
    }
  }
  // Blocks visited that have no whole page left inside them leave the reclaim list until they are freed or
  // merged again, so that the list stays short.
  auto drop_exhausted = [&] {
    for (Block* block : visited) {
      if (!block->arena->holds_whole_page(*block)) reclaim_list.erase(reclaim_list.iterator_to(*block));
    }
  };
  if (idle.empty()) {
    drop_exhausted();
    return std::size_t{0};
  }
  Mapper::Unmapped unmapped = mapper_.unmap_idle(idle, taken);
  if (!unmapped.proven) return std::move(unmapped.failure).error();
  drop_exhausted();
  if (!unmapped.failure.ok()) return std::move(unmapped.failure).error();
  return unmapped.granules;
}

// Pooled chunks go back first; then idle pages are taken back, oldest first, until enough whole chunks
// are idle to go back too (a chunk partly under a live block stays, its idle pages pooled for reuse).
Result<void> PageBacker::give_back_above(Bytes target) {
  while (mapper_.held() > target) {
    const std::size_t excess = (mapper_.held() - target + granule_ - 1) / granule_;
    const std::size_t pooled = mapper_.pool().granules();
    if (auto done = mapper_.release_pooled(pooled > excess ? pooled - excess : 0); !done) return done;
    if (mapper_.held() <= target) break;
    auto taken = reclaim((mapper_.held() - target + granule_ - 1) / granule_, nullptr);
    if (!taken) return std::move(taken).error();
    if (*taken == 0) return mapper_.release_pooled(0);
  }
  return {};
}

// PyTorch's garbage_collection_threshold: past it, idle pages go back to the device, oldest first. A
// failure here does not fail the allocation that triggered it; the pages simply stay held.
void PageBacker::collect_garbage() {
  if (config_.garbage_collection_threshold <= 0.0) return;
  const Bytes target = budget_.share(config_.garbage_collection_threshold);
  if (mapper_.held() > target) (void)give_back_above(target);
}

}  // namespace tessera::core
