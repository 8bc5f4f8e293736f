// The private pools (policy, layer 4): PyTorch's graph pools and MemPools, by id, with their use counts,
// the ones active now and the streams each accepts. Each pool has an index, the fourth part of an arena's
// key (placements.hpp): a pool's blocks lie in arenas of its own index, so its free space is reused only by
// allocations into it. Index 0 is the shared cache. Pure bookkeeping: which arenas hold what, and what a
// release gives back, is the facade's.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/arena.hpp"
#include "tessera/device_allocator.hpp"
#include "tessera/result.hpp"

namespace tessera::core {

class PrivatePools {
 public:
  // Begins allocating to `id` on the streams `accepts` takes: a new pool (its index a free one: never used,
  // or given back with reuse()), or one more use of the pool of that id. `kind` is a new pool's; beginning
  // an existing pool with another kind is an error naming both.
  struct Begun {
    PrivatePoolIndex index = shared_cache;
    bool made = false;  // a new pool
  };
  Result<Begun> begin(PoolId id, StreamFilter accepts, PoolKind kind);
  // Stops the allocations into `id` that its latest begin started.
  Result<PrivatePoolIndex> end(PoolId id);
  // One use fewer; the index when it was the last (the pool is released: its id is forgotten), else none.
  Result<std::optional<PrivatePoolIndex>> release(PoolId id);

  // The pool allocations on `stream` go to now: the first active one whose filter accepts it, in the order
  // begun; shared_cache when none is active (one test) or none accepts it.
  PrivatePoolIndex pool_for(StreamId stream) const {
    return any_active_ ? first_accepting(stream) : shared_cache;
  }
  // The allocator's fast path reads this alone (one byte), and takes the shared cache's arenas when false.
  bool any_active() const noexcept { return any_active_; }

  // A released pool's index, once none of its blocks is in use, may be given to a new pool.
  std::vector<PrivatePoolIndex> released() const;
  void reuse(PrivatePoolIndex index);

  // Of a pool not released (by index): its kind and id; none for shared_cache and released pools.
  std::optional<PoolKind> kind_of(PrivatePoolIndex index) const;
  std::optional<PoolId> id_of(PrivatePoolIndex index) const;
  // The pools not released, and their use counts (for the statistics and check()).
  std::size_t size() const noexcept { return by_id_.size(); }
  std::optional<std::string> check() const;

  static std::string describe(PoolId id);

 private:
  enum class State : std::uint8_t { live, released, free };
  struct Pool {
    PoolId id;
    PoolKind kind = PoolKind::graph;
    State state = State::free;
    std::uint32_t uses = 0;
  };
  struct Active {
    PrivatePoolIndex index;
    StreamFilter accepts;
  };

  PrivatePoolIndex first_accepting(StreamId stream) const;
  Pool& pool(PrivatePoolIndex index) { return pools_[index - 1]; }
  const Pool& pool(PrivatePoolIndex index) const { return pools_[index - 1]; }

  std::vector<Pool> pools_;  // by index - 1
  std::map<PoolId, PrivatePoolIndex> by_id_;  // the pools not released
  std::vector<Active> active_;  // in the order begun
  bool any_active_ = false;     // !active_.empty(), kept apart for the fast path
};

}  // namespace tessera::core
