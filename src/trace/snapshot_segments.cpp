// The segment entries of a snapshot (SegmentChange, docs/trace-format.md "Writing PyTorch snapshots"): the
// changes as PyTorch's trace entries, what they leave held at the end, and the segments cut to what is mapped.
// MemoryViz's "Allocator State History" starts from the segments and undoes the entries one by one, back to
// the chosen event: an unmap it undoes must lie in one segment, and every block live at that event in one, or
// it fails. So the entries and the segments must tell the same story; fold_segment_changes checks that they do.
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "trace/snapshot_layout.hpp"

namespace tessera::trace_detail {

namespace {

Error invalid(std::string message) { return make_error(Errc::invalid_argument, std::move(message)); }

bool is_pool(SegmentChange::Kind kind) {
  return kind == SegmentChange::Kind::pooled || kind == SegmentChange::Kind::unpooled;
}

std::string_view action_of(SegmentChange::Kind kind) {
  switch (kind) {
    case SegmentChange::Kind::alloc: return "segment_alloc";
    case SegmentChange::Kind::free: return "segment_free";
    case SegmentChange::Kind::map:
    case SegmentChange::Kind::pooled: return "segment_map";
    case SegmentChange::Kind::unmap:
    case SegmentChange::Kind::unpooled: return "segment_unmap";
  }
  return "segment_map";
}

std::string describe(std::size_t index, const SegmentChange& change) {
  return fmt::format("segment change {} ({} of {} bytes at {:#x})", index, action_of(change.kind), change.size,
                     change.address);
}

}  // namespace

std::int64_t pooled_change(const std::vector<SegmentChange>& changes) {
  std::int64_t net = 0;
  for (const SegmentChange& change : changes) {
    if (change.kind == SegmentChange::Kind::pooled) net += static_cast<std::int64_t>(change.size);
    if (change.kind == SegmentChange::Kind::unpooled) net -= static_cast<std::int64_t>(change.size);
  }
  return net;
}

Result<std::vector<SegmentEntry>> segment_entries(const std::vector<SegmentChange>& changes, std::size_t event_count,
                                                  Bytes pooled_before) {
  std::vector<SegmentEntry> entries;
  entries.reserve(changes.size());
  Bytes pooled = pooled_before;
  for (std::size_t first = 0; first < changes.size();) {
    const std::size_t place = changes[first].before_event;
    if (place > event_count) {
      return invalid(fmt::format("{} comes before event {}; the trace has {} events", describe(first, changes[first]),
                                 place, event_count));
    }
    std::int64_t net = 0;
    const std::size_t place_start = entries.size();
    std::size_t end = first;
    for (; end < changes.size() && changes[end].before_event == place; ++end) {
      const SegmentChange& change = changes[end];
      if (change.size == 0) return invalid(fmt::format("{} has no bytes", describe(end, change)));
      if (is_pool(change.kind)) {
        net += change.kind == SegmentChange::Kind::pooled ? static_cast<std::int64_t>(change.size)
                                                          : -static_cast<std::int64_t>(change.size);
      } else {
        entries.push_back({action_of(change.kind), change.address, change.size, change.stream, place});
      }
    }
    if (end < changes.size() && changes[end].before_event < place) {
      return invalid(fmt::format("{} comes before event {}, after a change that comes before event {}: changes go in "
                                 "the order of the events",
                                 describe(end, changes[end]), changes[end].before_event, place));
    }
    if (net > 0) {
      entries.push_back({"segment_map", pool_segment_base + pooled, static_cast<Bytes>(net), StreamId{}, place});
      pooled += static_cast<Bytes>(net);
    } else if (net < 0) {
      const auto taken = static_cast<Bytes>(-net);
      if (taken > pooled) {
        return invalid(fmt::format("the segment changes before event {} take {} pooled bytes out of {}", place, taken,
                                   pooled));
      }
      pooled -= taken;
      entries.insert(entries.begin() + static_cast<std::ptrdiff_t>(place_start),
                     {"segment_unmap", pool_segment_base + pooled, taken, StreamId{}, place});
    }
    first = end;
  }
  return entries;
}

Result<HeldMemory> fold_segment_changes(const std::vector<SegmentChange>& changes) {
  struct Piece {
    Bytes size;
    StreamId stream;
    bool segment;
  };
  std::map<Address, Piece> held;
  HeldMemory result;
  // Whether [address, address + size) meets a held piece.
  auto overlaps = [&](Address address, Bytes size) {
    auto next = held.lower_bound(address);
    if (next != held.end() && next->first < address + size) return true;
    if (next == held.begin()) return false;
    const auto previous = std::prev(next);
    return previous->first + previous->second.size > address;
  };
  for (std::size_t i = 0; i < changes.size(); ++i) {
    const SegmentChange& change = changes[i];
    switch (change.kind) {
      case SegmentChange::Kind::alloc:
      case SegmentChange::Kind::map:
        if (change.size == 0 || overlaps(change.address, change.size)) {
          return invalid(fmt::format("{}: that memory is held already", describe(i, change)));
        }
        held.emplace(change.address, Piece{change.size, change.stream, change.kind == SegmentChange::Kind::alloc});
        break;
      case SegmentChange::Kind::free: {
        const auto found = held.find(change.address);
        if (found == held.end() || !found->second.segment || found->second.size != change.size) {
          return invalid(fmt::format("{}: no segment of that size was made there", describe(i, change)));
        }
        held.erase(found);
        break;
      }
      case SegmentChange::Kind::unmap: {
        // Mapped runs side by side on one stream are one to MemoryViz: an unmap may span several maps.
        const Address end = change.address + change.size;
        Address cursor = change.address;
        auto it = held.upper_bound(cursor);
        if (it == held.begin()) return invalid(fmt::format("{}: that memory is not mapped", describe(i, change)));
        --it;
        std::optional<StreamId> stream;
        while (cursor < end) {
          if (it == held.end() || it->first > cursor || it->first + it->second.size <= cursor || it->second.segment ||
              (stream && *stream != it->second.stream)) {
            return invalid(fmt::format("{}: [{:#x}, {:#x}) is not one run of mapped pages on one stream",
                                       describe(i, change), cursor, end));
          }
          stream = it->second.stream;
          const Address piece_start = it->first;
          const Piece piece = it->second;
          const Address piece_end = piece_start + piece.size;
          it = held.erase(it);
          if (piece_start < change.address) held.emplace(piece_start, Piece{change.address - piece_start, piece.stream, false});
          if (piece_end > end) it = held.emplace(end, Piece{piece_end - end, piece.stream, false}).first;
          cursor = piece_end;
        }
        break;
      }
      case SegmentChange::Kind::pooled:
        result.pooled += change.size;
        break;
      case SegmentChange::Kind::unpooled:
        if (change.size > result.pooled) {
          return invalid(fmt::format("{}: only {} bytes are pooled", describe(i, change), result.pooled));
        }
        result.pooled -= change.size;
        break;
    }
  }
  for (const auto& [address, piece] : held) {
    if (!piece.segment && !result.ranges.empty()) {
      HeldRange& last = result.ranges.back();
      if (!last.segment && last.stream == piece.stream && last.address + last.size == address) {
        last.size += piece.size;
        continue;
      }
    }
    result.ranges.push_back({address, piece.size, piece.stream, piece.segment});
  }
  return result;
}

std::vector<OutSegment> cut_to_mapped(const OutSegment& whole, const std::vector<MappedRange>& runs) {
  std::vector<OutSegment> cut;
  const Address whole_end = whole.address + whole.total_size;
  std::size_t next_block = 0;
  for (const MappedRange& run : runs) {
    const Address begin = std::max(run.address, whole.address);
    const Address end = std::min(run.address + run.size, whole_end);
    if (begin >= end) continue;
    OutSegment segment{begin, end - begin, whole.stream, whole.small, {}};
    Address cursor = begin;
    while (next_block < whole.blocks.size() && whole.blocks[next_block].address + whole.blocks[next_block].size <= begin) {
      ++next_block;
    }
    for (std::size_t b = next_block; b < whole.blocks.size() && whole.blocks[b].address < end; ++b) {
      OutBlock block = whole.blocks[b];
      const Address block_end = block.address + block.size;
      if (block.state != BlockState::inactive && (block.address < begin || block_end > end)) continue;
      block.address = std::max(block.address, std::max(begin, cursor));
      block.size = std::min(block_end, end) - block.address;
      if (block.address >= std::min(block_end, end)) continue;
      if (block.address > cursor) segment.blocks.push_back({cursor, block.address - cursor, 0, BlockState::inactive, 0});
      segment.blocks.push_back(block);
      cursor = block.address + block.size;
    }
    if (cursor < end) segment.blocks.push_back({cursor, end - cursor, 0, BlockState::inactive, 0});
    // Inactive neighbours in a row are one free block.
    std::vector<OutBlock> merged;
    for (const OutBlock& block : segment.blocks) {
      if (!merged.empty() && block.state == BlockState::inactive && merged.back().state == BlockState::inactive) {
        merged.back().size += block.size;
      } else {
        merged.push_back(block);
      }
    }
    segment.blocks = std::move(merged);
    cut.push_back(std::move(segment));
  }
  return cut;
}

OutSegment pooled_segment(Bytes pooled) {
  return {pool_segment_base, pooled, 0, false, {{pool_segment_base, pooled, 0, BlockState::inactive, 0}}};
}

}  // namespace tessera::trace_detail
