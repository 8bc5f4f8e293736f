#include "baselines/caching_core.hpp"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "support/power2_divisions.hpp"

namespace tessera::baselines {

std::optional<Bytes> round_up_checked(Bytes value, Bytes multiple) noexcept {
  const Bytes remainder = value % multiple;
  if (remainder == 0) return value;
  const Bytes up = multiple - remainder;
  if (value > std::numeric_limits<Bytes>::max() - up) return std::nullopt;
  return value + up;
}

std::optional<Bytes> round_size(Bytes size, std::size_t divisions) noexcept {
  if (size < kMinBlockSize) return kMinBlockSize;
  if (divisions > 1 && size > kMinBlockSize * divisions) {
    return support::round_up_to_power2_division(size, divisions);  // divisions is a power of two
  }
  return round_up_checked(size, kMinBlockSize);
}

std::optional<Bytes> allocation_size(Bytes rounded) noexcept {
  if (rounded <= kSmallSize) return kSmallBuffer;
  if (rounded < kMinLargeAlloc) return kLargeBuffer;
  return round_up_checked(rounded, kRoundLarge);
}

CachingCore::CachingCore(std::string name, Driver& driver, const BaselineOptions& options)
    : name_(std::move(name)), driver_(driver), options_(options), memory_(driver) {}

CachingCore::~CachingCore() = default;

void CachingCore::release_everything() {
  if (released_) return;
  released_ = true;
  // Nothing may be unmapped while the device could still use it.
  (void)driver_.synchronize_device();
  for (StreamEvents& stream : pending_) {
    for (const PendingFree& entry : stream.entries) memory_.release_event(entry.event);
  }
  pending_.clear();
  pending_event_count_ = 0;
  release_model_memory();
  for (std::uint32_t id = 0; id < segments_.size(); ++id) {
    if (segments_[id].live) (void)release_segment(id, false);
  }
}

AllocatorStats CachingCore::stats() const {
  AllocatorStats out = stats_;
  out.reserved_bytes = reserved_ + memory_.leftover_bytes();
  out.peak_reserved_bytes = std::max(out.peak_reserved_bytes, out.reserved_bytes);
  return out;
}

void CachingCore::add_reserved(Bytes bytes) noexcept {
  reserved_ += bytes;
  stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, reserved_ + memory_.leftover_bytes());
}

Bytes CachingCore::allowed_memory_maximum() const noexcept {
  return static_cast<Bytes>(options_.memory_fraction * static_cast<double>(driver_.capacity()));
}

void CachingCore::notify(SegmentEvent::Kind kind, Address address, Bytes size, StreamId stream, PoolKind pool) const {
  if (options_.on_segment) {
    options_.on_segment(SegmentEvent{kind, address, size, stream, pool == PoolKind::small});
  }
}

CachingCore::Search CachingCore::get_free_block(BlockPool& pool, StreamId stream, Bytes size, bool expandable,
                                                BlockId& found) {
  if (gc_enabled()) ++pool.get_free_blocks_call_count;  // PyTorch ages blocks only when GC is on
  auto it = pool.blocks.lower_bound(PoolKey{stream_key(stream), size, 0, no_block});
  if (it == pool.blocks.end() || it->stream != stream_key(stream)) return Search::none;

  if (expandable) {
    // A block followed by unmapped space can grow; for best fit count what it can grow to, and prefer a
    // later block (by size) whose reach is smaller.
    auto reach = [&](const PoolKey& key) {
      const Block& block = blocks_[key.id];
      const bool grows = block.next != no_block && !blocks_[block.next].mapped;
      return block.size + (grows ? blocks_[block.next].size : 0);
    };
    for (auto next = std::next(it);
         next != pool.blocks.end() && next->stream == stream_key(stream) && reach(*next) < reach(*it); ++next) {
      it = next;
    }
  }

  const Bytes max_split = options_.max_split_size;
  if (size < max_split && it->size >= max_split) return Search::refused;  // no oversize block for a small one
  if (size >= max_split && it->size - size >= kLargeBuffer) return Search::refused;  // rounding up, within limits
  found = it->id;
  pool.blocks.erase(it);
  return Search::found;
}

