// The trace a generator writes: dense block ids in allocation order, frees that repeat their block's size
// and stream, iteration markers. It refuses to grow past an event limit, so that a mistyped `steps` ends
// in a clear error instead of eating the machine's memory.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "tessera/result.hpp"
#include "tessera/trace.hpp"

namespace tessera::workload {

// A block of the generated trace. no_block stands for a zero-byte request, which PyTorch answers without
// asking its allocator; freeing it does nothing.
using Handle = BlockId;
inline constexpr Handle no_block = std::numeric_limits<Handle>::max();

inline constexpr std::size_t default_event_limit = 20'000'000;  // 640 MB of events

class Emitter {
 public:
  Emitter(std::string name, std::vector<StreamId> streams, std::size_t event_limit = default_event_limit);

  Handle alloc(Bytes size, std::uint32_t stream = 0, TraceTag tag = trace_default_tag);
  void free(Handle block);
  // The block is used by work on one more stream (Tensor.record_stream): its free waits for that stream too.
  void record_stream(Handle block, std::uint32_t stream);
  void iteration(std::uint64_t index);
  // Tags: a name's index in the trace's tag table, added on first use; pause and resume events.
  TraceTag tag(std::string_view name);
  void pause(TraceTag tag, bool backup);
  void resume(TraceTag tag);
  // Private pools: a pool's index in the trace's pool table, added on first use; a graph capture's calls.
  std::uint32_t pool(PoolId id, PoolKind kind);
  void begin_pool(std::uint32_t pool, std::uint32_t stream);
  void end_pool(std::uint32_t pool);
  void release_pool(std::uint32_t pool);

  // True once the event limit is reached: later calls record nothing, and finish() fails.
  bool full() const noexcept { return full_; }
  Bytes live_bytes() const noexcept { return live_bytes_; }
  std::size_t event_count() const noexcept { return trace_.events.size(); }

  // The trace, or an error when the limit was reached (`what_to_lower` names the parameters to lower) or
  // a generator freed a block that was not live (a bug, reported rather than written into the trace).
  Result<Trace> finish(std::string_view what_to_lower) &&;

 private:
  Trace trace_;
  std::vector<std::uint64_t> size_;
  std::vector<std::uint32_t> stream_;
  std::vector<bool> live_;
  Bytes live_bytes_ = 0;
  std::size_t event_limit_;
  bool full_ = false;
  std::string bug_;

  bool room_for_one();
};

}  // namespace tessera::workload
