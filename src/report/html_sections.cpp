// The HTML report's sections in words: the summary it opens with (what Tessera saves against each allocator on
// each trace, and at what driver cost) and the pause/resume table of traces that pause memory.
#include "report/html_sections.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "report/svg.hpp"
#include "tessera/report.hpp"

namespace tessera::report {

namespace {

bool replayed_ok(const ReplayResult& result) { return result.failure.empty() && !is_reference(result); }

// What decides whether a job fits: min_capacity; the footprint at peak where the bisection did not run.
std::optional<Bytes> memory_needed(const ReplayResult& result, bool with_min_capacity) {
  if (with_min_capacity) return result.min_capacity;
  return result.oom ? std::nullopt : std::optional<Bytes>(result.peak_reserved);
}

std::string driver_cost(const ReplayResult& result) {
  return fmt::format("{} calls, {:.1f} ms", result.driver_calls.total_calls(),
                     static_cast<double>(result.driver_time_ns) / 1e6);
}

std::string against(const std::string& other, Bytes tessera, Bytes theirs) {
  const double ratio = static_cast<double>(tessera) / static_cast<double>(theirs) - 1.0;
  if (tessera == theirs) return fmt::format("as much as {} ({})", escape_xml(other), format_bytes(theirs));
  const bool less = tessera < theirs;
  return fmt::format("<b>{}</b> {} than {} ({}, {:+.1f}%)", format_bytes(less ? theirs - tessera : tessera - theirs),
                     less ? "less" : "more", escape_xml(other), format_bytes(theirs), ratio * 100.0);
}

std::string trace_summary(const TraceGroup& group, bool with_min_capacity) {
  const ReplayResult* tessera = nullptr;
  for (const ReplayResult* result : group.results) {
    if (result->allocator == "tessera") tessera = result;
  }
  std::string line = fmt::format("<li><b>{}</b>: ", escape_xml(group.trace));
  if (tessera == nullptr) return line + "Tessera was not replayed.</li>\n";
  if (!tessera->failure.empty()) return line + fmt::format("Tessera's replay failed: {}</li>\n", escape_xml(tessera->failure));
  const std::optional<Bytes> needed = memory_needed(*tessera, with_min_capacity);
  if (!needed) {
    return line + fmt::format("Tessera ran out of memory at event {} (min capacity not computed).</li>\n",
                              tessera->oom_event.value_or(0));
  }
  line += fmt::format("Tessera needs <b>{}</b>", format_bytes(*needed));
  // Paused blocks stay live but hold no device memory: against the peak of live bytes the ratio would flatter.
  if (tessera->peak_allocated > 0 && tessera->pauses == 0) {
    line += fmt::format(" ({:.4f} &times; the live bytes at peak)",
                        static_cast<double>(*needed) / static_cast<double>(tessera->peak_allocated));
  }
  std::vector<std::string> comparisons;
  std::vector<std::string> costs{fmt::format("Tessera {}", driver_cost(*tessera))};
  for (const ReplayResult* result : group.results) {
    if (result == tessera || !replayed_ok(*result)) continue;
    const std::optional<Bytes> theirs = memory_needed(*result, with_min_capacity);
    comparisons.push_back(theirs ? against(result->allocator, *needed, *theirs)
                                 : fmt::format("{} ran out of memory", escape_xml(result->allocator)));
    costs.push_back(fmt::format("{} {}", escape_xml(result->allocator), driver_cost(*result)));
  }
  if (!comparisons.empty()) line += ": " + fmt::format("{}", fmt::join(comparisons, "; "));
  return line + fmt::format(". Driver cost: {}.</li>\n", fmt::join(costs, "; "));
}

}  // namespace

std::string summary_section(const std::vector<TraceGroup>& groups) {
  bool with_min_capacity = false;
  for (const TraceGroup& group : groups) {
    for (const ReplayResult* result : group.results) {
      with_min_capacity = with_min_capacity || (replayed_ok(*result) && result->min_capacity);
    }
  }
  std::string html = fmt::format(
      "<h2>Summary</h2>\n<p>The device memory each trace needs ({}), Tessera against every other allocator "
      "replayed, and the driver calls and time each made (modelled on the sim driver, measured on the host "
      "driver).</p>\n<ul class=\"summary\">\n",
      with_min_capacity ? "min capacity: the smallest device on which the whole trace replays"
                        : "peak reserved: min capacity was not computed");
  for (const TraceGroup& group : groups) html += trace_summary(group, with_min_capacity);
  return html + "</ul>\n";
}

std::string pause_section(const std::vector<TraceGroup>& groups) {
  std::string rows;
  for (const TraceGroup& group : groups) {
    std::string trace_rows;
    for (const ReplayResult* result : group.results) {
      if (!result->failure.empty() || result->pauses + result->resumes == 0) continue;
      trace_rows += fmt::format(
          "<tr><td class=\"name\">{}</td><td>{}</td><td>{}</td><td>{:.3f}</td><td>{}</td><td>{:.3f}</td><td "
          "class=\"name\">{}</td></tr>\n",
          escape_xml(result->allocator),
          result->peak_reserved_while_paused ? format_bytes(*result->peak_reserved_while_paused) : "&ndash;",
          result->pause_driver_calls.total_calls(), static_cast<double>(result->pause_time_ns) / 1e6,
          result->resume_driver_calls.total_calls(), static_cast<double>(result->resume_time_ns) / 1e6,
          result->pause_unsupported ? "cannot pause: its tagged memory stayed" : "");
    }
    if (!trace_rows.empty()) {
      rows += fmt::format("<tr class=\"trace\"><td colspan=\"7\">{}</td></tr>\n", escape_xml(group.trace)) + trace_rows;
    }
  }
  if (rows.empty()) return {};
  return "<h2>Pause and resume</h2>\n<p>Traces that pause memory by tag: the most device memory held while a tag "
         "was paused (what the other job has), and the driver calls and time of the pauses and resumes.</p>\n"
         "<table>\n<tr><th class=\"name\">allocator</th><th>held while paused</th><th>pause calls</th>"
         "<th>pause ms</th><th>resume calls</th><th>resume ms</th><th class=\"name\"></th></tr>\n" +
         rows + "</table>\n";
}

}  // namespace tessera::report