Address CachingCore::alloc_found_block(BlockId id, Bytes size, Bytes requested, bool split, Bytes charged) {
  if (split) {
    // The front keeps the found block's identity; the remainder becomes a new free block after it.
    const BlockId rest = blocks_.create();
    Block& block = blocks_[id];
    Block& remainder = blocks_[rest];
    remainder.address = block.address + size;
    remainder.size = block.size - size;
    remainder.stream = block.stream;
    remainder.segment = block.segment;
    remainder.owner = block.owner;
    remainder.pool = block.pool;
    remainder.mapped = block.mapped;
    remainder.kind = block.kind;
    remainder.prev = id;
    remainder.next = block.next;
    if (block.next != no_block) blocks_[block.next].prev = rest;
    block.next = rest;
    block.size = size;
    insert_into_pool(rest);
  }
  Block& block = blocks_[id];
  block.allocated = true;
  block.requested = requested;
  block.charged = charged != 0 ? charged : block.size;
  live_.insert(block.address, id);
  stats_.allocated_bytes += block.charged;
  stats_.requested_bytes += requested;
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  stats_.peak_requested_bytes = std::max(stats_.peak_requested_bytes, stats_.requested_bytes);
  return block.address;
}

void CachingCore::insert_into_pool(BlockId id) {
  Block& block = blocks_[id];
  BlockPool& pool = pool_of(block);
  if (block.mapped) {
    block.gc_count_base = pool.get_free_blocks_call_count;
    block.position = pool.blocks.insert(key_of(block, id)).first;
  } else {
    pool.unmapped.insert(key_of(block, id));
  }
}

void CachingCore::erase_from_pool(BlockId id) {
  const Block& block = blocks_[id];
  BlockPool& pool = pool_of(block);
  if (block.mapped) {
    pool.blocks.erase(block.position);
  } else {
    pool.unmapped.erase(key_of(block, id));
  }
}

Bytes CachingCore::try_merge(BlockId dst, BlockId src) {
  if (src == no_block) return 0;
  Block& from = blocks_[src];
  Block& into = blocks_[dst];
  if (from.allocated || from.event_count > 0 || !from.stream_uses.empty() || from.mapped != into.mapped) return 0;
  erase_from_pool(src);
  if (into.prev == src) {  // [src dst]
    into.address = from.address;
    into.prev = from.prev;
    if (into.prev != no_block) blocks_[into.prev].next = dst;
  } else {  // [dst src]
    into.next = from.next;
    if (into.next != no_block) blocks_[into.next].prev = dst;
  }
  const Bytes taken = from.size;
  into.size += taken;
  on_merge(dst, src);
  blocks_.destroy(src);
  return taken;
}

void CachingCore::free_block(BlockId id) {
  const BlockId prev = blocks_[id].prev;
  const BlockId next = blocks_[id].next;
  try_merge(id, prev);
  try_merge(id, next);
  insert_into_pool(id);
}

CachingCore::StreamEvents& CachingCore::events_of(StreamId stream) {
  for (StreamEvents& events : pending_) {
    if (events.stream == stream) return events;
  }
  pending_.push_back(StreamEvents{stream, {}});
  return pending_.back();
}

Result<void> CachingCore::insert_events(BlockId id) {
  // Record an event on every stream that used the block. A stream whose event cannot be recorded is waited
  // for instead; if even that fails, nothing changes and the free is refused.
  struct Recorded {
    StreamId stream;
    EventId event;
  };
  std::vector<Recorded> recorded;
  for (StreamId stream : blocks_[id].stream_uses) {
    auto event = memory_.acquire_event();
    if (event) {
      if (driver_.record_event(*event, stream)) {
        recorded.push_back({stream, *event});
        continue;
      }
      memory_.release_event(*event);
    }
    auto synced = driver_.synchronize_stream(stream);
    if (!synced) {
      for (const Recorded& entry : recorded) memory_.release_event(entry.event);
      return std::move(synced).error();
    }
  }
  for (const Recorded& entry : recorded) {
    events_of(entry.stream).entries.push_back({entry.event, id});
    ++blocks_[id].event_count;
    ++pending_event_count_;
  }
  blocks_[id].stream_uses.clear();
  return {};
}

Result<void> CachingCore::do_deallocate(Address address) {
  const BlockId* found = live_.find(address);
  if (found == nullptr) {
    return make_error(
        Errc::not_found,
        fmt::format("{}: deallocate of {:#x}, which is not a live block of this allocator", name_, address));
  }
  const BlockId id = *found;  // read before insert_events: the table owns the pointer
  if (!blocks_[id].stream_uses.empty()) {
    auto inserted = insert_events(id);
    if (!inserted) return std::move(inserted).error();
  }
  live_.erase(address);
  Block& block = blocks_[id];
  block.allocated = false;
  stats_.allocated_bytes -= block.charged;
  if (block.event_count == 0) complete_free(id, true);
  return {};
}

void CachingCore::complete_free(BlockId id, bool direct) {
  stats_.requested_bytes -= blocks_[id].requested;
  blocks_[id].requested = 0;
  return_block(id, direct);
}

