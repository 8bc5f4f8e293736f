#include "report/svg.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>

namespace tessera::report {

namespace {

constexpr double chart_width = 1100;

// The step of about `target` ticks over [0, span]: 1, 2 or 5 times a power of ten.
double nice_step(double span, int target) {
  if (span <= 0) return 1;
  const double raw = span / target;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  for (double factor : {1.0, 2.0, 5.0}) {
    if (raw <= factor * magnitude) return factor * magnitude;
  }
  return 10 * magnitude;
}

struct ByteUnit {
  double bytes;
  std::string_view name;
};

ByteUnit unit_for(double max_bytes) {
  static constexpr std::array<ByteUnit, 4> units{{{0x1p40, "TiB"}, {0x1p30, "GiB"}, {0x1p20, "MiB"}, {0x1p10, "KiB"}}};
  for (const ByteUnit& unit : units) {
    if (max_bytes >= unit.bytes) return unit;
  }
  return {1, "B"};
}

// "%g" for tick labels: 2, 2.5, 0.25 (no trailing zeros).
std::string tick_label(double value) { return fmt::format("{:g}", std::round(value * 1000) / 1000); }

std::string truncate(std::string_view text, std::size_t width) {
  if (text.size() <= width) return std::string(text);
  return std::string(text.substr(0, width - 1)) + "\u2026";
}

}  // namespace

std::string escape_xml(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    // clang-format off
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
    // clang-format on
  }
  return out;
}

std::string line_chart_svg(const std::vector<ChartLine>& lines, double x_max, std::string_view title) {
  constexpr double height = 340, left = 70, right = 20, top = 14, bottom = 42;
  const double plot_w = chart_width - left - right;
  const double plot_h = height - top - bottom;

  double y_max_bytes = 0;
  for (const ChartLine& line : lines) {
    for (const auto& point : line.points) y_max_bytes = std::max(y_max_bytes, point.second);
  }
  const ByteUnit unit = unit_for(y_max_bytes);
  const double y_step = nice_step(std::max(y_max_bytes / unit.bytes, 1e-9), 5);
  const double y_top = std::max(y_step, std::ceil(y_max_bytes / unit.bytes / y_step) * y_step);
  x_max = std::max(x_max, 1.0);
  const double x_step = nice_step(x_max, 8);

  auto x_at = [&](double event) { return left + plot_w * event / x_max; };
  auto y_at = [&](double bytes) { return top + plot_h * (1.0 - bytes / unit.bytes / y_top); };

  std::string svg = fmt::format(
      "<svg class=\"chart\" viewBox=\"0 0 {0} {1}\" width=\"{0}\" height=\"{1}\" role=\"img\" aria-label=\"{2}\">\n"
      "<title>{2}</title>\n<rect x=\"{3}\" y=\"{4}\" width=\"{5}\" height=\"{6}\" class=\"plot\"/>\n",
      chart_width, height, escape_xml(title), left, top, plot_w, plot_h);
  for (double tick = 0; tick <= y_top + y_step / 2; tick += y_step) {
    const double y = y_at(tick * unit.bytes);
    svg += fmt::format(
        "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" class=\"grid\"/>"
        "<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"tick\" text-anchor=\"end\">{} {}</text>\n",
        left, y, left + plot_w, y, left - 6, y + 4, tick_label(tick), unit.name);
  }
  for (double tick = 0; tick <= x_max; tick += x_step) {
    const double x = x_at(tick);
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" class=\"grid\"/>"
        "<text x=\"{0:.1f}\" y=\"{3:.1f}\" class=\"tick\" text-anchor=\"middle\">{4}</text>\n",
        x, top, top + plot_h, top + plot_h + 16, tick_label(tick));
  }
  svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"axis\" text-anchor=\"middle\">events</text>\n",
                     left + plot_w / 2, height - 6);
  for (const ChartLine& line : lines) {
    if (line.points.empty()) continue;
    std::string points;
    points.reserve(line.points.size() * 14);
    for (const auto& [event, bytes] : line.points) {
      points += fmt::format("{:.1f},{:.1f} ", x_at(event), y_at(bytes));
    }
    svg += fmt::format(
        "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"{}\"{} points=\"{}\"><title>{}</title>"
        "</polyline>\n",
        line.color, line.width, line.dashed ? " stroke-dasharray=\"6 4\"" : "", points, escape_xml(line.label));
    if (line.cross_at_end) {
      const double x = x_at(line.points.back().first);
      const double y = y_at(line.points.back().second);
      svg += fmt::format("<path d=\"M{:.1f} {:.1f}l10 10m0 -10l-10 10\" stroke=\"{}\" stroke-width=\"2.5\"/>\n", x - 5,
                         y - 5, line.color);
    }
  }
  svg += "</svg>\n";
  return svg;
}

