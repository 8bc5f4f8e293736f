// What every reader does once it knows an event: give each block lifetime a dense id, keep the stream
// table, remember which recorded keys (addresses, tensor ids, text ids) are live, and put the blocks that
// were live before recording first. Readers only add their positions to its answers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "tessera/trace.hpp"

namespace tessera::trace_detail {

class TraceBuilder {
 public:
  enum class Status : std::uint8_t {
    ok,
    already_live,  // alloc or declare_initial of a key whose block is live
    not_live,      // free of a key with no live block
    seen_before,   // declare_initial of a key that events already used: it cannot have been live before them
    too_many,      // more blocks than BlockId holds
    zero_size,     // alloc or declare_initial of 0 bytes
  };

  // Why a block of 0 bytes is refused, for the readers' messages, which add where it is.
  static constexpr std::string_view zero_size_reason =
      "allocators hand out no block for 0 bytes, and PyTorch records no event for one";

  std::uint32_t stream(StreamId platform_stream);

  // One rule for every format, the same as validate()'s: a block has at least one byte.
  Status alloc(std::uint64_t key, std::uint64_t size, std::uint32_t stream, std::int64_t time_us,
               TraceTag tag = trace_default_tag);
  // Frees the live block of `key`; its size and stream go into the event.
  Status free(std::uint64_t key, std::int64_t time_us);
  // A block live before recording began, which no event has used yet.
  Status declare_initial(std::uint64_t key, std::uint64_t size, std::uint32_t stream);
  void iteration(std::uint64_t index, std::int64_t time_us);
  // The caller keeps the tag table and checks the pairing (trace_model.hpp's validate() rules).
  void pause(TraceTag tag, bool backup, std::int64_t time_us);
  void resume(TraceTag tag, std::int64_t time_us);
  // The live block of `key` is used on `stream` too (not_live when none is live).
  Status record_stream(std::uint64_t key, std::uint32_t stream, std::int64_t time_us);
  // A begin_pool, end_pool or release_pool event; the caller keeps the pool table and checks the order.
  void pool_event(const TraceEvent& event);

  // The stack of the event just added, or of the initial block just declared: an index into the table the
  // reader keeps and hands to the trace (Trace::stacks). Only readers of recordings with stacks call these.
  void stack_of_last_event(std::uint32_t stack);
  void stack_of_last_initial(std::uint32_t stack);

  bool is_live(std::uint64_t key) const { return live_.contains(key); }
  // Whether any alloc, free or declaration has used the key.
  bool seen(std::uint64_t key) const { return seen_.contains(key); }
  std::size_t event_count() const { return events_.size(); }
  std::size_t initial_count() const { return initial_.size(); }

  // The trace, with initial blocks numbered 0.. in declaration order and the others after them in the
  // order of their allocs.
  Trace finish(std::string name, std::string device);

 private:
  struct Block {
    std::uint64_t size = 0;
    std::uint32_t stream = 0;
  };

  Status new_block(std::uint64_t key, std::uint64_t size, std::uint32_t stream, BlockId& id);

  std::vector<StreamId> streams_;
  std::unordered_map<std::uintptr_t, std::uint32_t> stream_index_;
  std::vector<Block> blocks_;  // by provisional id: the order of creation
  std::vector<BlockId> initial_;
  std::vector<TraceEvent> events_;
  // Filled up to the last index given; finish() pads them with 0 when any was given, else leaves them empty.
  std::vector<std::uint32_t> event_stacks_;
  std::vector<std::uint32_t> initial_stacks_;  // in declaration order
  std::unordered_map<std::uint64_t, BlockId> live_;
  std::unordered_set<std::uint64_t> seen_;
};

}  // namespace tessera::trace_detail
