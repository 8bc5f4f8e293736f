// The stream-contract witness: a driver decorator that sees every call reaching the device and records a
// violation whenever memory that work queued on a held stream still uses is unmapped, or handed to another
// stream, before that work is proven finished (a synchronize of the stream, of the device, or of an event
// recorded on it after the work). Tests tell it which ranges the work touches with use(). Shared by the
// adversarial tests and the operation-sequence fuzz target.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "tessera/driver_decorators.hpp"

namespace tessera::test_support {

class StreamWitness final : public ForwardingDriver {
 public:
  using ForwardingDriver::ForwardingDriver;

  static std::uintptr_t raw_stream(StreamId id) { return static_cast<std::uintptr_t>(id); }
  template <class Id>
  static std::uint64_t raw_id(Id id) { return static_cast<std::uint64_t>(id); }

  // Work queued now on a held stream touches [at, at + size). On a stream that is not held work completes
  // at once, so nothing is recorded.
  void use(StreamId stream, Address at, Bytes size) {
    if (held_.count(raw_stream(stream)) == 0) return;
    uses_.push_back({stream, at, size, ++sequence_});
  }
  // An outstanding use of the range by a stream other than `stream`.
  std::optional<std::string> foreign_use(Address at, Bytes size, StreamId stream) const {
    for (const Use& use : uses_) {
      if (use.stream != stream && at < use.at + use.size && use.at < at + size) {
        return fmt::format("{:#x}+{} handed to stream {} while stream {} may still use {:#x}+{}", at, size, raw_stream(stream),
                           raw_stream(use.stream), use.at, use.size);
      }
    }
    return std::nullopt;
  }
  const std::vector<std::string>& violations() const { return violations_; }
  std::size_t outstanding() const { return uses_.size(); }

  StreamControl* stream_control() noexcept override { return &control_; }

  Result<ChunkId> create_chunk(Bytes size) override {
    auto chunk = ForwardingDriver::create_chunk(size);
    if (chunk) chunk_size_[raw_id(*chunk)] = size;
    return chunk;
  }
  Result<void> map(Address at, ChunkId chunk) override {
    auto done = ForwardingDriver::map(at, chunk);
    if (done) mapping_size_[at] = chunk_size_[raw_id(chunk)];
    return done;
  }
  Result<void> map_part(Address at, ChunkId chunk, Bytes offset, Bytes size) override {
    auto done = ForwardingDriver::map_part(at, chunk, offset, size);
    if (done) mapping_size_[at] = size;
    return done;
  }
  Result<void> unmap(Address at) override {
    const Bytes size = mapping_size_.count(at) != 0 ? mapping_size_[at] : granularity();
    for (const Use& use : uses_) {
      if (at < use.at + use.size && use.at < at + size) {
        violations_.push_back(fmt::format("unmap of {:#x}+{} while stream {} may still use {:#x}+{}", at, size,
                                          raw_stream(use.stream), use.at, use.size));
        break;
      }
    }
    auto done = ForwardingDriver::unmap(at);
    if (done) mapping_size_.erase(at);
    return done;
  }
  Result<void> record_event(EventId event, StreamId stream) override {
    auto done = ForwardingDriver::record_event(event, stream);
    if (done) events_[raw_id(event)] = {stream, sequence_};
    return done;
  }
  Result<bool> query_event(EventId event) override {
    auto done = ForwardingDriver::query_event(event);
    if (done && *done) retire_event(event);
    return done;
  }
  Result<void> synchronize_event(EventId event) override {
    auto done = ForwardingDriver::synchronize_event(event);
    if (done) retire_event(event);
    return done;
  }
  Result<void> synchronize_stream(StreamId stream) override {
    auto done = ForwardingDriver::synchronize_stream(stream);
    if (done) retire(stream, ~std::uint64_t{0});
    return done;
  }
  Result<void> synchronize_device() override {
    auto done = ForwardingDriver::synchronize_device();
    if (done) uses_.clear();
    return done;
  }

 private:
  struct Use {
    StreamId stream;
    Address at;
    Bytes size;
    std::uint64_t sequence;
  };
  struct Mark {
    StreamId stream;
    std::uint64_t sequence;
  };
  class Control final : public StreamControl {
   public:
    explicit Control(StreamWitness& witness) : witness_(witness) {}
    void hold(StreamId stream) override {
      witness_.inner().stream_control()->hold(stream);
      witness_.held_.insert(raw_stream(stream));
    }
    void complete(StreamId stream) override {
      witness_.inner().stream_control()->complete(stream);
      witness_.held_.erase(raw_stream(stream));
      witness_.retire(stream, ~std::uint64_t{0});
    }

   private:
    StreamWitness& witness_;
  };

  void retire(StreamId stream, std::uint64_t up_to) {
    std::erase_if(uses_, [&](const Use& use) { return use.stream == stream && use.sequence <= up_to; });
  }
  void retire_event(EventId event) {
    auto found = events_.find(raw_id(event));
    if (found != events_.end()) retire(found->second.stream, found->second.sequence);
  }

  Control control_{*this};
  std::set<std::uintptr_t> held_;
  std::vector<Use> uses_;
  std::uint64_t sequence_ = 0;
  std::unordered_map<std::uint64_t, Bytes> chunk_size_;
  std::map<Address, Bytes> mapping_size_;
  std::unordered_map<std::uint64_t, Mark> events_;
  std::vector<std::string> violations_;
};

}  // namespace tessera::test_support