Result<void> CachingCore::do_record_stream(Address address, StreamId stream) {
  const BlockId* found = live_.find(address);
  if (found == nullptr) {
    return make_error(
        Errc::not_found,
        fmt::format("{}: record_stream on {:#x}, which is not a live block of this allocator", name_, address));
  }
  Block& block = blocks_[*found];
  if (stream == block.stream) return {};  // uses on the allocation stream need no event
  if (std::find(block.stream_uses.begin(), block.stream_uses.end(), stream) == block.stream_uses.end()) {
    block.stream_uses.push_back(stream);
  }
  return {};
}

void CachingCore::process_events() {
  if (pending_event_count_ == 0) return;
  for (std::size_t s = 0; s < pending_.size();) {
    std::deque<PendingFree>& entries = pending_[s].entries;
    while (!entries.empty()) {
      const PendingFree entry = entries.front();
      auto done = driver_.query_event(entry.event);
      if (!done || !*done) break;  // not ready (or unknown): keep waiting, later streams are not blocked
      entries.pop_front();
      --pending_event_count_;
      memory_.release_event(entry.event);
      if (--blocks_[entry.block].event_count == 0) complete_free(entry.block, false);
    }
    if (entries.empty()) {
      if (s + 1 != pending_.size()) pending_[s] = std::move(pending_.back());
      pending_.pop_back();
    } else {
      ++s;
    }
  }
}

void CachingCore::synchronize_and_free_events() {
  stats_.num_sync_all_streams += 1;
  for (std::size_t s = 0; s < pending_.size();) {
    std::deque<PendingFree>& entries = pending_[s].entries;
    while (!entries.empty()) {
      const PendingFree entry = entries.front();
      if (!driver_.synchronize_event(entry.event)) break;  // unproven: the block stays out of the cache
      entries.pop_front();
      --pending_event_count_;
      memory_.release_event(entry.event);
      if (--blocks_[entry.block].event_count == 0) complete_free(entry.block, false);
    }
    if (entries.empty()) {
      if (s + 1 != pending_.size()) pending_[s] = std::move(pending_.back());
      pending_.pop_back();
    } else {
      ++s;
    }
  }
}

Result<std::uint32_t> CachingCore::create_segment(Bytes size, Bytes page_size, AccessCalls access, StreamId stream,
                                                  PoolKind pool, std::uint32_t owner) {
  const std::optional<Bytes> mapped = round_up_checked(size, page_size);  // page sizes need not be powers of two
  if (!mapped || *mapped > driver_.capacity()) {
    return make_error(Errc::out_of_memory, fmt::format("{}: a segment of {} bytes is larger than the device ({} bytes)",
                                                       name_, size, driver_.capacity()));
  }
  auto base = memory_.reserve(*mapped);
  if (!base) return std::move(base).error();
  std::vector<ChunkId> pages(*mapped / page_size);
  auto done = memory_.create_and_map(*base, page_size, access, pages);
  if (!done) {
    memory_.release_reservation(*base);
    return std::move(done).error();
  }
  std::uint32_t id;
  if (!free_segments_.empty()) {
    id = free_segments_.back();
    free_segments_.pop_back();
  } else {
    id = static_cast<std::uint32_t>(segments_.size());
    segments_.emplace_back();
  }
  segments_[id] = Segment{*base, size, page_size, std::move(pages), stream, pool, owner, true};
  count_segment(owner, true);
  add_reserved(size);
  stats_.num_device_alloc += 1;
  notify(SegmentEvent::Kind::alloc, *base, size, stream, pool);
  return id;
}

BlockId CachingCore::make_segment_block(std::uint32_t segment_id) {
  const Segment& seg = segments_[segment_id];
  const BlockId id = blocks_.create();
  Block& block = blocks_[id];
  block.address = seg.base;
  block.size = seg.size;
  block.stream = seg.stream;
  block.segment = segment_id;
  block.owner = seg.owner;
  block.pool = seg.pool;
  return id;
}

bool CachingCore::release_segment(std::uint32_t segment_id, bool synchronize) {
  if (synchronize && !driver_.synchronize_device()) return false;
  Segment& seg = segments_[segment_id];
  notify(SegmentEvent::Kind::free, seg.base, seg.size, seg.stream, seg.pool);
  for (std::size_t i = 0; i < seg.pages.size(); ++i) {
    memory_.unmap_and_release(seg.base + i * seg.page_size, seg.pages[i], seg.page_size);
  }
  memory_.release_reservation(seg.base);
  remove_reserved(seg.size);
  stats_.num_device_free += 1;
  count_segment(seg.owner, false);
  seg = Segment{};
  free_segments_.push_back(segment_id);
  return true;
}

namespace {
std::string describe_pool(PoolId id) { return fmt::format("pool ({}, {})", id.first, id.second); }
}  // namespace

