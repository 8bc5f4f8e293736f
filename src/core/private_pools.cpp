#include "core/private_pools.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

namespace tessera::core {

std::string PrivatePools::describe(PoolId id) { return fmt::format("pool ({}, {})", id.first, id.second); }

Result<PrivatePools::Begun> PrivatePools::begin(PoolId id, StreamFilter accepts, PoolKind kind) {
  Begun begun;
  if (auto found = by_id_.find(id); found != by_id_.end()) {
    Pool& existing = pool(found->second);
    if (existing.kind != kind) {
      return make_error(Errc::invalid_argument,
                        fmt::format("tessera: {} is a {} pool; it cannot be begun as a {} one", describe(id),
                                    existing.kind == PoolKind::graph ? "graph" : "plain",
                                    kind == PoolKind::graph ? "graph" : "plain"));
    }
    ++existing.uses;
    begun.index = found->second;
  } else {
    auto free = std::find_if(pools_.begin(), pools_.end(), [](const Pool& p) { return p.state == State::free; });
    if (free == pools_.end()) {
      if (pools_.size() >= max_private_pools) {
        return make_error(Errc::out_of_memory,
                          fmt::format("tessera: {}: {} private pools exist or wait for their blocks' frees, the most "
                                      "an allocator has",
                                      describe(id), pools_.size()));
      }
      pools_.emplace_back();
      free = pools_.end() - 1;
    }
    *free = Pool{id, kind, State::live, 1};
    begun.index = static_cast<PrivatePoolIndex>(free - pools_.begin()) + 1;
    begun.made = true;
    by_id_.emplace(id, begun.index);
  }
  active_.push_back({begun.index, std::move(accepts)});
  any_active_ = true;
  return begun;
}

Result<PrivatePoolIndex> PrivatePools::end(PoolId id) {
  auto found = by_id_.find(id);
  // The latest begin's: PyTorch ends captures innermost first.
  auto active = found == by_id_.end()
                    ? active_.rend()
                    : std::find_if(active_.rbegin(), active_.rend(),
                                   [&](const Active& entry) { return entry.index == found->second; });
  if (active == active_.rend()) {
    return make_error(Errc::not_found,
                      fmt::format("tessera: end_allocate_to_pool of {}, which is not being allocated to",
                                  describe(id)));
  }
  const PrivatePoolIndex index = active->index;
  active_.erase(std::next(active).base());
  any_active_ = !active_.empty();
  return index;
}

Result<std::optional<PrivatePoolIndex>> PrivatePools::release(PoolId id) {
  auto found = by_id_.find(id);
  if (found == by_id_.end()) {
    return make_error(Errc::not_found,
                      fmt::format("tessera: release_pool of {}, which no pool has (never begun, or released "
                                  "already)",
                                  describe(id)));
  }
  const PrivatePoolIndex index = found->second;
  Pool& released = pool(index);
  if (released.uses == 1 && std::any_of(active_.begin(), active_.end(),
                                        [&](const Active& entry) { return entry.index == index; })) {
    return make_error(Errc::invalid_argument,
                      fmt::format("tessera: release_pool of {}, which is still being allocated to (end it first)",
                                  describe(id)));
  }
  if (--released.uses > 0) return std::optional<PrivatePoolIndex>{};
  released.state = State::released;
  by_id_.erase(found);
  return std::optional<PrivatePoolIndex>{index};
}

PrivatePoolIndex PrivatePools::first_accepting(StreamId stream) const {
  for (const Active& entry : active_) {
    if (entry.accepts(stream)) return entry.index;
  }
  return shared_cache;
}

std::vector<PrivatePoolIndex> PrivatePools::released() const {
  std::vector<PrivatePoolIndex> indexes;
  for (std::size_t i = 0; i < pools_.size(); ++i) {
    if (pools_[i].state == State::released) indexes.push_back(static_cast<PrivatePoolIndex>(i + 1));
  }
  return indexes;
}

void PrivatePools::reuse(PrivatePoolIndex index) {
  if (index != shared_cache && index <= pools_.size() && pool(index).state == State::released) {
    pool(index).state = State::free;
  }
}

std::optional<PoolKind> PrivatePools::kind_of(PrivatePoolIndex index) const {
  if (index == shared_cache || index > pools_.size() || pool(index).state != State::live) return std::nullopt;
  return pool(index).kind;
}

std::optional<PoolId> PrivatePools::id_of(PrivatePoolIndex index) const {
  if (index == shared_cache || index > pools_.size() || pool(index).state != State::live) return std::nullopt;
  return pool(index).id;
}

std::optional<std::string> PrivatePools::check() const {
  for (const auto& [id, index] : by_id_) {
    if (index == shared_cache || index > pools_.size()) return fmt::format("{} has index {}", describe(id), index);
    const Pool& live = pool(index);
    if (live.state != State::live || !(live.id == id) || live.uses == 0) {
      return fmt::format("{} (index {}) is not live with a use", describe(id), index);
    }
  }
  std::size_t live = 0;
  for (const Pool& each : pools_) live += each.state == State::live ? 1 : 0;
  if (live != by_id_.size()) return fmt::format("{} live pools, {} by id", live, by_id_.size());
  if (any_active_ == active_.empty()) return std::string("the active flag disagrees with the active list");
  for (const Active& entry : active_) {
    if (entry.index == shared_cache || entry.index > pools_.size() || pool(entry.index).state != State::live) {
      return fmt::format("an active entry names pool index {}, which is not live", entry.index);
    }
  }
  return std::nullopt;
}

}  // namespace tessera::core
