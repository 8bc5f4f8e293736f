// sim: no memory at all. Addresses are numbers handed out in increasing order, capacity is a number, and
// every call that reaches the platform is counted and charged the latency its kind costs in the model. It
// replays a trace of an 80 GB card on a laptop; the ledger in PlatformDriver is its whole state.
#include <fmt/format.h>

#include "driver/platform_driver.hpp"
#include "driver/simulated_streams.hpp"
#include "tessera/drivers.hpp"

namespace tessera {

namespace {

using detail::PlatformHandle;

// Capabilities per platform; data access, host pointers and asynchrony are the sim's own (it has no memory
// and completes work at once), whichever platform it follows.
DriverCapabilities sim_capabilities(SimPlatform platform) {
  const bool cuda = platform == SimPlatform::cuda;
  return DriverCapabilities{.needs_set_access = cuda,
                            .page_multi_mapping = cuda,
                            .data_access = false,
                            .host_pointers = false,
                            .asynchronous = false,
                            .partial_map = cuda,
                            .survives_fork = true,
                            .host_backup = true,
                            .reusable_events = cuda};
}

class SimDriver final : public detail::PlatformDriver, public SimClock {
 public:
  explicit SimDriver(const SimDriverOptions& options)
      : PlatformDriver("sim", sim_capabilities(options.platform), options.granularity, options.capacity),
        latency_(options.latency),
        host_capacity_(options.host_capacity) {}

  const CallTally& modelled() const noexcept override { return modelled_; }
  void reset_modelled() noexcept override { modelled_ = CallTally{}; }
  StreamControl* stream_control() noexcept override { return &streams_; }

 protected:
  Result<Address> platform_reserve(Bytes size, Bytes alignment) override {
    charge(DriverCall::reserve, size);
    const Address base = align_up(next_address_, alignment);
    next_address_ = base + size;
    return base;
  }
  Result<void> platform_release_reservation(Address, Bytes size) override {
    charge(DriverCall::release_reservation, size);
    return {};
  }
  Result<PlatformHandle> platform_create_chunk(Bytes size) override {
    charge(DriverCall::create_chunk, size);
    return next_page_++;
  }
  Result<void> platform_release_chunk(PlatformHandle, Bytes size) override {
    charge(DriverCall::release_chunk, size);
    return {};
  }
  Result<void> platform_map(Address, PlatformHandle, Bytes, Bytes size) override {
    charge(DriverCall::map, size);
    return {};
  }
  Result<void> platform_set_access(Address, Bytes size) override {
    charge(DriverCall::set_access, size);
    return {};
  }
  Result<void> platform_unmap(Address, Bytes size) override {
    charge(DriverCall::unmap, size);
    return {};
  }
  Result<PlatformHandle> platform_create_event() override {
    charge(DriverCall::create_event, 0);
    return streams_.create_event();
  }
  Result<void> platform_record_event(PlatformHandle event, StreamId stream) override {
    charge(DriverCall::record_event, 0);
    streams_.record(event, stream);
    return {};
  }
  Result<bool> platform_query_event(PlatformHandle event) override {
    charge(DriverCall::query_event, 0);
    return streams_.query(event);
  }
  Result<void> platform_synchronize_event(PlatformHandle event) override {
    charge(DriverCall::synchronize_event, 0);
    streams_.synchronize_event(event);
    return {};
  }
  Result<void> platform_destroy_event(PlatformHandle event) override {
    charge(DriverCall::destroy_event, 0);
    streams_.destroy_event(event);
    return {};
  }
  Result<void> platform_synchronize_stream(StreamId stream) override {
    charge(DriverCall::synchronize_stream, 0);
    streams_.synchronize_stream(stream);
    return {};
  }
  Result<void> platform_synchronize_device() override {
    charge(DriverCall::synchronize_device, 0);
    streams_.synchronize_all();
    return {};
  }

  // Host buffers: numbers and bytes, no memory; copies are charged and move nothing.
  Result<detail::HostBufferRecord> platform_allocate_host(Bytes size) override {
    if (size > host_capacity_ || host_bytes_ > host_capacity_ - size) {
      return make_error(Errc::out_of_memory,
                        fmt::format("sim driver: no host memory for a buffer of {} bytes: {} of {} bytes are in "
                                    "use",
                                    size, host_bytes_, host_capacity_));
    }
    charge(DriverCall::allocate_host, size);
    host_bytes_ += size;
    return detail::HostBufferRecord{.handle = next_host_buffer_++, .data = nullptr, .size = size};
  }
  Result<void> platform_free_host(const detail::HostBufferRecord& buffer) override {
    charge(DriverCall::free_host, buffer.size);
    host_bytes_ -= buffer.size;
    return {};
  }
  Result<void> platform_copy_to_host(const detail::HostBufferRecord&, Address, Bytes size) override {
    charge(DriverCall::copy_to_host, size);
    return {};
  }
  Result<void> platform_copy_to_device(Address, const detail::HostBufferRecord&, Bytes size) override {
    charge(DriverCall::copy_to_device, size);
    return {};
  }

 private:
  void charge(DriverCall call, Bytes size) {
    const auto index = static_cast<std::size_t>(call);
    const CallLatency& cost = latency_.of[index];
    const Bytes granules = size / granularity();
    const double extra = granules > 1 ? static_cast<double>(granules - 1) : 0.0;
    modelled_.calls[index] += 1;
    modelled_.nanoseconds[index] += static_cast<std::uint64_t>(
        (cost.fixed_us + cost.per_extra_granule_us * extra) * 1000.0 + cost.per_byte_ns * static_cast<double>(size) +
        0.5);
  }

  LatencyModel latency_;
  CallTally modelled_;
  detail::SimulatedStreams streams_;
  Address next_address_ = Address{1} << 44;  // far from zero, so that a null address is never handed out
  PlatformHandle next_page_ = 1;
  Bytes host_capacity_;
  Bytes host_bytes_ = 0;
  PlatformHandle next_host_buffer_ = 1;
};

}  // namespace

Result<SimDriverHandle> make_sim_driver(const SimDriverOptions& options) {
  if (!is_power_of_two(options.granularity)) {
    return make_error(Errc::invalid_argument,
                      fmt::format("sim driver: granularity {} must be a power of two", options.granularity));
  }
  if (options.capacity == 0 || !is_aligned(options.capacity, options.granularity)) {
    return make_error(Errc::invalid_argument,
                      fmt::format("sim driver: capacity {} must be a positive multiple of the granularity {}",
                                  options.capacity, options.granularity));
  }
  for (const CallLatency& cost : options.latency.of) {
    if (cost.fixed_us < 0 || cost.per_extra_granule_us < 0 || cost.per_byte_ns < 0) {
      return make_error(Errc::invalid_argument, "sim driver: a modelled latency is negative");
    }
  }
  auto driver = std::make_unique<SimDriver>(options);
  SimClock* clock = driver.get();
  return SimDriverHandle{std::move(driver), clock};
}

}  // namespace tessera
