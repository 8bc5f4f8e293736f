// The JSON report: parsed back, every documented field is there with its type; null where not computed.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "report_fixtures.hpp"
#include "tessera/report.hpp"

namespace tessera {
namespace {

using nlohmann::json;

const char* const fields[] = {"trace",
                              "allocator",
                              "driver",
                              "capacity",
                              "peak_allocated",
                              "reserved_at_peak_allocated",
                              "peak_reserved",
                              "frag_at_peak",
                              "avg_frag",
                              "min_capacity",
                              "overhead",
                              "oom",
                              "oom_event",
                              "driver_calls",
                              "driver_time_us",
                              "syncs",
                              "host_ns_per_op",
                              "events",
                              "calls_per_iteration",
                              "failure"};

TEST(JsonReport, EveryFieldInOrderWithItsType) {
  const auto results = test::small_results();
  ASSERT_EQ(results.size(), 2U);
  const json document = json::parse(format_json_report(results));
  ASSERT_TRUE(document.is_object());
  ASSERT_TRUE(document.at("results").is_array());
  ASSERT_EQ(document["results"].size(), 2U);

  const json& tessera = document["results"][0];
  // The documented order, as a person reading the file sees it.
  const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(format_json_report(results));
  std::vector<std::string> keys;
  for (const auto& item : ordered["results"][0].items()) keys.push_back(item.key());
  EXPECT_EQ(keys, std::vector<std::string>(std::begin(fields), std::end(fields)));

  EXPECT_EQ(tessera["trace"], "small");
  EXPECT_EQ(tessera["allocator"], "tessera");
  EXPECT_EQ(tessera["driver"], "sim");
  EXPECT_TRUE(tessera["capacity"].is_null());  // unlimited
  for (const char* size : {"peak_allocated", "reserved_at_peak_allocated", "peak_reserved", "min_capacity"}) {
    EXPECT_TRUE(tessera[size].is_number_unsigned()) << size;
  }
  EXPECT_EQ(tessera["peak_allocated"].get<std::uint64_t>(), results[0].peak_allocated);
  EXPECT_EQ(tessera["min_capacity"].get<std::uint64_t>(), *results[0].min_capacity);
  for (const char* ratio : {"frag_at_peak", "avg_frag", "overhead", "driver_time_us", "host_ns_per_op"}) {
    EXPECT_TRUE(tessera[ratio].is_number()) << ratio;
  }
  EXPECT_TRUE(tessera["oom"].is_boolean());
  EXPECT_TRUE(tessera["oom_event"].is_null());
  ASSERT_TRUE(tessera["driver_calls"].is_object());
  // Every kind but the four host-buffer kinds, which only pause backups make (none here).
  EXPECT_EQ(tessera["driver_calls"].size(), driver_call_count - 4);
  EXPECT_FALSE(tessera["driver_calls"].contains("copy_to_host"));
  EXPECT_EQ(tessera["driver_calls"]["map"].get<std::uint64_t>(), results[0].driver_calls.calls_of(DriverCall::map));
  EXPECT_GT(tessera["driver_calls"]["create_page"].get<std::uint64_t>(), 0U);
  EXPECT_TRUE(tessera["syncs"].is_number_unsigned());
  EXPECT_EQ(tessera["events"].get<std::size_t>(), test::small_trace().events.size());
  ASSERT_TRUE(tessera["calls_per_iteration"].is_array());
  EXPECT_EQ(tessera["calls_per_iteration"].size(), 2U);  // the trace marks two iterations

  // The reference lines have no driver: their driver figures are not computed.
  const json& ideal = document["results"][1];
  EXPECT_EQ(ideal["allocator"], "ideal");
  const std::vector<ReplayResult> cache_line{ideal_cache_result(test::small_trace(), 2 * MiB)};
  const json ideal_cache = json::parse(format_json_report(cache_line))["results"][0];
  EXPECT_EQ(ideal_cache["allocator"], "ideal_cache");
  for (const json* line : {&ideal, &ideal_cache}) {
    for (const char* none :
         {"driver", "driver_calls", "driver_time_us", "syncs", "host_ns_per_op", "calls_per_iteration"}) {
      EXPECT_TRUE((*line)[none].is_null()) << (*line)["allocator"] << ": " << none;
    }
    EXPECT_EQ((*line)["peak_reserved"], (*line)["peak_allocated"]);
  }
  EXPECT_GT(ideal_cache["avg_frag"].get<double>(), 0.0) << "live bytes fall after their peak";
}

TEST(JsonReport, NullWhereMinCapacityWasNotComputedAndCapacityWhenSet) {
  ReplayOptions options;
  options.capacity = 64 * MiB;
  auto result = replay(test::small_trace(), options);
  ASSERT_TRUE(result.ok());
  const std::vector<ReplayResult> results{*result};
  const json entry = json::parse(format_json_report(results))["results"][0];
  EXPECT_TRUE(entry["min_capacity"].is_null());
  EXPECT_TRUE(entry["overhead"].is_null());
  EXPECT_EQ(entry["capacity"].get<std::uint64_t>(), 64 * MiB);
}

TEST(JsonReport, OutOfMemoryNamesTheEvent) {
  ReplayOptions options;
  options.capacity = 6 * MiB;  // the initial 4 MiB block fits, the trace's peak does not
  auto result = replay(test::small_trace(), options);
  ASSERT_TRUE(result.ok());
  ASSERT_TRUE(result->oom);
  const std::vector<ReplayResult> results{*result};
  const json entry = json::parse(format_json_report(results))["results"][0];
  EXPECT_EQ(entry["oom"], true);
  EXPECT_TRUE(entry["oom_event"].is_number_unsigned());
}

TEST(JsonReport, FailureIsNullUnlessTheReplayFailed) {
  const json ran = json::parse(format_json_report(test::small_results()))["results"][0];
  EXPECT_TRUE(ran["failure"].is_null());
  const ReplayResult failed = test::failed_result(
      "small", "gmlake", "event 1 (alloc of 4096 bytes): the host ran out of memory (std::bad_alloc)");
  const std::vector<ReplayResult> results{failed};
  const json entry = json::parse(format_json_report(results))["results"][0];
  EXPECT_EQ(entry["failure"], failed.failure);
  EXPECT_EQ(entry["allocator"], "gmlake");
}

TEST(JsonReport, EmptyIsAnEmptyList) {
  const json document = json::parse(format_json_report({}));
  EXPECT_TRUE(document["results"].is_array());
  EXPECT_TRUE(document["results"].empty());
}

}  // namespace
}  // namespace tessera
