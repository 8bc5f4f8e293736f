// Host buffers that held a tag's backups, kept after its resume for the next pause (policy, layer 3). A colocated
// job pauses the same tag every step with the same blocks: a buffer kept skips allocating and pinning the host
// memory again — on a real platform the most costly part of a pause after the copy itself. The cache only
// holds buffers; the mapper allocates and frees them.
#pragma once

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <vector>

#include "core/mapper.hpp"  // HostBuffer, as the mapper allocates them

namespace tessera::core {

class BackupCache {
 public:
  // The smallest buffer kept that holds `size` bytes and wastes at most as much again (a larger one is left
  // for a larger block); none: the caller allocates.
  std::optional<HostBuffer> take(Bytes size) {
    auto found = buffers_.lower_bound(size);
    if (found == buffers_.end() || found->first - size > size) return std::nullopt;
    HostBuffer buffer = found->second;
    buffers_.erase(found);
    bytes_ -= buffer.size;
    return buffer;
  }

  void keep(const HostBuffer& buffer) {
    buffers_.emplace(buffer.size, buffer);
    bytes_ += buffer.size;
  }

  // Keeps at most one buffer for each size in `wanted` (the block sizes a pause may back up), the one take()
  // would give it, largest blocks first; returns the others for the caller to free.
  std::vector<HostBuffer> keep_only_for(std::vector<Bytes> wanted) {
    std::sort(wanted.begin(), wanted.end(), std::greater<>());
    std::multimap<Bytes, HostBuffer> kept;
    for (const Bytes size : wanted) {
      if (buffers_.empty()) break;
      if (auto buffer = take(size)) kept.emplace(buffer->size, *buffer);
    }
    std::vector<HostBuffer> unwanted = take_all();
    buffers_ = std::move(kept);
    for (const auto& [size, buffer] : buffers_) bytes_ += size;
    return unwanted;
  }

  // Every buffer, for the caller to free (empty_cache, teardown).
  std::vector<HostBuffer> take_all() {
    std::vector<HostBuffer> all;
    all.reserve(buffers_.size());
    for (const auto& [size, buffer] : buffers_) all.push_back(buffer);
    buffers_.clear();
    bytes_ = 0;
    return all;
  }

  Bytes bytes() const noexcept { return bytes_; }
  std::size_t size() const noexcept { return buffers_.size(); }

 private:
  std::multimap<Bytes, HostBuffer> buffers_;  // by size, for the best fit
  Bytes bytes_ = 0;
};

}  // namespace tessera::core
