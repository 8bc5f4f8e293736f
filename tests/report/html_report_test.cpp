// The HTML report: self-contained (no script, nothing fetched), one chart per trace plus the overhead chart,
// names escaped.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <regex>

#include "report_fixtures.hpp"
#include "tessera/report.hpp"

namespace tessera {
namespace {

std::size_t count(const std::string& text, const std::string& needle) {
  std::size_t found = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + needle.size())) ++found;
  return found;
}

std::vector<ReplayResult> two_traces() {
  std::vector<ReplayResult> results;
  for (const char* name : {"first", "second <&> \"quoted\""}) {
    ReplayOptions options;
    options.series_points = 40;
    auto replayed = replay_with_min_capacity(test::small_trace(name), options);
    EXPECT_TRUE(replayed.ok());
    if (replayed) results.push_back(*replayed);
    results.push_back(ideal_result(test::small_trace(name), options.granularity));
  }
  return results;
}

TEST(HtmlReport, OneChartPerTraceAndTheOverheadChart) {
  const std::string html = format_html_report(two_traces(), {.title = "T", .note = "made by a test"});
  EXPECT_TRUE(html.starts_with("<!DOCTYPE html>"));
  EXPECT_TRUE(html.ends_with("</html>\n"));
  EXPECT_EQ(count(html, "<svg"), 3U);  // the bar chart, then one line chart per trace
  EXPECT_EQ(count(html, "<svg"), count(html, "</svg>"));
  EXPECT_EQ(count(html, "<polyline"), 4U);  // per trace: reserved for tessera, and allocated
  EXPECT_NE(html.find("made by a test"), std::string::npos);
  EXPECT_NE(html.find("overhead = min_capacity / peak_allocated - 1"), std::string::npos);
}

TEST(HtmlReport, SelfContained) {
  const std::string html = format_html_report(two_traces());
  for (const char* outside : {"http:", "https:", "<script", "src=", "url(", "@import", "//"}) {
    EXPECT_EQ(html.find(outside), std::string::npos) << outside;
  }
}

TEST(HtmlReport, NamesAreEscaped) {
  const std::string html = format_html_report(two_traces());
  EXPECT_EQ(html.find("second <&>"), std::string::npos);
  EXPECT_NE(html.find("second &lt;&amp;&gt; &quot;quoted&quot;"), std::string::npos);
}

TEST(HtmlReport, WellFormedEnoughTagBalance) {
  const std::string html = format_html_report(two_traces());
  for (const char* tag : {"table", "section", "text", "title", "dl", "h2", "h3"}) {
    EXPECT_EQ(count(html, std::string("<") + tag + ">") + count(html, std::string("<") + tag + " "),
              count(html, std::string("</") + tag + ">"))
        << tag;
  }
}

// One replay without min_capacity, 10 samples, and both reference lines.
std::vector<ReplayResult> replay_and_reference_lines() {
  ReplayOptions options;
  options.series_points = 10;
  auto replayed = replay(test::small_trace(), options);
  EXPECT_TRUE(replayed.ok());
  if (!replayed) return {};
  return {*replayed, ideal_result(test::small_trace(), options.granularity),
          ideal_cache_result(test::small_trace(), options.granularity, options.series_points)};
}

TEST(HtmlReport, FootprintOverheadWhenMinCapacityIsUnknown) {
  // The reference lines always carry a min_capacity: only the replays say whether it was computed.
  const std::string html = format_html_report(replay_and_reference_lines());
  EXPECT_NE(html.find("peak_reserved / peak_allocated - 1 (min_capacity not computed)"), std::string::npos);
}

TEST(HtmlReport, IdealCacheIsADashedLineAndNoBarOfItsOwn) {
  const std::string html = format_html_report(replay_and_reference_lines());
  EXPECT_EQ(count(html, "<polyline"), 3U);  // reserved for tessera and ideal_cache, and allocated
  EXPECT_EQ(count(html, "stroke-dasharray"), 2U) << "allocated and ideal_cache are dashed";
  EXPECT_NE(html.find("reserved: ideal_cache"), std::string::npos);
  const auto bars = html.find("<h2>Overhead");
  const auto lines = html.find("<h2>Allocated");
  ASSERT_LT(bars, lines);
  EXPECT_EQ(html.substr(bars, lines - bars).find("ideal_cache"), std::string::npos) << "its bar would be ideal's";
}

TEST(HtmlReport, WithoutSeriesSaysSo) {
  auto results = test::small_results(0);
  const std::string html = format_html_report(results);
  EXPECT_NE(html.find("No series was recorded"), std::string::npos);
}