Result<void> CachingCore::do_begin_allocate_to_pool(PoolId id, StreamFilter accepts, tessera::PoolKind /*kind*/) {
  // PyTorch keeps graph pools and MemPools alike: both hold their blocks until released.
  std::uint32_t owner = 0;
  if (auto found = pools_in_use_.find(id); found != pools_in_use_.end()) {
    owner = found->second;
    // PyTorch refuses a second capture into a pool that is being captured into.
    for (const Capture& capture : captures_) {
      if (capture.owner == owner) {
        return make_error(Errc::invalid_argument,
                          fmt::format("{}: begin_allocate_to_pool of {}, which is already being allocated to", name_,
                                      describe_pool(id)));
      }
    }
    ++private_pools_[owner - 1].uses;  // another capture shares the pool
  } else {
    // A new pool (an id whose earlier pool was released names a new one), in the first free slot.
    std::size_t slot = 0;
    while (slot < private_pools_.size() && private_pools_[slot].live) ++slot;
    owner = static_cast<std::uint32_t>(slot + 1);
    if (slot == private_pools_.size()) private_pools_.emplace_back(&node_pool_, owner);
    PrivatePool& pool = private_pools_[slot];
    pool.id = id;
    pool.uses = 1;
    pool.segments = 0;
    pool.live = true;
    pools_in_use_.emplace(id, owner);
  }
  captures_.push_back(Capture{owner, std::move(accepts)});
  return {};
}

Result<void> CachingCore::do_end_allocate_to_pool(PoolId id) {
  auto found = pools_in_use_.find(id);
  auto capture = found == pools_in_use_.end()
                     ? captures_.end()
                     : std::find_if(captures_.begin(), captures_.end(),
                                    [&](const Capture& entry) { return entry.owner == found->second; });
  if (capture == captures_.end()) {
    return make_error(Errc::not_found, fmt::format("{}: end_allocate_to_pool of {}, which is not being allocated to",
                                                   name_, describe_pool(id)));
  }
  captures_.erase(capture);
  return {};
}

Result<void> CachingCore::do_release_pool(PoolId id) {
  auto found = pools_in_use_.find(id);
  if (found == pools_in_use_.end()) {
    return make_error(Errc::not_found,
                      fmt::format("{}: release_pool of {}, which no pool has (never begun, or released already)",
                                  name_, describe_pool(id)));
  }
  const std::uint32_t owner = found->second;
  PrivatePool& pool = private_pools_[owner - 1];
  if (pool.uses == 1 && std::any_of(captures_.begin(), captures_.end(),
                                    [&](const Capture& entry) { return entry.owner == owner; })) {
    return make_error(Errc::invalid_argument,
                      fmt::format("{}: release_pool of {}, which is still being allocated to (end it first)", name_,
                                  describe_pool(id)));
  }
  // Nothing is given back here, as in PyTorch: the pool becomes freeable, and release_cached_blocks frees its
  // cached segments (and erases it once it holds none).
  if (--pool.uses == 0) pools_in_use_.erase(found);
  return {};
}

BlockPool& CachingCore::capture_pool_for(Bytes rounded, StreamId stream) {
  for (const Capture& capture : captures_) {
    if (capture.accepts(stream)) {
      PrivatePool& pool = private_pools_[capture.owner - 1];
      return rounded <= kSmallSize ? pool.small : pool.large;
    }
  }
  return pool_for(rounded);
}

void CachingCore::count_segment(std::uint32_t owner, bool made) noexcept {
  if (owner == 0) return;
  std::size_t& segments = private_pools_[owner - 1].segments;
  segments = made ? segments + 1 : segments - 1;
}

Error CachingCore::out_of_memory_unroundable(Bytes size, StreamId stream) {
  stats_.num_ooms += 1;
  return make_error(Errc::out_of_memory,
                    fmt::format("{}: out of memory: tried to allocate {} bytes on stream {}, which cannot be rounded "
                                "to a segment below 2^64 bytes; device capacity {}",
                                name_, size, static_cast<std::uintptr_t>(stream), driver_.capacity()));
}

Error CachingCore::out_of_memory(Bytes size, Bytes rounded, Bytes segment_size, StreamId stream) {
  stats_.num_ooms += 1;
  Bytes cached = 0;
  for (const BlockPool* pool : {&small_, &large_}) {
    for (const PoolKey& key : pool->blocks) cached += key.size;
  }
  return make_error(
      Errc::out_of_memory,
      fmt::format("{}: out of memory: tried to allocate {} bytes (rounded to {}, segment of {}) on "
                  "stream {}; {} bytes allocated, {} reserved, {} free in the cache; device "
                  "capacity {}",
                  name_, size, rounded, segment_size, static_cast<std::uintptr_t>(stream), stats_.allocated_bytes,
                  reserved_ + memory_.leftover_bytes(), cached, driver_.capacity()));
}

}  // namespace tessera::baselines
