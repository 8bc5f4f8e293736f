// The sim driver's latency models: what each driver call is charged, per platform and per scaling. The
// figures and their sources are in docs/drivers.md ("sim").
#include <optional>
#include <string_view>
#include <vector>

#include "tessera/drivers.hpp"

namespace tessera {

namespace {

// The per_byte model's chunk calls: a fixed part plus a part per byte, chosen so that a chunk of one 2 MiB
// granule costs exactly what the per_call model charges (the published figure is for 2 MiB). Written as
// microseconds per 2 MiB so that the 2 MiB sums are exact in binary.
constexpr double calibration_bytes = 2.0 * 1024 * 1024;
constexpr double create_fixed_us = 10.0;   // the least a create call is published to cost (7.6 us), rounded
constexpr double release_fixed_us = 2.0;   // assumption: about a map's bookkeeping

CallLatency scaled(double fixed_us, double per_call_us) {
  return {.fixed_us = fixed_us, .per_extra_granule_us = 0.0,
          .per_byte_ns = (per_call_us - fixed_us) * 1000.0 / calibration_bytes};
}

void scale_chunk_calls(LatencyModel& model) {
  model[DriverCall::create_chunk] = scaled(create_fixed_us, model[DriverCall::create_chunk].fixed_us);
  model[DriverCall::release_chunk] = scaled(release_fixed_us, model[DriverCall::release_chunk].fixed_us);
}

constexpr std::string_view per_call_name = "per_call";
constexpr std::string_view per_byte_name = "per_byte";

}  // namespace

std::string_view to_string(LatencyScaling scaling) noexcept {
  return scaling == LatencyScaling::per_byte ? per_byte_name : per_call_name;
}

std::optional<LatencyScaling> latency_scaling_named(std::string_view name) noexcept {
  if (name == per_call_name) return LatencyScaling::per_call;
  if (name == per_byte_name) return LatencyScaling::per_byte;
  return std::nullopt;
}

std::vector<std::string_view> latency_scaling_names() { return {per_call_name, per_byte_name}; }

LatencyModel LatencyModel::a100(LatencyScaling scaling) {
  LatencyModel model;
  // Published figures (kvcached's VMM benchmark on an A100).
  model[DriverCall::reserve] = {19.0, 0.0};       // 8 GB reservation; taken as size-independent
  model[DriverCall::create_chunk] = {193.0, 0.0};  // cuMemCreate of 2 MiB
  model[DriverCall::map] = {1.45, 0.0};           // per call: larger handles map as fast as small ones
  model[DriverCall::set_access] = {36.0, 0.0};
  model[DriverCall::unmap] = {25.6, 0.0};
  // Assumptions, until a measurement replaces them (docs/drivers.md).
  model[DriverCall::release_chunk] = {10.0, 0.0};
  model[DriverCall::release_reservation] = {19.0, 0.0};
  model[DriverCall::create_event] = {1.0, 0.0};
  model[DriverCall::record_event] = {2.0, 0.0};
  model[DriverCall::query_event] = {0.5, 0.0};
  model[DriverCall::synchronize_event] = {5.0, 0.0};
  model[DriverCall::destroy_event] = {1.0, 0.0};
  model[DriverCall::synchronize_stream] = {5.0, 0.0};
  model[DriverCall::synchronize_device] = {10.0, 0.0};
  model[DriverCall::copy] = {0.0, 0.0};
  // Host buffers and backup copies: assumptions (docs/drivers.md). Copies run at a PCIe Gen5 x16 link's
  // practical rate for pinned memory, 50 GB/s each way (64 GB/s raw), 0.02 ns a byte, plus 10 us a call
  // for the launch and the wait; pinning host pages runs at 10 GB/s.
  model[DriverCall::allocate_host] = {10.0, 0.0, 0.1};
  model[DriverCall::free_host] = {10.0, 0.0, 0.0};
  model[DriverCall::copy_to_host] = {10.0, 0.0, 0.02};
  model[DriverCall::copy_to_device] = {10.0, 0.0, 0.02};
  // Mapping stays per call in both models: the one published comparison (ten 2 MiB handles against one
  // 20 MiB one) found its cost follows the number of calls, and nothing published scales set-access or unmap.
  if (scaling == LatencyScaling::per_byte) scale_chunk_calls(model);
  return model;
}

LatencyModel LatencyModel::ascend_910b(LatencyScaling scaling) {
  // aclrtReserveMemAddress, aclrtMallocPhysical, aclrtMapMem, aclrtUnmapMem, aclrtFreePhysical,
  // aclrtReleaseMemAddress and ACL's events and synchronization: assumed to cost what the matching CUDA
  // call costs on an A100, for want of a measurement on a 910B. ACL has no set-access call; the ascend
  // platform never makes one, and it is charged nothing should a caller try.
  LatencyModel model = a100(scaling);
  model[DriverCall::set_access] = {0.0, 0.0};
  return model;
}

SimDriverOptions SimDriverOptions::ascend_910b(LatencyScaling scaling) {
  return {.capacity = 64 * GiB, .granularity = 2 * MiB, .latency = LatencyModel::ascend_910b(scaling),
          .platform = SimPlatform::ascend};
}

}  // namespace tessera
