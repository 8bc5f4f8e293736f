// Decorators usable around any driver: counting and timing every call, injecting failures, a capacity
// limit. Each owns the driver it wraps; stack them (a counter outside a fault injector outside a host
// driver) and keep a plain pointer to the layers you want to steer.
#pragma once

#include <chrono>
#include <memory>
#include <optional>

#include "tessera/driver.hpp"

namespace tessera {

// Forwards every call to the wrapped driver, giving subclasses one hook before and one after each call.
class ForwardingDriver : public Driver {
 public:
  explicit ForwardingDriver(std::unique_ptr<Driver> inner);

  Driver& inner() noexcept { return *inner_; }

  std::string_view name() const noexcept override { return inner_->name(); }
  const DriverCapabilities& capabilities() const noexcept override { return inner_->capabilities(); }
  Bytes granularity() const noexcept override { return inner_->granularity(); }
  Bytes capacity() const noexcept override { return inner_->capacity(); }
  DriverCensus census() const override { return inner_->census(); }

  Result<Address> reserve(Bytes size, Bytes alignment = 0) override;
  Result<void> release_reservation(Address base) override;
  Result<ChunkId> create_chunk(Bytes size) override;
  Result<void> release_chunk(ChunkId chunk) override;
  Result<void> map(Address at, ChunkId chunk) override;
  Result<void> map_part(Address at, ChunkId chunk, Bytes offset, Bytes size) override;
  Result<void> set_access(Address at, Bytes size) override;
  Result<void> unmap(Address at) override;
  Result<EventId> create_event() override;
  Result<void> record_event(EventId event, StreamId stream) override;
  Result<bool> query_event(EventId event) override;
  Result<void> synchronize_event(EventId event) override;
  Result<void> destroy_event(EventId event) override;
  Result<void> synchronize_stream(StreamId stream) override;
  Result<void> synchronize_device() override;
  Result<void> write(Address at, const void* source, Bytes size) override;
  Result<void> read(Address at, void* destination, Bytes size) override;
  Result<HostBuffer> allocate_host(Bytes size) override;
  Result<void> free_host(HostBuffer buffer) override;
  Result<void> copy_to_host(HostBuffer destination, Address source, Bytes size) override;
  Result<void> copy_to_device(Address destination, HostBuffer source, Bytes size) override;
  Result<ExportedChunk> export_chunk(ChunkId chunk) override;
  Result<ChunkId> import_chunk(int descriptor, Bytes offset, Bytes size) override;
  StreamControl* stream_control() noexcept override { return inner_->stream_control(); }
  Result<bool> stream_is_capturing(StreamId stream) override { return inner_->stream_is_capturing(stream); }

 protected:
  // An error returned here is answered instead of calling the wrapped driver.
  virtual std::optional<Error> before_call(DriverCall) { return std::nullopt; }
  virtual void after_call(DriverCall, bool /*succeeded*/, std::chrono::nanoseconds /*took*/) {}

 private:
  template <class Call>
  auto forward(DriverCall kind, Call&& call) -> decltype(call());

  std::unique_ptr<Driver> inner_;
};

// Counts every call by kind, with failures and wall time.
class CountingDriver final : public ForwardingDriver {
 public:
  using ForwardingDriver::ForwardingDriver;

  const CallTally& tally() const noexcept { return tally_; }
  void reset() noexcept { tally_ = CallTally{}; }

 protected:
  void after_call(DriverCall call, bool succeeded, std::chrono::nanoseconds took) override;

 private:
  CallTally tally_;
};

// Fails chosen calls without reaching the wrapped driver: the n-th call of a kind (counting from 1, from
// the moment the fault is armed), or every call of that kind from the n-th on.
class FaultInjectingDriver final : public ForwardingDriver {
 public:
  enum class Repeat : std::uint8_t { once, from_then_on };

  using ForwardingDriver::ForwardingDriver;

  void fail(DriverCall call, std::uint64_t nth, Repeat repeat = Repeat::once, Errc code = Errc::platform);
  void clear(DriverCall call);
  void clear_all();
  std::uint64_t injected(DriverCall call) const noexcept { return faults_[index(call)].injected; }

 protected:
  std::optional<Error> before_call(DriverCall call) override;

 private:
  struct Fault {
    bool armed = false;
    std::uint64_t nth = 0;
    std::uint64_t seen = 0;
    Repeat repeat = Repeat::once;
    Errc code = Errc::platform;
    std::uint64_t injected = 0;
  };
  static std::size_t index(DriverCall call) { return static_cast<std::size_t>(call); }

  std::array<Fault, driver_call_count> faults_{};
};

// Lowers the capacity of any driver: create_chunk fails with Errc::out_of_memory once the pages held would
// pass the limit.
class CapacityLimitDriver final : public ForwardingDriver {
 public:
  CapacityLimitDriver(std::unique_ptr<Driver> inner, Bytes limit);

  Bytes capacity() const noexcept override;
  Result<ChunkId> create_chunk(Bytes size) override;

 private:
  Bytes limit_;
};

}  // namespace tessera
