// The pytorch model against reality: on the shared recordings made from process start, the model must
// create the same segments, in the same order, as the real PyTorch caching allocator did, and hold the
// same reserved bytes (within 1%) when live bytes peak. The other recordings start mid-run (their
// allocator state before the first event cannot be rebuilt); for them the test reports how close the
// model comes and checks only that the replay completes.
#include <gtest/gtest.h>

#include <filesystem>
#include <unordered_map>
#include <vector>

#include "tessera/baselines.hpp"
#include "tessera/drivers.hpp"
#include "tessera/trace.hpp"

namespace tessera {
namespace {

#ifdef TESSERA_SHARED_TRACES
const std::filesystem::path traces_folder = std::filesystem::path(TESSERA_SHARED_TRACES) / "pytorch";
#else
const std::filesystem::path traces_folder;
#endif

bool recorded_from_start(const std::string& name) {
  return name.find("from-init") != std::string::npos || name.find("from-start") != std::string::npos ||
         name.find("attention-peak-microbench") != std::string::npos;
}

struct ModelRun {
  std::vector<Bytes> segment_sizes;  // segments created while replaying the events
  Bytes reserved_at_peak = 0;
};

ModelRun run_model(const PytorchRecording& recording) {
  const Trace& trace = recording.trace;
  auto sim = make_sim_driver({.capacity = Bytes{1} << 44});
  EXPECT_TRUE(sim.ok());
  ModelRun run;
  bool counting = false;
  BaselineOptions options;
  options.on_segment = [&](const SegmentEvent& event) {
    if (counting && event.kind == SegmentEvent::Kind::alloc) run.segment_sizes.push_back(event.size);
  };
  auto made = make_baseline("pytorch", *sim->driver, options);
  EXPECT_TRUE(made.ok());
  DeviceAllocator& model = **made;
  std::unordered_map<BlockId, Address> addresses;
  for (const InitialBlock& block : trace.initial_blocks) {
    addresses[block.id] = model.allocate(block.size, trace.streams[block.stream]).value();
  }
  counting = true;
  const TraceSummary summary = summarize(trace);
  for (std::size_t index = 0; index < trace.events.size(); ++index) {
    const TraceEvent& event = trace.events[index];
    if (event.kind == TraceEventKind::alloc) {
      auto address = model.allocate(event.size, trace.streams[event.stream]);
      EXPECT_TRUE(address.ok()) << "event " << index;
      if (!address) break;
      addresses[event.block] = *address;
    } else if (event.kind == TraceEventKind::free) {
      EXPECT_TRUE(model.deallocate(addresses.at(event.block)).ok());
    }
    if (index == summary.peak_event) run.reserved_at_peak = model.stats().reserved_bytes;
  }
  return run;
}

TEST(PytorchModelAgainstRecordings, ReproducesTheRealAllocatorFromProcessStart) {
  if (!std::filesystem::is_directory(traces_folder)) GTEST_SKIP() << "no shared traces at " << traces_folder;
  int checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(traces_folder)) {
    auto recording = read_pytorch_recording(entry.path());
    ASSERT_TRUE(recording.ok()) << describe(recording.error());
    const std::string& name = recording->trace.name;
    const ModelRun run = run_model(*recording);
    std::vector<Bytes> recorded;
    for (const RecordedSegmentAlloc& segment : recording->segment_allocs) recorded.push_back(segment.size);
    const TraceSummary summary = summarize(recording->trace);
    const double real_reserved = summary.peak_event == TraceSummary::npos
                                     ? static_cast<double>(recording->initial_reserved)
                                     : static_cast<double>(recording->reserved_after[summary.peak_event]);
    const double difference = (static_cast<double>(run.reserved_at_peak) - real_reserved) / real_reserved;
    RecordProperty(name, std::to_string(difference * 100.0) + "% reserved at peak");
    if (!recorded_from_start(name)) continue;
    ++checked;
    EXPECT_EQ(run.segment_sizes, recorded) << name << ": the model's segments differ from the recording";
    EXPECT_LE(std::abs(difference), 0.01) << name << ": reserved at peak " << run.reserved_at_peak << " vs "
                                          << real_reserved;
  }
  EXPECT_EQ(checked, 8) << "the shared folder should hold eight recordings made from process start";
}

}  // namespace
}  // namespace tessera