TEST(HtmlReport, AFailedReplayIsARowThatSaysWhyAndNoBar) {
  std::vector<ReplayResult> results = test::small_results();
  results.push_back(test::failed_result(results[0].trace, "gmlake", "event 3 (alloc of <4096> bytes): failed"));
  const std::string html = format_html_report(results);
  EXPECT_NE(html.find("<td class=\"failure\" colspan=\"13\">failed: event 3 (alloc of &lt;4096&gt; bytes): failed</td>"),
            std::string::npos);
  // Its bar is "n/a", not a 0% bar: a failed replay measured nothing.
  EXPECT_NE(html.find("n/a"), std::string::npos);
}

TEST(HtmlReport, OutOfMemoryIsMarked) {
  ReplayOptions options;
  options.capacity = 6 * MiB;
  options.series_points = 20;
  auto replayed = replay(test::small_trace(), options);
  ASSERT_TRUE(replayed.ok());
  ASSERT_TRUE(replayed->oom);
  const std::vector<ReplayResult> results{*replayed};
  const std::string html = format_html_report(results);
  EXPECT_NE(html.find("out of memory at event"), std::string::npos);
  EXPECT_NE(html.find("<path d=\"M"), std::string::npos);  // the cross
}

// The page opens with what Tessera saves against each other allocator, figures taken from the results.
TEST(HtmlReport, OpensWithASummaryOfWhatTesseraSavesAndAtWhatDriverCost) {
  std::vector<ReplayResult> results;
  for (const char* allocator : {"tessera", "pytorch"}) {
    ReplayOptions options;
    options.allocator = allocator;
    auto replayed = replay_with_min_capacity(test::small_trace("one"), options);
    ASSERT_TRUE(replayed.ok());
    results.push_back(*replayed);
  }
  const std::string html = format_html_report(results);
  const auto summary = html.find("<h2>Summary</h2>");
  ASSERT_NE(summary, std::string::npos);
  EXPECT_LT(summary, html.find("<h2>Results</h2>")) << "the summary comes first";
  const Bytes tessera = *results[0].min_capacity;
  const Bytes pytorch = *results[1].min_capacity;
  ASSERT_NE(tessera, pytorch) << "the trace should tell them apart";
  const std::string needs = "Tessera needs <b>" + format_bytes(tessera) + "</b>";
  EXPECT_NE(html.find(needs), std::string::npos) << html.substr(summary, 800);
  const std::string difference = "<b>" + format_bytes(tessera < pytorch ? pytorch - tessera : tessera - pytorch) +
                                 "</b> " + (tessera < pytorch ? "less" : "more") + " than pytorch (" +
                                 format_bytes(pytorch);
  EXPECT_NE(html.find(difference), std::string::npos) << html.substr(summary, 800);
  EXPECT_NE(html.find(fmt::format("Tessera {} calls", results[0].driver_calls.total_calls())), std::string::npos);
  EXPECT_NE(html.find(fmt::format("pytorch {} calls", results[1].driver_calls.total_calls())), std::string::npos);
  EXPECT_EQ(html.find("Pause and resume"), std::string::npos) << "no trace pauses";
}

TEST(HtmlReport, ATraceThatPausesGetsThePauseTable) {
  Trace trace;
  trace.name = "rl";
  trace.streams = {StreamId{0}};
  trace.tags.push_back("weights");
  trace.events = {TraceEvent::tagged_alloc(0, 8 * MiB, 0, 1), TraceEvent::pause(1, true),
                  TraceEvent::alloc(1, 8 * MiB, 0), TraceEvent::free(1, 8 * MiB, 0), TraceEvent::resume(1),
                  TraceEvent::free(0, 8 * MiB, 0)};
  trace.block_count = 2;
  std::vector<ReplayResult> results;
  for (const char* allocator : {"tessera", "expandable"}) {
    ReplayOptions options;
    options.allocator = allocator;
    auto replayed = replay(trace, options);
    ASSERT_TRUE(replayed.ok()) << describe(replayed.error());
    results.push_back(*replayed);
  }
  ASSERT_EQ(results[0].pauses, 1u);
  const std::string html = format_html_report(results);
  const auto table = html.find("<h2>Pause and resume</h2>");
  ASSERT_NE(table, std::string::npos);
  EXPECT_NE(html.find(fmt::format("<td>{}</td><td>{:.3f}</td>", results[0].pause_driver_calls.total_calls(),
                                  static_cast<double>(results[0].pause_time_ns) / 1e6),
                      table),
            std::string::npos);
  EXPECT_NE(html.find("cannot pause: its tagged memory stayed", table), std::string::npos) << "expandable's row";
}

}  // namespace
}  // namespace tessera
