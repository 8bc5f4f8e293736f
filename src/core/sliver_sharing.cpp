// The last step of the out-of-memory ladder: a block over slivers.
//
// Near the limit, much of what a request lacks sits in slivers: the free edges of granules that live
// blocks half use. No contiguous placement can use a sliver whose neighbour in its region is live. But a
// granule may be mapped at two addresses at once (CUDA, the host and sim drivers), and a block's virtual
// range only has to be contiguous: so the request gets a range of its own whose first slot maps the granule
// of a sliver that runs to the end of its slot (the block starts at the sliver's offset), whose last slot
// maps the granule of a sliver that starts its slot, and whose slots between map whole pages, pooled or new.
// That is up to two granules fewer than any contiguous placement. In the home arena the sliver's bytes are
// held by a lent block, so nothing else goes there; no byte is reachable by two blocks.
//
// Stream order: slivers come only from free (not pending) blocks of the request's own stream, so reusing
// them needs no event, as any same-stream reuse. The shared block's mappings are its own, though: its free
// records an event on its stream and on each stream it was recorded on, and when they completed it is taken
// apart — unmapped, its pages pooled, its slivers given back to their arenas, its range released.
#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "core/tessera_allocator.hpp"

namespace tessera::core {

namespace {

bool same_stream(StreamId a, StreamId b) { return static_cast<std::uintptr_t>(a) == static_cast<std::uintptr_t>(b); }

}  // namespace

bool TesseraAllocatorImpl::can_share_slivers() const noexcept {
  const DriverCapabilities& can = mapper_.capabilities();
  return config_.share_slivers && can.partial_map && can.page_multi_mapping;
}

std::size_t TesseraAllocatorImpl::sliver_middle_before_idle(Placement& placement, const Block* fit,
                                                            Bytes rounded) const {
  const std::size_t lacking = pages_to_place(placement, fit != nullptr ? fit : placement.fit(rounded), rounded);
  const std::size_t spanned = (rounded + granule() - 1) / granule();
  if (lacking == 0 || static_cast<double>(lacking) > contiguous_lacking_max * static_cast<double>(spanned) ||
      spanned < lacking + sliver_block_saving_min) {
    return std::numeric_limits<std::size_t>::max();
  }
  return lacking - 1;
}

// Heads: free blocks that start inside a mapped slot and run to its end. Tails: free blocks that end inside
// a mapped slot they cover from its start. Only in arenas of the request's tag: a granule is never under
// live blocks of two tags, so that pausing one never takes the other's bytes. And only of the request's
// private pool: a pool's free bytes go to allocations into it alone.
void TesseraAllocatorImpl::find_slivers(StreamId stream, TagId tag, PrivatePoolIndex private_pool,
                                        std::vector<Sliver>& heads, std::vector<Sliver>& tails) const {
  for (const auto& placement : placements_) {
    const Arena* arena = &placement->arena();
    if (!same_stream(arena->stream(), stream) || arena->tag() != tag || arena->private_pool() != private_pool) continue;
    placement->visit_free([&](const Block* block) {
      const Region& region = arena->region_of(*block);
      auto granule_at = [&](std::size_t slot) -> std::optional<Page> {
        if (!region.is_accessible(slot)) return std::nullopt;
        return region.granule_at(slot);
      };
      Block* free_block = const_cast<Block*>(block);
      if (const Bytes offset = (block->address - region.base) & (granule() - 1); offset != 0) {
        const std::size_t slot = (block->address - region.base) / granule();
        const Address slot_end = region.slot_address(slot + 1, granule());
        if (block->end() >= slot_end) {
          if (auto granule = granule_at(slot)) {
            heads.push_back({const_cast<Arena*>(arena), free_block, block->address, slot_end - block->address, *granule});
          }
        }
      }
      if (const Bytes offset = (block->end() - region.base) & (granule() - 1); offset != 0) {
        const std::size_t slot = (block->end() - region.base) / granule();
        const Address slot_start = region.slot_address(slot, granule());
        if (block->address <= slot_start) {
          if (auto granule = granule_at(slot)) {
            tails.push_back({const_cast<Arena*>(arena), free_block, slot_start, offset, *granule});
          }
        }
      }
    });
  }
}

Result<Address> TesseraAllocatorImpl::place_over_slivers(Bytes rounded, Bytes requested, StreamId stream, TagId tag,
                                                         PrivatePoolIndex private_pool, std::size_t max_middle) {
  std::vector<Sliver> heads;
  std::vector<Sliver> tails;
  find_slivers(stream, tag, private_pool, heads, tails);
  if (heads.empty() && tails.empty()) return make_error(Errc::out_of_memory, "no sliver to share");

  // The plan: the fewest whole pages between; then the least sliver left over beside what it uses (best
  // fit: a sliver only a little larger than needed is used up, the large ones stay for larger requests);
  // then the fewest slivers. For each head (or none), the fewest pages come with the largest tail, and the
  // least left over with the smallest tail that still gives that many: a binary search over tails by size.
  std::sort(tails.begin(), tails.end(), [](const Sliver& a, const Sliver& b) { return a.size < b.size; });
  struct Plan {
    const Sliver* head = nullptr;
    const Sliver* tail = nullptr;
    Bytes head_used = 0;
    Bytes tail_used = 0;
    std::size_t middle = 0;
  };
  auto score = [](const Plan& plan) {
    const Bytes left_over = (plan.head != nullptr ? plan.head->size - plan.head_used : 0) +
                            (plan.tail != nullptr ? plan.tail->size - plan.tail_used : 0);
    const int slivers = (plan.head != nullptr ? 1 : 0) + (plan.tail != nullptr ? 1 : 0);
    return std::tuple{plan.middle, left_over, slivers};
  };
  std::optional<Plan> best;
  auto consider = [&](const Plan& plan) {
    if ((plan.head != nullptr || plan.tail != nullptr) && (!best || score(plan) < score(*best))) best = plan;
  };
  auto plan_with_head = [&](const Sliver* head) {
    Plan plan{head, nullptr, head != nullptr ? std::min(head->size, rounded) : 0, 0, 0};
    const Bytes rest = rounded - plan.head_used;
    plan.middle = (rest + granule() - 1) / granule();
    consider(plan);  // no tail
    if (rest == 0 || tails.empty()) return;
    const Bytes largest = tails.back().size;
    plan.middle = rest > largest ? (rest - largest + granule() - 1) / granule() : 0;
    if (plan.middle * granule() >= rest) return;  // whole pages end it: the plan without a tail
    plan.tail_used = rest - plan.middle * granule();
    plan.tail = &*std::lower_bound(tails.begin(), tails.end(), plan.tail_used,
                                   [](const Sliver& sliver, Bytes size) { return sliver.size < size; });
    consider(plan);
  };
  plan_with_head(nullptr);
  for (const Sliver& head : heads) plan_with_head(&head);
  if (best && best->middle > max_middle) return make_error(Errc::out_of_memory, "slivers would save nothing");
  auto room = [&] { return mapper_.pool().granules() + budget_.room(); };
  if (best && best->middle > room() && config_.reclaim != AllocatorConfig::Reclaim::never) {
    // The idle pages of the free block the contiguous placement would have used in place are idle again.
    if (auto taken = backer_.reclaim(best->middle - room(), nullptr); !taken) return std::move(taken).error();
  }
  if (!best || best->middle > room()) {
    return make_error(Errc::out_of_memory, fmt::format("even over slivers it needs {} more granule(s)",
                                                        best ? best->middle - room() : rounded / granule()));
  }
  const Plan plan = *best;

  // The range: [head slot] [middle slots] [tail slot]; the block starts where the head sliver does.
  const std::size_t first_middle = plan.head != nullptr ? 1 : 0;
  const std::size_t slots = first_middle + plan.middle + (plan.tail != nullptr ? 1 : 0);
  const Bytes span = slots * granule();
  // The pages first, then the range: a failure leaves only pooled pages behind, nothing to release.
  std::vector<Assignment> middle;
  const std::uint32_t page_limit = tag == default_tag ? backer_.page_max_granules() : backer_.chunk_max_granules();
  if (auto made = backer_.pages_for(first_middle, plan.middle, page_limit, middle); !made) {
    Error error = std::move(made).error();
    if (error.code == Errc::out_of_memory) error.message = "the pages between the slivers: " + error.message;
    return error;
  }
  auto base = mapper_.reserve_shared(span);
  if (!base) {
    for (const Assignment& page : middle) mapper_.pool_page(page.page);
    return std::move(base).error();
  }

  auto shared = std::make_unique<SharedBlock>();
  shared->pool = pool_for(rounded);
  shared->stream = stream;
  shared->tag = tag;
  shared->base = *base;
  shared->span = span;
  Block& block = shared->block;
  block.address = *base + (plan.head != nullptr ? granule() - plan.head->size : 0);
  block.size = rounded;
  block.requested = requested;
  // The tail is lent first: when both slivers are the two ends of one free block, the head's block stays.
  auto lend = [&](const Sliver& sliver, Bytes used) {
    return placements_.lend(*sliver.arena, sliver.free_block, sliver.at, used);
  };
  Block* tail_lent = plan.tail != nullptr ? lend(*plan.tail, plan.tail_used) : nullptr;
  Block* head_lent = plan.head != nullptr ? lend(*plan.head, plan.head_used) : nullptr;
  if (head_lent != nullptr) shared->mappings.push_back({0, plan.head->page, plan.head->arena, head_lent, false});
  for (const Assignment& assignment : middle) shared->mappings.push_back({assignment.head, assignment.page, nullptr, nullptr, false});
  if (tail_lent != nullptr) shared->mappings.push_back({slots - 1, plan.tail->page, plan.tail->arena, tail_lent, false});

  Result<void> failure = mapper_.map_shared(*shared);
  SharedBlock& kept = shared_.add(std::move(shared));
  if (!failure.ok()) {
    // Pages never mapped go back to the pool now; the rest is taken apart as after a free (or later, if an
    // unmap fails: the block then waits in the pending list, no page lost).
    std::erase_if(kept.mappings, [&](const SharedMapping& mapping) {
      if (mapping.mapped || mapping.is_sliver()) return false;
      mapper_.pool_page(mapping.page);
      return true;
    });
    if (!take_apart(&block)) pending_.retry_later(nullptr, &block);
    return std::move(failure).error();
  }
  block.live = true;
  block.on_pause = current_on_pause();
  live_.insert(block.address, &block);
  const BlockEvent event = block_event(kept);
  const std::uint64_t slivers = (head_lent != nullptr ? 1 : 0) + (tail_lent != nullptr ? 1 : 0);
  notify([&](AllocatorObserver& observer) {
    observer.shared(slivers);
    observer.block_allocated(event);
  });
  return block.address;
}

// The caller's free: the mappings go only when the work queued on the block so far is done.
Result<void> TesseraAllocatorImpl::free_shared(Block* block) {
  const SharedBlock* shared = shared_.of(block);
  std::vector<StreamId> streams{shared->stream};
  if (const auto* users = pending_.users_of(block)) streams.insert(streams.end(), users->begin(), users->end());
  const BlockEvent event = block_event(*shared, true);
  // On a failure the block stays live: the caller may free it again.
  if (auto waiting = pending_.wait_for(nullptr, block, streams, event); !waiting) return waiting;
  live_.erase(block->address);
  notify([&](AllocatorObserver& observer) { observer.block_freed(event); });
  return {};
}

// Unmaps what is mapped, pools the pages, gives the slivers back and releases the range. False when a driver
// call failed: what was done stays done, and the rest is tried again later.
bool TesseraAllocatorImpl::take_apart(Block* block) {
  SharedBlock* shared = shared_.of(block);
  if (!mapper_.unmap_shared(*shared).ok()) return false;
  // Nothing maps the slivers twice any more: their bytes are free again at home.
  std::erase_if(shared->mappings, [&](const SharedMapping& mapping) {
    if (mapping.is_sliver()) placements_.give_back(mapping.lent);
    return true;
  });
  if (shared->reserved) {
    if (!mapper_.release_shared(shared->base, shared->span)) return false;
    shared->reserved = false;
  }
  shared_.remove(block);
  return true;
}

}  // namespace tessera::core
