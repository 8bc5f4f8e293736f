// The HTML report: one self-contained page. Inline SVG and CSS only — no script, no font, no image, no link
// to anything outside the file — so it opens anywhere, offline, and renders the same in CI's headless
// browser.
#include <fmt/format.h>

#include <array>

#include "report/html_sections.hpp"
#include "report/report_common.hpp"
#include "report/svg.hpp"
#include "tessera/report.hpp"

namespace tessera {

namespace {

using report::escape_xml;

constexpr std::string_view style = R"(
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; background: #fff; max-width: 1160px; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 32px; } h3 { font-size: 15px; margin: 24px 0 4px; }
p.note { color: #555; white-space: pre-wrap; }
table { border-collapse: collapse; font-size: 12px; }
th, td { padding: 3px 6px; border-bottom: 1px solid #ddd; text-align: right; white-space: nowrap; }
th { background: #f3f3f3; white-space: normal; vertical-align: bottom; } td.name, th.name { text-align: left; }
tr.trace td { background: #fafafa; font-weight: 600; text-align: left; }
td.failure { text-align: left; white-space: normal; color: #a00; }
.chart { display: block; max-width: 100%; height: auto; }
.chart .plot { fill: #fcfcfc; stroke: #bbb; } .chart .grid { stroke: #e6e6e6; }
.chart text { font-size: 11px; fill: #444; } .chart .axis { font-size: 12px; }
.chart .label { font-size: 12px; fill: #222; }
.legend span { display: inline-block; margin-right: 16px; font-size: 12px; }
.legend i { display: inline-block; width: 18px; height: 3px; vertical-align: middle; margin-right: 5px; }
dt { font-weight: 600; margin-top: 6px; } dd { margin-left: 20px; }
ul.summary li { margin: 4px 0; }
)";

constexpr std::string_view allocated_color = "#222222";
constexpr std::string_view reference_color = "#9a9a9a";
constexpr std::string_view recorded_color = "#b8860b";  // the real allocator's line: dark gold, thick, solid
constexpr std::array<std::string_view, 8> palette{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                                  "#9467bd", "#8c564b", "#17becf", "#e377c2"};

// Each allocator keeps its colour on every chart of the page.
std::string color_of(const std::string& allocator, const std::vector<std::string>& order) {
  if (is_reference_line(allocator)) return std::string(reference_color);
  if (allocator == recorded_line_name) return std::string(recorded_color);
  std::size_t index = 0;
  for (const std::string& name : order) {
    if (name == allocator) break;
    if (!is_reference_line(name) && name != recorded_line_name) ++index;
  }
  return std::string(palette[index % palette.size()]);
}

std::string percent(std::optional<double> value) { return value ? fmt::format("{:.1f}%", *value * 100.0) : "&ndash;"; }

std::string summary_table(const std::vector<report::TraceGroup>& groups) {
  std::string html =
      "<table>\n<tr><th class=\"name\">allocator</th><th>peak allocated</th><th>reserved at peak allocated</th>"
      "<th>peak reserved</th><th>frag at peak</th><th>avg frag</th><th>min capacity</th><th>overhead</th>"
      "<th>oom</th><th>driver calls</th><th>driver ms</th><th>syncs</th><th>host ns/op</th>"
      "<th>calls/iteration (last)</th></tr>\n";
  for (const report::TraceGroup& group : groups) {
    html += fmt::format("<tr class=\"trace\"><td colspan=\"14\">{}</td></tr>\n", escape_xml(group.trace));
    for (const ReplayResult* result : group.results) {
      if (!result->failure.empty()) {
        html += fmt::format("<tr><td class=\"name\">{}</td><td class=\"failure\" colspan=\"13\">failed: {}</td></tr>\n",
                            escape_xml(result->allocator), escape_xml(result->failure));
        continue;
      }
      const bool replayed = !report::is_reference(*result);
      const auto steady = report::steady_calls_per_iteration(*result);
      html += fmt::format(
          "<tr><td class=\"name\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
          "<td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
          escape_xml(report::display_name(*result)), format_bytes(result->peak_allocated),
          format_bytes(result->reserved_at_peak_allocated), format_bytes(result->peak_reserved),
          percent(result->frag_at_peak), percent(result->avg_frag),
          result->min_capacity ? format_bytes(*result->min_capacity) : "&ndash;", percent(result->overhead),
          result->oom ? fmt::format("at event {}", result->oom_event.value_or(0)) : "no",
          replayed ? fmt::format("{}", result->driver_calls.total_calls()) : "&ndash;",
          replayed ? fmt::format("{:.2f}", static_cast<double>(result->driver_time_ns) / 1e6) : "&ndash;",
          replayed ? fmt::format("{}", result->syncs) : "&ndash;",
          replayed ? fmt::format("{:.0f}", result->host_ns_per_op) : "&ndash;",
          steady ? fmt::format("{}", *steady) : "&ndash;");
    }
  }
  return html + "</table>\n";
}

std::string overhead_chart(const std::vector<report::TraceGroup>& groups, const std::vector<std::string>& order) {
  // min_capacity is what decides whether a job fits; where it was not computed, the footprint at peak is
  // the next best thing, and the chart says which one it shows.
  bool with_min_capacity = false;
  for (const report::TraceGroup& group : groups) {
    // The reference lines always have one: only a replay's says whether --min-capacity ran.
    for (const ReplayResult* result : group.results) {
      with_min_capacity = with_min_capacity || (!report::is_reference(*result) && result->overhead);
    }
  }
  std::vector<report::BarGroup> bars;
  for (const report::TraceGroup& group : groups) {
    report::BarGroup bar_group{group.trace, {}};
    for (const ReplayResult* result : group.results) {
      if (result->allocator == "ideal_cache") continue;  // its peaks and min_capacity are ideal's: one grey bar
      if (with_min_capacity && report::is_recorded(*result)) continue;  // the real allocator's was not measured
      const bool failed = !result->failure.empty();  // no figures: "n/a"
      bar_group.bars.push_back(
          {report::display_name(*result), color_of(result->allocator, order),
           failed ? std::nullopt : with_min_capacity ? result->overhead : report::reserved_overhead(*result)});
    }
    bars.push_back(std::move(bar_group));
  }
  const std::string_view what = with_min_capacity ? "overhead = min_capacity / peak_allocated - 1"
                                                  : "peak_reserved / peak_allocated - 1 (min_capacity not computed)";
  return fmt::format(
      "<h2>Overhead per trace and allocator</h2>\n<p>{}: how much more device memory than the bytes "
      "live at peak each allocator needs. Lower is better.</p>\n{}",
      what, report::bar_chart_svg(bars, fmt::format("Bar chart: {}", what)));
}

std::string trace_chart(const report::TraceGroup& group, const std::vector<std::string>& order) {
  std::vector<report::ChartLine> lines;
  std::string legend;
  double x_max = 0;
  const ReplayResult* with_series = nullptr;
  for (const ReplayResult* result : group.results) {
    x_max = std::max(x_max, static_cast<double>(result->events));
    if (result->series.empty()) continue;
    // The live bytes are drawn from a replay's series where there is one: the trace's own.
    if (with_series == nullptr || (report::is_recorded(*with_series) && !report::is_recorded(*result)) ||
        (report::is_recorded(*with_series) == report::is_recorded(*result) &&
         result->series.size() > with_series->series.size())) {
      with_series = result;
    }
    report::ChartLine line{fmt::format("reserved: {}", report::display_name(*result)), color_of(result->allocator, order),
                           {}};
    line.dashed = report::is_reference(*result) && !report::is_recorded(*result);
    if (report::is_recorded(*result)) line.width = 2.5;
    for (const SeriesPoint& point : result->series) {
      line.points.emplace_back(static_cast<double>(point.event), static_cast<double>(point.reserved));
    }
    line.cross_at_end = result->oom;
    legend += fmt::format(
        "<span><i style=\"background:{}\"></i>reserved: {}{}</span>", line.color,
        escape_xml(report::display_name(*result)),
        result->oom ? fmt::format(" (out of memory at event {})", result->oom_event.value_or(0)) : "");
    lines.push_back(std::move(line));
  }
  std::string html = fmt::format("<section>\n<h3>{}</h3>\n", escape_xml(group.trace));
  if (with_series == nullptr) {
    return html + "<p>No series was recorded for this trace.</p>\n</section>\n";
  }
  // Live bytes are the trace's, the same under every allocator: one line, drawn over the others. "ideal"
  // reserves exactly these bytes, so it needs no line of its own.
  report::ChartLine allocated{"allocated (live requested bytes; ideal)", std::string(allocated_color), {}, 1.5, true};
  for (const SeriesPoint& point : with_series->series) {
    allocated.points.emplace_back(static_cast<double>(point.event), static_cast<double>(point.allocated));
  }
  lines.push_back(std::move(allocated));
  legend = fmt::format("<span><i style=\"background:{}\"></i>allocated (= ideal)</span>", allocated_color) + legend;
  html +=
      report::line_chart_svg(lines, x_max, fmt::format("Allocated and reserved bytes over events: {}", group.trace));
  return html + fmt::format("<div class=\"legend\">{}</div>\n</section>\n", legend);
}

constexpr std::string_view definitions = R"(<h2>Definitions</h2>
<dl>
<dt>peak allocated</dt><dd>most live requested bytes at any moment, blocks live before the trace started included</dd>
<dt>reserved at peak allocated</dt><dd>physical bytes held from the device when live bytes first reached their peak</dd>
<dt>peak reserved</dt><dd>most physical bytes held from the device at any moment</dd>
<dt>frag at peak</dt><dd>1 &minus; peak allocated / peak reserved</dd>
<dt>avg frag</dt><dd>mean over events of (reserved &minus; allocated) / reserved, where reserved &gt; 0</dd>
<dt>min capacity</dt><dd>the smallest device capacity, to the granule, at which the whole trace replays without running out of memory (bisection)</dd>
<dt>overhead</dt><dd>min capacity / peak allocated &minus; 1</dd>
<dt>driver calls, driver ms, syncs</dt><dd>every driver call the allocator made; their modelled time on the sim driver, wall time on the host driver; stream, device and event synchronizations</dd>
<dt>host ns/op</dt><dd>the allocator's own time per allocation and free, driver time excluded</dd>
<dt>ideal</dt><dd>the reference line: reserved equal to live bytes at every moment</dd>
<dt>recorded (real allocator)</dt><dd>what the profile recorded of the allocator that ran the job (Kineto's Total Allocated and Total Reserved, torch_npu's memory_record.csv or operator_memory.csv): its peak reserved, its frag at peak against its own peak of Total Allocated, and its reserved bytes over the events (the thick gold line); not a replay, so no min capacity and no driver figures</dd>
<dt>ideal_cache</dt><dd>reserved equal to the most bytes live so far: an allocator that gives nothing back and wastes nothing; its avg frag is the least any such allocator can have on the trace</dd>
</dl>
)";

}  // namespace

std::string format_html_report(std::span<const ReplayResult> results, const HtmlReportOptions& options) {
  const std::vector<report::TraceGroup> groups = report::group_by_trace(results);
  const std::vector<std::string> order = report::allocator_order(results);
  std::string html = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{0}</title>\n"
      // An empty icon: the browser asks for nothing outside the file.
      "<link rel=\"icon\" href=\"data:,\">\n<style>{1}</style>\n</head>\n<body>\n<h1>{0}</h1>\n",
      escape_xml(options.title), style);
  if (!options.note.empty()) html += fmt::format("<p class=\"note\">{}</p>\n", escape_xml(options.note));
  if (results.empty()) return html + "<p>No results.</p>\n</body>\n</html>\n";
  html += report::summary_section(groups);
  html += "<h2>Results</h2>\n" + summary_table(groups);
  html += report::pause_section(groups);
  html += overhead_chart(groups, order);
  html +=
      "<h2>Allocated and reserved over time</h2>\n<p>Live requested bytes (dashed) and the physical bytes each "
      "allocator holds from the device, sampled over the trace's events; ideal_cache (grey, dashed) is the "
      "most bytes live so far, the least any allocator that keeps its pages can hold. A cross marks where a "
      "replay ran out of memory. Where the profile recorded the real allocator's reserved bytes, they are the "
      "thick gold line, recorded (real allocator).</p>\n";
  for (const report::TraceGroup& group : groups) html += trace_chart(group, order);
  html += definitions;
  return html + "</body>\n</html>\n";
}

}  // namespace tessera
