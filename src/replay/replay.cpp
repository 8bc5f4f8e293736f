// The replay engine: one trace, one allocator, one driver, one capacity.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <limits>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "replay/segment_log.hpp"
#include "tessera/baselines.hpp"
#include "tessera/driver_decorators.hpp"
#include "tessera/drivers.hpp"
#include "tessera/replay.hpp"
#include "tessera/tags.hpp"

namespace tessera {

namespace {

// "Unlimited" on the sim driver: more than any trace needs, and only a number.
constexpr Bytes sim_unlimited = Bytes{1} << 44;

struct Rig {
  std::unique_ptr<CountingDriver> driver;
  SimClock* clock = nullptr;
  // keep_state only; before the allocator, which tells it what it gives back when destroyed.
  std::unique_ptr<replay_detail::SegmentLog> segments;
  std::unique_ptr<DeviceAllocator> allocator;
};

// The allocator, telling the segment log (when there is one) what it does to its device memory.
Result<std::unique_ptr<DeviceAllocator>> make_logged_allocator(const ReplayOptions& options, Rig& rig) {
  if (rig.segments != nullptr) {
    const auto baselines = baseline_names();
    if (std::find(baselines.begin(), baselines.end(), options.allocator) != baselines.end()) {
      BaselineOptions baseline_options;
      baseline_options.on_segment = rig.segments->baseline_observer();
      return make_baseline(options.allocator, *rig.driver, baseline_options);
    }
  }
  auto allocator = make_replay_allocator(options.allocator, *rig.driver, options.tessera_config);
  if (allocator && rig.segments != nullptr) {
    if (auto* tessera = dynamic_cast<TesseraAllocator*>(allocator->get())) tessera->add_observer(*rig.segments);
  }
  return allocator;
}

// The results' `driver`: "sim", "host", or the sim with what it models that is not the default, as
// "sim (ascend, per_byte)". The default stays a bare "sim", so that reports made before the choices existed
// compare field by field.
std::string driver_label(const ReplayOptions& options) {
  if (options.driver != "sim") return options.driver;
  std::vector<std::string_view> choices;
  if (options.sim_platform == SimPlatform::ascend) choices.push_back("ascend");
  if (options.sim_latency != LatencyScaling::per_call) choices.push_back(to_string(options.sim_latency));
  return choices.empty() ? options.driver : fmt::format("sim ({})", fmt::join(choices, ", "));
}

Result<Rig> build_rig(const Trace& trace, const ReplayOptions& options, std::optional<Bytes> capacity) {
  Rig rig;
  std::unique_ptr<Driver> base;
  if (options.driver == "sim") {
    SimDriverOptions sim_options;
    if (options.sim_platform == SimPlatform::ascend) {
      sim_options = SimDriverOptions::ascend_910b(options.sim_latency);
    } else {
      sim_options.latency = LatencyModel::a100(options.sim_latency);
    }
    sim_options.capacity = capacity.value_or(sim_unlimited);
    sim_options.granularity = options.granularity;
    auto sim = make_sim_driver(sim_options);
    if (!sim) return std::move(sim).error();
    rig.clock = sim->clock;
    base = std::move(sim->driver);
  } else if (options.driver == "host") {
    if (options.sim_platform != SimPlatform::cuda) {
      return make_error(Errc::invalid_argument, "replay: a platform other than cuda is for the sim driver only");
    }
    if (options.sim_latency != LatencyScaling::per_call) {
      return make_error(Errc::invalid_argument,
                        "replay: a latency model is for the sim driver only; the host driver's times are measured");
    }
    // Unlimited on the host driver: four times the trace's peak (the memfd is sparse; nothing is touched),
    // and no more than the sim driver's unlimited, so that a trace of absurd sizes neither overflows it nor
    // asks the kernel for more address space than it has.
    const TraceSummary summary = summarize(trace);
    const bool absurd = summary.live_past_2_64 != TraceSummary::npos || summary.peak_live_bytes >= sim_unlimited / 4;
    const Bytes unlimited = align_up(absurd ? sim_unlimited : std::max<Bytes>(4 * summary.peak_live_bytes, 1 * GiB),
                                     options.granularity);
    auto host = make_host_driver({.capacity = capacity.value_or(unlimited), .granularity = options.granularity});
    if (!host) return std::move(host).error();
    base = std::move(host).value();
  } else {
    return make_error(Errc::invalid_argument,
                      fmt::format("replay driver '{}': expected sim or host", options.driver));
  }
  rig.driver = std::make_unique<CountingDriver>(std::move(base));
  if (options.keep_state) rig.segments = std::make_unique<replay_detail::SegmentLog>();
  auto allocator = make_logged_allocator(options, rig);
  if (!allocator) return std::move(allocator).error();
  rig.allocator = std::move(allocator).value();
  return rig;
}

// Where a replay failed, for its message: "event 12 (alloc of 4096 bytes)" or "initial block 3".
std::string where(const Trace& trace, std::optional<std::size_t> event, BlockId initial_block) {
  if (!event) return fmt::format("initial block {}", initial_block);
  const TraceEvent& at = trace.events[*event];
  switch (at.kind) {
    case TraceEventKind::alloc:
      return fmt::format("event {} (alloc of {} bytes)", *event, at.size);
    case TraceEventKind::free:
      return fmt::format("event {} (free of block {})", *event, at.block);
    case TraceEventKind::pause:
      return fmt::format("event {} (pause of tag '{}')", *event, at.tag < trace.tags.size() ? trace.tags[at.tag] : "?");
    case TraceEventKind::resume:
      return fmt::format("event {} (resume of tag '{}')", *event, at.tag < trace.tags.size() ? trace.tags[at.tag] : "?");
    case TraceEventKind::record_stream:
      return fmt::format("event {} (record_stream of block {})", *event, at.block);
    case TraceEventKind::begin_pool:
    case TraceEventKind::end_pool:
    case TraceEventKind::release_pool:
      if (at.size < trace.pools.size()) {
        return fmt::format("event {} ({} of pool ({}, {}))", *event, to_string(at.kind), trace.pools[at.size].id.first,
                           trace.pools[at.size].id.second);
      }
      return fmt::format("event {} ({})", *event, to_string(at.kind));
    case TraceEventKind::iteration:
      break;
  }
  return fmt::format("event {}", *event);
}

// A pool event as PyTorch makes it: a capture's begin accepts the one stream it captures on.
Result<void> replay_pool_event(DeviceAllocator& allocator, const Trace& trace, const TraceEvent& event) {
  const TracePool& pool = trace.pools[event.size];
  switch (event.kind) {
    case TraceEventKind::begin_pool: {
      const StreamId captured = trace.streams[event.stream];
      return allocator.begin_allocate_to_pool(pool.id, [captured](StreamId stream) { return stream == captured; },
                                              pool.kind);
    }
    case TraceEventKind::end_pool: return allocator.end_allocate_to_pool(pool.id);
    default: return allocator.release_pool(pool.id);
  }
}

// The driver's time so far: modelled on the sim driver, measured on the others.
std::uint64_t driver_time_ns(const Rig& rig) {
  return rig.clock != nullptr ? rig.clock->modelled().total_nanoseconds() : rig.driver->tally().total_nanoseconds();
}

void add_difference(CallTally& sum, const CallTally& after, const CallTally& before) {
  for (std::size_t k = 0; k < driver_call_count; ++k) {
    sum.calls[k] += after.calls[k] - before.calls[k];
    sum.failures[k] += after.failures[k] - before.failures[k];
    sum.nanoseconds[k] += after.nanoseconds[k] - before.nanoseconds[k];
  }
}

// Replays the trace through the rig; `observe` runs after every event with the live requested bytes and
// whether some tag is paused. A
// failure names the event; an exception from the allocator (std::bad_alloc when the host runs out of memory)
// is such a failure, not an out-of-memory answer of the device.
template <class Observe>
Result<void> run(const Trace& trace, Rig& rig, ReplayResult& result, Observe&& observe,
                 std::vector<Address>* kept_addresses = nullptr) {
  std::vector<Address> local_addresses;
  std::vector<Address>& addresses = kept_addresses != nullptr ? *kept_addresses : local_addresses;
  addresses.assign(trace.block_count, 0);
  DeviceAllocator& allocator = *rig.allocator;
  Bytes live = 0;
  std::optional<std::size_t> current;  // the event being replayed; none while placing the initial blocks
  BlockId current_initial = 0;
  auto failed = [&](const Error& error) {
    return make_error(error.code, fmt::format("{}: {}", where(trace, current, current_initial), error.message),
                      error.platform_code);
  };
  std::size_t paused_tags = 0;
  auto allocate = [&](BlockId block, Bytes size, std::uint32_t stream, TraceTag tag) -> Result<bool> {
    // The allocation takes the tag open on this thread, as in the recorded job.
    std::optional<TagScope> scope;
    if (tag != trace_default_tag) {
      if (auto checked = check_tag_name(trace.tags[tag]); !checked) return failed(checked.error());
      scope.emplace(trace.tags[tag]);
    }
    auto address = allocator.allocate(size, trace.streams[stream]);
    if (!address) {
      if (address.error().code != Errc::out_of_memory) return failed(address.error());
      result.oom = true;
      result.oom_event = current;
      result.oom_message = address.error().message;
      return false;
    }
    addresses[block] = *address;
    if (live > std::numeric_limits<Bytes>::max() - size) {
      return failed(make_error(Errc::invalid_argument, "the live bytes pass 2^64"));
    }
    live += size;
    return true;
  };
  try {
    for (const InitialBlock& block : trace.initial_blocks) {
      current_initial = block.id;
      auto placed = allocate(block.id, block.size, block.stream, trace_default_tag);
      if (!placed) return std::move(placed).error();
      if (!*placed) return {};
    }
    // What placing them mapped is the snapshot's starting state, not entries of its trace (MemoryViz finds
    // every block live before the first entry in a segment that no entry makes).
    if (rig.segments != nullptr) result.starting_segment_changes = rig.segments->size();
    observe(std::size_t{0}, live, false, false);
    for (std::size_t index = 0; index < trace.events.size(); ++index) {
      current = index;
      const TraceEvent& event = trace.events[index];
      // What a free does to device memory goes after it in a snapshot, what anything else does before it.
      if (rig.segments != nullptr) rig.segments->set_place(event.kind == TraceEventKind::free ? index + 1 : index);
      switch (event.kind) {
        case TraceEventKind::alloc: {
          auto placed = allocate(event.block, event.size, event.stream, event.tag);
          if (!placed) return std::move(placed).error();
          if (!*placed) return {};
          break;
        }
        case TraceEventKind::free:
          if (auto freed = allocator.deallocate(addresses[event.block]); !freed) return failed(freed.error());
          live -= event.size;
          break;
        case TraceEventKind::iteration:
          break;
        case TraceEventKind::record_stream:
          if (auto recorded = allocator.record_stream(addresses[event.block], trace.streams[event.stream]); !recorded) {
            return failed(recorded.error());
          }
          break;
        case TraceEventKind::begin_pool:
        case TraceEventKind::end_pool:
        case TraceEventKind::release_pool:
          if (auto done = replay_pool_event(allocator, trace, event); !done) {
            // An allocator without private pools serves the pool's allocations from its shared cache; the
            // replay goes on and says so.
            if (done.error().code != Errc::unsupported) return failed(done.error());
            result.pool_unsupported = true;
          }
          break;
        case TraceEventKind::pause:
        case TraceEventKind::resume: {
          const bool pause = event.kind == TraceEventKind::pause;
          const CallTally calls_before = rig.driver->tally();
          const std::uint64_t time_before = driver_time_ns(rig);
          Result<void> done = pause ? allocator.pause(trace.tags[event.tag], event.backup)
                                    : allocator.resume(trace.tags[event.tag]);
          add_difference(pause ? result.pause_driver_calls : result.resume_driver_calls, rig.driver->tally(),
                         calls_before);
          (pause ? result.pause_time_ns : result.resume_time_ns) += driver_time_ns(rig) - time_before;
          ++(pause ? result.pauses : result.resumes);
          paused_tags = pause ? paused_tags + 1 : paused_tags - 1;
          if (!done) {
            // An allocator that cannot pause keeps the tag's memory; the replay goes on and says so.
            if (done.error().code == Errc::unsupported) {
              result.pause_unsupported = true;
            } else if (done.error().code == Errc::out_of_memory) {
              result.oom = true;
              result.oom_event = current;
              result.oom_message = done.error().message;
              return {};
            } else {
              return failed(done.error());
            }
          }
          break;
        }
      }
      result.events = index + 1;
      observe(index, live, event.kind == TraceEventKind::iteration, paused_tags > 0);
    }
  } catch (const std::bad_alloc&) {
    return failed(make_error(Errc::platform, "the host ran out of memory (std::bad_alloc)"));
  } catch (const std::exception& exception) {
    return failed(make_error(Errc::platform, fmt::format("exception: {}", exception.what())));
  }
  return {};
}

void finish_driver_figures(const Rig& rig, ReplayResult& result) {
  result.driver_calls = rig.driver->tally();
  result.driver_time_ns = driver_time_ns(rig);
  result.syncs = result.driver_calls.calls_of(DriverCall::synchronize_stream) +
                 result.driver_calls.calls_of(DriverCall::synchronize_device) +
                 result.driver_calls.calls_of(DriverCall::synchronize_event);
}

}  // namespace

Result<ReplayResult> replay(const Trace& trace, const ReplayOptions& options) {
  if (!is_power_of_two(options.granularity) || options.granularity < min_replay_granularity) {
    return make_error(Errc::invalid_argument,
                      fmt::format("replay granularity {} bytes: expected a power of two of at least {} bytes",
                                  options.granularity, min_replay_granularity));
  }
  if (auto valid = validate(trace); !valid) return std::move(valid).error();
  auto rig = [&]() -> Result<Rig> {
    try {
      return build_rig(trace, options, options.capacity);
    } catch (const std::exception& exception) {  // std::bad_alloc from a capacity of absurd size, say
      return make_error(Errc::platform, fmt::format("setting up the {} allocator on the {} driver: {}",
                                                    options.allocator, options.driver, exception.what()));
    }
  }();
  if (!rig) return std::move(rig).error();

  ReplayResult result;
  result.trace = trace.name;
  result.allocator = options.allocator;
  result.driver = driver_label(options);
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
  auto observe = [&](std::size_t index, Bytes live, bool iteration_marker, bool paused) {
    const CallTally& tally = rig->driver->tally();
    const std::uint64_t page_calls_now = tally.calls_of(DriverCall::create_chunk) + tally.calls_of(DriverCall::release_chunk);
    if (page_calls_now != page_calls) {
      page_calls = page_calls_now;
      reserved = driver.census().page_bytes;
    }
    if (live > result.peak_allocated) result.reserved_at_peak_allocated = reserved;
    result.peak_allocated = std::max(result.peak_allocated, live);
    result.peak_reserved = std::max(result.peak_reserved, reserved);
    if (paused) result.peak_reserved_while_paused = std::max(result.peak_reserved_while_paused.value_or(0), reserved);
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
    if (rig->segments != nullptr) result.segment_changes = rig->segments->take();
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
    if (!attempt) {
      const Error& error = attempt.error();
      return make_error(error.code,
                        fmt::format("at capacity {} (bisecting for min_capacity): {}", capacity, error.message),
                        error.platform_code);
    }
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
  // Granules, rounded up by division: a peak near 2^64 bytes must not overflow.
  auto granules = [&](Bytes bytes) { return bytes / granule + (bytes % granule != 0 ? 1 : 0); };
  // A trace that pauses tags may fit below its live peak: paused blocks need no memory. The search starts
  // at the resident peak there (summarize()); without pauses that is the live peak.
  const TraceSummary summary = summarize(trace);
  const Bytes floor = summary.pauses > 0 ? std::min(result->peak_allocated, summary.peak_resident_bytes)
                                         : result->peak_allocated;
  std::size_t low = std::max<std::size_t>(1, granules(floor));
  std::size_t high = std::max<std::size_t>(low, granules(unlimited_peak));
  for (;;) {
    if (high > sim_unlimited / granule) return result;  // more than unlimited: min_capacity stays unknown
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
