// Inline SVG charts for the HTML report: a line chart of bytes over events and a horizontal grouped bar
// chart. Plain markup, no script, no external reference; the page's CSS styles the text.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::report {

std::string escape_xml(std::string_view text);

struct ChartLine {
  std::string label;
  std::string color;
  std::vector<std::pair<double, double>> points;  // (event, bytes), in event order
  double width = 1.5;
  bool dashed = false;
  bool cross_at_end = false;  // marks where a replay stopped (out of memory)
};

// x: events from 0 to x_max; y: bytes from 0, axis in the binary unit that suits the largest value.
std::string line_chart_svg(const std::vector<ChartLine>& lines, double x_max, std::string_view title);

struct Bar {
  std::string label;
  std::string color;
  std::optional<double> value;  // none: drawn as a "n/a" note
};

struct BarGroup {
  std::string label;
  std::vector<Bar> bars;
};

// Horizontal bars, one group per row block, values shown as percentages (0.05 -> "5.0%").
std::string bar_chart_svg(const std::vector<BarGroup>& groups, std::string_view title);

}  // namespace tessera::report