std::string bar_chart_svg(const std::vector<BarGroup>& groups, std::string_view title) {
  constexpr double left = 330, right = 150, top = 10, bottom = 30, bar_h = 13, bar_gap = 2, group_gap = 14;
  const double plot_w = chart_width - left - right;
  double max_value = 0;
  double rows = 0;
  for (const BarGroup& group : groups) {
    for (const Bar& bar : group.bars) max_value = std::max(max_value, bar.value.value_or(0));
    rows += static_cast<double>(group.bars.size()) * (bar_h + bar_gap) + group_gap;
  }
  const double step = nice_step(std::max(max_value, 0.001), 6);
  const double x_top = std::max(step, std::ceil(max_value / step) * step);
  const double height = top + rows + bottom;
  auto x_at = [&](double value) { return left + plot_w * std::clamp(value, 0.0, x_top) / x_top; };

  std::string svg = fmt::format(
      "<svg class=\"chart\" viewBox=\"0 0 {0} {1}\" width=\"{0}\" height=\"{1}\" role=\"img\" aria-label=\"{2}\">\n"
      "<title>{2}</title>\n",
      chart_width, height, escape_xml(title));
  for (double tick = 0; tick <= x_top + step / 2; tick += step) {
    const double x = x_at(tick);
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" class=\"grid\"/>"
        "<text x=\"{0:.1f}\" y=\"{3:.1f}\" class=\"tick\" text-anchor=\"middle\">{4}%</text>\n",
        x, top, top + rows, top + rows + 16, tick_label(tick * 100));
  }
  double y = top;
  for (const BarGroup& group : groups) {
    const double group_h = static_cast<double>(group.bars.size()) * (bar_h + bar_gap);
    svg +=
        fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"label\" text-anchor=\"end\">{}<title>{}</title></text>\n",
                    left - 8, y + group_h / 2 + 4, escape_xml(truncate(group.label, 48)), escape_xml(group.label));
    for (const Bar& bar : group.bars) {
      const std::string label = escape_xml(bar.label);
      if (bar.value) {
        const double end = x_at(*bar.value);
        // Small overheads keep a second decimal: 0.07% and 0.4% must not both read "0.1%".
        const std::string shown = std::fabs(*bar.value) < 0.01 ? fmt::format("{:.2f}%", *bar.value * 100)
                                                               : fmt::format("{:.1f}%", *bar.value * 100);
        svg += fmt::format(
            "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{}\" fill=\"{}\"><title>{}: {}"
            "</title></rect><text x=\"{:.1f}\" y=\"{:.1f}\" class=\"value\">{} {}</text>\n",
            left, y, std::max(end - left, 0.5), bar_h, bar.color, label, shown, end + 4, y + bar_h - 3, label, shown);
      } else {
        svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"value\">{} n/a</text>\n", left + 4, y + bar_h - 3,
                           label);
      }
      y += bar_h + bar_gap;
    }
    y += group_gap;
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace tessera::report
