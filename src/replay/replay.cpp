// The replay engine: one trace, one allocator, one driver, one capacity.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "tessera/driver_decorators.hpp"
#include "tessera/drivers.hpp"
#include "tessera/replay.hpp"

namespace tessera {

namespace {

// "Unlimited" on the sim driver: more than any trace needs, and only a number.
constexpr Bytes sim_unlimited = Bytes{1} << 44;

struct Rig {
  std::unique_ptr<CountingDriver> driver;
  SimClock* clock = nullptr;
  std::unique_ptr<DeviceAllocator> allocator;
};

Result<Rig> build_rig(const Trace& trace, const ReplayOptions& options, std::optional<Bytes> capacity) {
  Rig rig;
  std::unique_ptr<Driver> base;
  if (options.driver == "sim") {
    auto sim = make_sim_driver({.capacity = capacity.value_or(sim_unlimited), .granularity = options.granularity});
    if (!sim) return std::move(sim).error();
    rig.clock = sim->clock;
    base = std::move(sim->driver);
  } else if (options.driver == "host") {
    // Unlimited on the host driver: four times the trace's peak (the memfd is sparse; nothing is touched).
    const Bytes unlimited = align_up(std::max<Bytes>(4 * summarize(trace).peak_live_bytes, 1 * GiB), options.granularity);
    auto host = make_host_driver({.capacity = capacity.value_or(unlimited), .granularity = options.granularity});
    if (!host) return std::move(host).error();
    base = std::move(host).value();
  } else {
    return make_error(Errc::invalid_argument,
                      fmt::format("replay driver '{}': expected sim or host", options.driver));
  }
  rig.driver = std::make_unique<CountingDriver>(std::move(base));
  auto allocator = make_replay_allocator(options.allocator, *rig.driver, options.tessera_config);
  if (!allocator) return std::move(allocator).error();
  rig.allocator = std::move(allocator).value();
  return rig;
}

// Replays the trace through the rig; `observe` runs after every event with the live requested bytes.
template <class Observe>
Result<void> run(const Trace& trace, Rig& rig, ReplayResult& result, Observe&& observe,
                 std::vector<Address>* kept_addresses = nullptr) {
  std::vector<Address> local_addresses;
  std::vector<Address>& addresses = kept_addresses != nullptr ? *kept_addresses : local_addresses;
  addresses.assign(trace.block_count, 0);
  DeviceAllocator& allocator = *rig.allocator;
  Bytes live = 0;
  auto allocate = [&](BlockId block, Bytes size, std::uint32_t stream, std::optional<std::size_t> event) -> Result<bool> {
    auto address = allocator.allocate(size, trace.streams[stream]);
    if (!address) {
      if (address.error().code != Errc::out_of_memory) return std::move(address).error();
      result.oom = true;
      result.oom_event = event;
      result.oom_message = address.error().message;
      return false;
    }
    addresses[block] = *address;
    live += size;
    return true;
  };
  for (const InitialBlock& block : trace.initial_blocks) {
    auto placed = allocate(block.id, block.size, block.stream, std::nullopt);
    if (!placed) return std::move(placed).error();
    if (!*placed) return {};
  }
  observe(std::size_t{0}, live, false);
  for (std::size_t index = 0; index < trace.events.size(); ++index) {
    const TraceEvent& event = trace.events[index];
    switch (event.kind) {
      case TraceEventKind::alloc: {
        auto placed = allocate(event.block, event.size, event.stream, index);
        if (!placed) return std::move(placed).error();
        if (!*placed) return {};
        break;
      }
      case TraceEventKind::free:
        if (auto freed = allocator.deallocate(addresses[event.block]); !freed) {
          return make_error(freed.error().code, fmt::format("{}: event {}: {}", trace.name, index, freed.error().message));
        }
        live -= event.size;
        break;
      case TraceEventKind::iteration:
        break;
    }
    result.events = index + 1;
    observe(index, live, event.kind == TraceEventKind::iteration);
  }
  return {};
}

void finish_driver_figures(const Rig& rig, ReplayResult& result) {
  result.driver_calls = rig.driver->tally();
  result.driver_time_ns =
      rig.clock != nullptr ? rig.clock->modelled().total_nanoseconds() : rig.driver->tally().total_nanoseconds();
  result.syncs = result.driver_calls.calls_of(DriverCall::synchronize_stream) +
                 result.driver_calls.calls_of(DriverCall::synchronize_device) +
                 result.driver_calls.calls_of(DriverCall::synchronize_event);
}

}  // namespace

Result<ReplayResult> replay(const Trace& trace, const ReplayOptions& options) {
  if (auto valid = validate(trace); !valid) return std::move(valid).error();
  auto rig = build_rig(trace, options, options.capacity);
  if (!rig) return std::move(rig).error();

  ReplayResult result;
  result.trace = trace.name;
  result.allocator = options.allocator;
  result.driver = options.driver;
  result.capacity = options.capacity;

  double frag_sum = 0;
  std::size_t frag_samples = 0;
  const std::size_t stride =
      options.series_points == 0 ? 0 : std::max<std::size_t>(1, trace.events.size() / options.series_points);
  std::uint64_t calls_at_iteration = 0;
  bool in_iteration = false;
  Driver& driver = *rig->driver;
  // Reserved bytes change only when a page is created or released: ask the driver only then.
  Bytes reserved = driver.census().page_bytes;
  std::uint64_t page_calls = 0;
  auto observe = [&](std::size_t index, Bytes live, bool iteration_marker) {
    const CallTally& tally = rig->driver->tally();
    const std::uint64_t page_calls_now = tally.calls_of(DriverCall::create_page) + tally.calls_of(DriverCall::release_page);
    if (page_calls_now != page_calls) {
      page_calls = page_calls_now;
      reserved = driver.census().page_bytes;
    }
    if (live > result.peak_allocated) result.reserved_at_peak_allocated = reserved;
    result.peak_allocated = std::max(result.peak_allocated, live);
    result.peak_reserved = std::max(result.peak_reserved, reserved);
    if (reserved > 0) {
      frag_sum += static_cast<double>(reserved - std::min(reserved, live)) / static_cast<double>(reserved);
      ++frag_samples;
    }
    if (stride != 0 && (index % stride == 0 || index + 1 == trace.events.size())) {
      result.series.push_back({index, live, reserved});
    }
    if (iteration_marker) {
      const std::uint64_t calls = rig->driver->tally().total_calls();
      if (in_iteration) result.calls_per_iteration.push_back(calls - calls_at_iteration);
      calls_at_iteration = calls;
      in_iteration = true;
    }
  };
  const auto start = std::chrono::steady_clock::now();
  auto ran = run(trace, *rig, result, observe, options.keep_state ? &result.addresses : nullptr);
  const auto took = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start);
  if (!ran) return std::move(ran).error();
  // The allocator's own time per operation: the loop's wall time less the time spent in the driver (the
  // sampling above adds a few nanoseconds per event).
  const std::size_t operations = trace.initial_blocks.size() + result.events;
  if (operations > 0) {
    const auto driver_ns = static_cast<double>(rig->driver->tally().total_nanoseconds());
    result.host_ns_per_op =
        std::max(0.0, (static_cast<double>(took.count()) - driver_ns) / static_cast<double>(operations));
  }
  if (options.keep_state) {
    if (const auto* tessera = dynamic_cast<const TesseraAllocator*>(rig->allocator.get())) {
      result.final_state = tessera->snapshot();
    }
  }
  if (in_iteration && !result.oom) result.calls_per_iteration.push_back(rig->driver->tally().total_calls() - calls_at_iteration);

