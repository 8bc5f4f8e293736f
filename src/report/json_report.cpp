// The JSON report: the fields and their order are the schema in docs/replay.md.
#include <nlohmann/json.hpp>

#include "report/report_common.hpp"
#include "tessera/report.hpp"

namespace tessera {

namespace {

using Json = nlohmann::ordered_json;  // keeps the documented field order

template <class T>
Json or_null(const std::optional<T>& value) {
  return value ? Json(*value) : Json(nullptr);
}

// Every kind up to `copy`; the host-buffer kinds that pausing a tag uses (allocate_host and after) only where
// a replay made them, so that the figures of replays without a pause read as they always did.
Json driver_calls(const CallTally& tally) {
  Json calls = Json::object();
  for (std::size_t kind = 0; kind < driver_call_count; ++kind) {
    const bool host_buffer_kind = kind > static_cast<std::size_t>(DriverCall::copy);
    if (host_buffer_kind && tally.calls[kind] == 0) continue;
    calls[std::string(to_string(static_cast<DriverCall>(kind)))] = tally.calls[kind];
  }
  return calls;
}

// Only the kinds called: pause and resume make a few kinds of calls.
Json called(const CallTally& tally) {
  Json calls = Json::object();
  for (std::size_t kind = 0; kind < driver_call_count; ++kind) {
    if (tally.calls[kind] != 0) calls[std::string(to_string(static_cast<DriverCall>(kind)))] = tally.calls[kind];
  }
  return calls;
}

// Traces with pause and resume events only.
Json pause_figures(const ReplayResult& result) {
  Json json;
  json["pauses"] = result.pauses;
  json["resumes"] = result.resumes;
  json["unsupported"] = result.pause_unsupported;
  json["peak_reserved_while_paused"] = or_null(result.peak_reserved_while_paused);
  json["pause_driver_calls"] = called(result.pause_driver_calls);
  json["pause_driver_time_us"] = static_cast<double>(result.pause_time_ns) / 1000.0;
  json["resume_driver_calls"] = called(result.resume_driver_calls);
  json["resume_driver_time_us"] = static_cast<double>(result.resume_time_ns) / 1000.0;
  return json;
}

Json to_json(const ReplayResult& result) {
  const bool replayed = !report::is_reference(result);
  Json json;
  json["trace"] = result.trace;
  json["allocator"] = result.allocator;
  json["driver"] = replayed ? Json(result.driver) : Json(nullptr);
  json["capacity"] = or_null(result.capacity);
  json["peak_allocated"] = result.peak_allocated;
  json["reserved_at_peak_allocated"] = result.reserved_at_peak_allocated;
  json["peak_reserved"] = result.peak_reserved;
  json["frag_at_peak"] = result.frag_at_peak;
  json["avg_frag"] = result.avg_frag;
  json["min_capacity"] = or_null(result.min_capacity);
  json["overhead"] = or_null(result.overhead);
  json["oom"] = result.oom;
  json["oom_event"] = or_null(result.oom_event);
  json["driver_calls"] = replayed ? driver_calls(result.driver_calls) : Json(nullptr);
  json["driver_time_us"] = replayed ? Json(static_cast<double>(result.driver_time_ns) / 1000.0) : Json(nullptr);
  json["syncs"] = replayed ? Json(result.syncs) : Json(nullptr);
  json["host_ns_per_op"] = replayed ? Json(result.host_ns_per_op) : Json(nullptr);
  json["events"] = result.events;
  json["calls_per_iteration"] = replayed ? Json(result.calls_per_iteration) : Json(nullptr);
  json["failure"] = result.failure.empty() ? Json(nullptr) : Json(result.failure);
  if (replayed && result.pauses + result.resumes > 0) json["pause"] = pause_figures(result);
  // Only where it happened, so that the reports of traces without pools read as they did.
  if (result.pool_unsupported) json["pool_unsupported"] = true;
  return json;
}

}  // namespace

std::string format_json_report(std::span<const ReplayResult> results) {
  Json list = Json::array();
  for (const ReplayResult& result : results) list.push_back(to_json(result));
  Json document;
  document["results"] = std::move(list);
  return document.dump(2) + "\n";
}

}  // namespace tessera
