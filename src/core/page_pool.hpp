// Physical memory held and not mapped now, ready for reuse (layer 2), and the chunks it comes from.
//
// A chunk is one physical allocation from the driver (one create_chunk call) of a whole number of granules.
// A page is what one mapping maps: a run of granules of one chunk, at an offset into it. Where the driver
// can map part of a physical allocation (capability partial_map), one chunk serves a whole block's worth
// of pages — one create call instead of one per page — and its pages are still mapped, unmapped and moved
// one by one. A chunk goes back to the device only when all of it is pooled, as a cudaMalloc'd segment
// does in PyTorch's allocator.
//
// Retired granules (an exported block's pages after its free, docs/allocator.md "Sharing a block with another
// process"): held, mapped nowhere and never handed out again, so that no other block reuses bytes another
// process may still map. A chunk whose granules are all pooled or retired can go back (retired_chunks()).
//
// The pool keeps pooled runs coalesced per chunk, so a wholly pooled chunk is one run at offset 0, and
// answers requests by size: the largest run that fits, or (where runs may be split) a piece of a larger one.
#pragma once

#include <cassert>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "tessera/types.hpp"

namespace tessera::core {

// A page: what one mapping maps, a run of granules of one chunk.
struct Page {
  ChunkId chunk{};
  std::uint32_t granules = 0;
  std::uint32_t offset = 0;  // into the chunk, in granules
};

class PagePool {
 public:
  bool empty() const noexcept { return pooled_ == 0; }
  std::size_t granules() const noexcept { return pooled_; }  // pooled
  std::size_t chunk_count() const noexcept { return chunks_.size(); }
  // The size of a chunk in granules (0 if unknown).
  std::uint32_t chunk_granules(ChunkId chunk) const {
    auto found = chunks_.find(raw(chunk));
    return found == chunks_.end() ? 0 : found->second.granules;
  }

  // A chunk just created, none of it pooled yet.
  void add_chunk(ChunkId chunk, std::uint32_t granules) { chunks_.emplace(raw(chunk), Chunk{granules, 0, 0}); }

  // Retiring: the page, just unmapped, is never pooled nor handed out.
  void retire(Page page) {
    chunks_.at(raw(page.chunk)).retired += page.granules;
    retired_ += page.granules;
  }
  std::size_t retired() const noexcept { return retired_; }
  std::uint32_t retired_of(ChunkId chunk) const { return chunks_.at(raw(chunk)).retired; }
  // The chunks with retired granules whose every granule is pooled or retired: none of it mapped.
  std::vector<ChunkId> idle_retired_chunks() const {
    std::vector<ChunkId> idle;
    if (retired_ == 0) return idle;
    for (const auto& [id, chunk] : chunks_) {
      if (chunk.retired > 0 && chunk.retired + chunk.pooled == chunk.granules) idle.push_back(ChunkId{id});
    }
    return idle;
  }
  // A chunk given back to the device with its pooled runs and retired granules.
  void drop_chunk(ChunkId chunk) {
    Chunk& record = chunks_.at(raw(chunk));
    for (auto run = runs_.lower_bound({raw(chunk), 0}); run != runs_.end() && run->first.first == raw(chunk);) {
      erase_run(run++);
    }
    pooled_ -= record.pooled;
    retired_ -= record.retired;
    chunks_.erase(raw(chunk));
  }
  // A chunk given back to the device (all of it was taken out with take_whole_chunk).
  void forget_chunk(ChunkId chunk) { chunks_.erase(raw(chunk)); }

  void put(Page page) {
    Chunk& chunk = chunks_.at(raw(page.chunk));
    chunk.pooled += page.granules;
    pooled_ += page.granules;
    std::uint32_t offset = page.offset;
    std::uint32_t granules = page.granules;
    // Coalesce with the pooled runs of the same chunk on either side.
    auto next = runs_.lower_bound({raw(page.chunk), offset});
    if (next != runs_.end() && next->first.first == raw(page.chunk) && next->first.second == offset + granules) {
      granules += next->second;
      erase_run(next++);
    }
    if (next != runs_.begin()) {
      auto previous = std::prev(next);
      if (previous->first.first == raw(page.chunk) && previous->first.second + previous->second == offset) {
        offset = previous->first.second;
        granules += previous->second;
        erase_run(previous);
      }
    }
    runs_.emplace(std::pair{raw(page.chunk), offset}, granules);
    by_size_.emplace(granules, raw(page.chunk), offset);
  }