  result.frag_at_peak =
      result.peak_reserved == 0 ? 0.0
                                : 1.0 - static_cast<double>(result.peak_allocated) / static_cast<double>(result.peak_reserved);
  result.avg_frag = frag_samples == 0 ? 0.0 : frag_sum / static_cast<double>(frag_samples);
  finish_driver_figures(*rig, result);
  return result;
}

Result<ReplayResult> replay_with_min_capacity(const Trace& trace, const ReplayOptions& options) {
  auto result = replay(trace, options);
  if (!result) return result;
  ReplayOptions probe = options;
  probe.series_points = 0;
  probe.keep_state = false;
  const Bytes granule = options.granularity;
  auto fits = [&](Bytes capacity) -> Result<bool> {
    probe.capacity = capacity;
    auto attempt = replay(trace, probe);
    if (!attempt) return std::move(attempt).error();
    return !attempt->oom;
  };
  // The unlimited replay's footprint is enough: the allocator made the same choices below it.
  Bytes unlimited_peak = result->peak_reserved;
  if (options.capacity) {
    probe.capacity.reset();
    auto unlimited = replay(trace, probe);
    if (!unlimited) return std::move(unlimited).error();
    unlimited_peak = unlimited->peak_reserved;
  }
  std::size_t low = std::max<std::size_t>(1, (result->peak_allocated + granule - 1) / granule);
  std::size_t high = std::max<std::size_t>(low, (unlimited_peak + granule - 1) / granule);
  for (;;) {
    auto ok = fits(high * granule);
    if (!ok) return std::move(ok).error();
    if (*ok) break;
    if (high * granule >= sim_unlimited / 2) return result;  // never fits: min_capacity stays unknown
    high *= 2;
  }
  while (low < high) {
    const std::size_t middle = low + (high - low) / 2;
    auto ok = fits(middle * granule);
    if (!ok) return std::move(ok).error();
    if (*ok) {
      high = middle;
    } else {
      low = middle + 1;
    }
  }
  result->min_capacity = high * granule;
  if (result->peak_allocated > 0) {
    result->overhead = static_cast<double>(*result->min_capacity) / static_cast<double>(result->peak_allocated) - 1.0;
  }
  return result;
}

}  // namespace tessera
