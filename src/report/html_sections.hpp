// The HTML report's sections in words (html_sections.cpp); the page itself is html_report.cpp.
#pragma once

#include <string>
#include <vector>

#include "report/report_common.hpp"

namespace tessera::report {

// The report's opening: per trace, the memory Tessera needs against every other allocator replayed (min
// capacity, else peak reserved), and the driver calls and time each made.
std::string summary_section(const std::vector<TraceGroup>& groups);
// Traces with pause and resume events: memory held while paused, the calls and time of pause and resume.
// Empty when no trace pauses.
std::string pause_section(const std::vector<TraceGroup>& groups);

}  // namespace tessera::report