  // A page of at most `granules`: the largest pooled run that fits; failing that, when `split`, the first
  // `granules` of the smallest larger run (the rest stays pooled).
  std::optional<Page> take_at_most(std::size_t granules, bool split) {
    if (granules == 0 || by_size_.empty()) return std::nullopt;
    const auto limit = static_cast<std::uint32_t>(std::min<std::size_t>(granules, UINT32_MAX));
    auto fit = by_size_.upper_bound({limit, UINT64_MAX, UINT32_MAX});
    if (fit != by_size_.begin()) {
      const auto [size, chunk, offset] = *std::prev(fit);
      return take(Page{ChunkId{chunk}, size, offset});
    }
    if (!split) return std::nullopt;
    const auto [size, chunk, offset] = *by_size_.begin();
    take(Page{ChunkId{chunk}, size, offset});
    put(Page{ChunkId{chunk}, size - limit, offset + limit});
    return Page{ChunkId{chunk}, limit, offset};
  }

  // A page of at most `granules` from a chunk wholly pooled — none of it mapped, so that the page's user is
  // the chunk's only one —: the smallest such chunk that holds them, cut to them when `split`, else the
  // largest smaller one. A walk over the pooled runs: for the few blocks that need it (a tag's, which a pause
  // gives back whole).
  std::optional<Page> take_from_whole_chunk(std::size_t granules, bool split) {
    if (granules == 0) return std::nullopt;
    const auto limit = static_cast<std::uint32_t>(std::min<std::size_t>(granules, UINT32_MAX));
    std::optional<std::tuple<std::uint32_t, std::uint64_t, std::uint32_t>> smaller;
    for (const auto& run : by_size_) {
      const auto [size, chunk, offset] = run;  // copies: take() below erases the run
      if (offset != 0 || chunks_.at(chunk).granules != size) continue;
      if (size <= limit) {
        smaller = std::tuple{size, chunk, offset};  // ascending: the last one seen is the largest
        continue;
      }
      if (!split) break;
      take(Page{ChunkId{chunk}, size, 0});
      put(Page{ChunkId{chunk}, size - limit, limit});
      return Page{ChunkId{chunk}, limit, 0};
    }
    if (!smaller) return std::nullopt;
    const auto [size, chunk, offset] = *smaller;
    return take(Page{ChunkId{chunk}, size, offset});
  }

  // `chunk` taken out of the pool when all of it is pooled (one run, offset 0); none otherwise.
  std::optional<Page> take_chunk_if_whole(ChunkId chunk) {
    const auto run = runs_.find({raw(chunk), 0});
    if (run == runs_.end() || run->second != chunks_.at(raw(chunk)).granules) return std::nullopt;
    return take(Page{chunk, run->second, 0});
  }
  // A chunk wholly pooled, the largest first, taken out of the pool (its run, offset 0, all of it).
  std::optional<Page> take_whole_chunk() {
    for (auto run = by_size_.rbegin(); run != by_size_.rend(); ++run) {
      const auto [size, chunk, offset] = *run;
      if (offset == 0 && chunks_.at(chunk).granules == size) return take(Page{ChunkId{chunk}, size, offset});
    }
    return std::nullopt;
  }

  template <class Visit>
  void visit_chunks(Visit&& visit) const {
    for (const auto& [id, chunk] : chunks_) visit(ChunkId{id}, chunk.granules);
  }
  // Pooled granules of one chunk, for check().
  std::uint32_t pooled_of(ChunkId chunk) const { return chunks_.at(raw(chunk)).pooled; }

 private:
  struct Chunk {
    std::uint32_t granules;
    std::uint32_t pooled;
    std::uint32_t retired;
  };
  using RunKey = std::pair<std::uint64_t, std::uint32_t>;  // chunk, offset

  static std::uint64_t raw(ChunkId id) { return static_cast<std::uint64_t>(id); }

  Page take(Page page) {
    auto run = runs_.find({raw(page.chunk), page.offset});
    assert(run != runs_.end() && run->second == page.granules);
    erase_run(run);
    chunks_.at(raw(page.chunk)).pooled -= page.granules;
    pooled_ -= page.granules;
    return page;
  }
  void erase_run(std::map<RunKey, std::uint32_t>::iterator run) {
    by_size_.erase({run->second, run->first.first, run->first.second});
    runs_.erase(run);
  }

  std::unordered_map<std::uint64_t, Chunk> chunks_;
  std::map<RunKey, std::uint32_t> runs_;                                    // -> granules
  std::set<std::tuple<std::uint32_t, std::uint64_t, std::uint32_t>> by_size_;  // granules, chunk, offset
  std::size_t pooled_ = 0;
  std::size_t retired_ = 0;
};

}  // namespace tessera::core
