// Replay: runs a trace through any allocator on any driver with a device capacity, and measures it as the
// design defines (docs/replay.md):
//   peak_allocated  most live requested bytes at any moment, blocks live before the trace included
//   peak_reserved   most physical bytes held from the device at any moment (the driver's pages)
//   reserved_at_peak_allocated   physical bytes held when live bytes reached their peak (what
//                   SOURCES.md records for the real allocator)
//   frag_at_peak    1 - peak_allocated / peak_reserved
//   avg_frag        mean over events of (reserved - allocated) / reserved, where reserved > 0
//   min_capacity    the smallest capacity, to the granule, at which the whole trace replays without an
//                   out-of-memory error (bisection); overhead = min_capacity / peak_allocated - 1. With
//                   pauses, peak_allocated counts paused blocks, and min_capacity may be below it
// plus driver calls by kind, their modelled time (sim) or wall time (other drivers), syncs, and the
// allocator's own host time per operation, driver time excluded. A trace with tags (pause and resume events)
// adds what pause() and resume() cost and the reserved bytes while a tag is paused.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/allocator.hpp"
#include "tessera/device_allocator.hpp"
#include "tessera/driver.hpp"
#include "tessera/drivers.hpp"
#include "tessera/trace.hpp"

namespace tessera {

// The allocators a replay can run: "tessera" and the baseline models; "ideal" and "ideal_cache" are
// reference lines computed from the trace without an allocator (reference_result below).
std::vector<std::string_view> replay_allocator_names();

Result<std::unique_ptr<DeviceAllocator>> make_replay_allocator(std::string_view name, Driver& driver,
                                                               const AllocatorConfig& tessera_config = {});

// The smallest granule a replay takes, whatever the driver: the host driver's page. The sim driver would take
// any power of two, but Tessera's allocator maps pages of a few granules, so a granule of a few bytes makes
// it hold host memory in proportion to the bytes a trace asks for (gigabytes for a 24 KB trace).
inline constexpr Bytes min_replay_granularity = 4 * KiB;

struct ReplayOptions {
  std::string allocator = "tessera";
  std::string driver = "sim";  // "sim" or "host": a replay never needs an accelerator
  SimPlatform sim_platform = SimPlatform::cuda;  // sim only: whose VMM contract and latencies it models
  // sim only: how a chunk's modelled cost grows with its bytes (docs/drivers.md). Results name the model
  // in `driver` ("sim (per_byte)") unless it is the default, so that default reports read as they did.
  LatencyScaling sim_latency = LatencyScaling::per_call;
  std::optional<Bytes> capacity;  // none: unlimited
  Bytes granularity = 2 * MiB;    // a power of two, at least min_replay_granularity
  AllocatorConfig tessera_config;
  std::size_t series_points = 0;  // > 0: keep about this many (event, allocated, reserved) samples
  // Keep every block's address, what the allocator did to its device memory (segment changes) and, for the
  // tessera allocator, its segments and blocks at the end: what a PyTorch snapshot of the replay needs
  // (write_pytorch_snapshot). Off, the replay collects none of it.
  bool keep_state = false;
};

struct SeriesPoint {
  std::size_t event = 0;
  Bytes allocated = 0;
  Bytes reserved = 0;
};

struct ReplayResult {
  std::string trace;
  std::string allocator;
  std::string driver;
  std::optional<Bytes> capacity;
  Bytes peak_allocated = 0;
  Bytes peak_reserved = 0;
  Bytes reserved_at_peak_allocated = 0;  // reserved when live bytes first reached their peak
  double frag_at_peak = 0;
  double avg_frag = 0;
  std::optional<Bytes> min_capacity;
  std::optional<double> overhead;
  bool oom = false;
  std::optional<std::size_t> oom_event;  // index into trace.events of the allocation that failed
  std::string oom_message;
  CallTally driver_calls;            // every call the allocator made, by kind
  std::uint64_t driver_time_ns = 0;  // modelled (sim) or measured (host)
  std::uint64_t syncs = 0;
  // allocate/deallocate bookkeeping: the replay loop's wall time less the driver's, per operation (the
  // replay's own sampling adds a few ns)
  double host_ns_per_op = 0;
  std::size_t events = 0;     // trace events replayed (initial blocks not counted)
  // Driver calls made in each iteration the trace marks (empty when it marks none).
  std::vector<std::uint64_t> calls_per_iteration;
  // Traces with pause and resume events (the replay calls DeviceAllocator::pause / resume; a tagged alloc
  // runs under a TagScope of its tag). Empty or zero for a trace without them.
  std::size_t pauses = 0;   // pause events replayed
  std::size_t resumes = 0;
  // The allocator answered Errc::unsupported (it cannot pause): its tagged memory stayed where it was.
  bool pause_unsupported = false;
  // The allocator answered Errc::unsupported to a pool event (it has no private pools): it served the pool's
  // allocations from its shared cache, which the recorded job could not have done.
  bool pool_unsupported = false;
  CallTally pause_driver_calls;   // the driver calls made inside pause(), by kind
  CallTally resume_driver_calls;  // and inside resume()
  std::uint64_t pause_time_ns = 0;   // their modelled (sim) or measured (host) time
  std::uint64_t resume_time_ns = 0;
  // The most reserved bytes while some tag was paused (between a pause and its resume): the device memory
  // the paused job leaves to the other (RL: what training has). None when no tag was ever paused.
  std::optional<Bytes> peak_reserved_while_paused;
  std::vector<SeriesPoint> series;
  std::vector<Address> addresses;              // keep_state: by block id
  std::optional<AllocatorSnapshot> final_state;  // keep_state, tessera allocator: its state at the end
  // keep_state: segments made and freed, pages mapped, unmapped and pooled, in order with the events; their
  // bytes add up to the reserved bytes (the driver's pages) after every event.
  std::vector<SegmentChange> segment_changes;
  // keep_state: the first this many of them were made while the initial blocks were placed: the memory that
  // held the trace's blocks before its first event, the snapshot's starting state.
  std::size_t starting_segment_changes = 0;
  // Not empty: this replay failed with an error that is not an out-of-memory answer (a driver error, the
  // host out of memory, live bytes past 2^64), and this says why and at which event; the figures above are
  // then not measured. replay() returns such an error instead; the command's runner keeps it here, so that
  // one allocator's failure costs none of the other results.
  std::string failure;
};

// One replay at one capacity. An out-of-memory answer ends the replay and is reported in the result (oom);
// any other failure (a bad trace, a driver error, an exception from the allocator such as std::bad_alloc)
// is an error, which names the event. The granularity must be a power of two of at least
// min_replay_granularity.
Result<ReplayResult> replay(const Trace& trace, const ReplayOptions& options);

// As replay(), then bisects the capacity to the granule for min_capacity and overhead.
Result<ReplayResult> replay_with_min_capacity(const Trace& trace, const ReplayOptions& options);

// Reference lines, computed from the trace alone (no driver figures):
//   ideal        reserved equal to live bytes at every moment: both fragmentations 0.
//   ideal_cache  reserved equal to the most bytes live so far: an allocator that gives nothing back and
//                wastes nothing. Its avg_frag is avg_frag_floor(trace).
// min_capacity is peak_allocated rounded up to the granule for both (none where that passes 2^64). With
// series_points > 0 ideal_cache keeps a series as a replay does (ideal's would repeat the live bytes). A
// trace whose live bytes pass 2^64 gets no figures: `failure` names the event.
ReplayResult ideal_result(const Trace& trace, Bytes granularity);
ReplayResult ideal_cache_result(const Trace& trace, Bytes granularity, std::size_t series_points = 0);
// The line of that name; none when `name` is not a reference line.
std::optional<ReplayResult> reference_result(std::string_view name, const Trace& trace, Bytes granularity,
                                             std::size_t series_points = 0);
bool is_reference_line(std::string_view name);

// The real allocator's line, from what a profile recorded of it (read_recording's RecordedTotals): a result
// named recorded_line_name, with no driver figures, beside the replays of the same trace.
//   peak_reserved   the recorded peak of Total Reserved
//   peak_allocated  the recorded peak of Total Allocated (the trace's live bytes where none was recorded)
//   reserved_at_peak_allocated, frag_at_peak, avg_frag   as a replay's, from the recorded totals
// and with series_points > 0 a series sampled where a replay samples. None when the recording carries no
// reserved bytes after each event, or only zeros (a CPU profile: the CPU allocator caches nothing).
inline constexpr std::string_view recorded_line_name = "recorded";
std::optional<ReplayResult> recorded_result(const Trace& trace, const RecordedTotals& recorded,
                                            std::size_t series_points = 0);

// The lowest avg_frag an allocator can have on this trace if it gives a page back only once the page has
// sat idle for more than `idle_events` events (0: never, as every caching allocator here at unlimited
// capacity): its reserved bytes can be no fewer than the most bytes live within that window, sampled where
// the replay samples (after the initial blocks and after every event).
double avg_frag_floor(const Trace& trace, std::size_t idle_events = 0);

}  // namespace tessera
