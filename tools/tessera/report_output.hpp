// Where `replay` and `demo` put their results: the table on stdout, and --json / --html files ("-" sends
// the JSON to stdout instead of the table).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <span>
#include <string>

#include "tessera/replay.hpp"

namespace tessera::cli {

// Samples per replay for the HTML charts: enough for a smooth line, few enough for a light page.
inline constexpr std::size_t html_series_points = 500;

struct ReportOutputs {
  std::string json;
  std::string html;
};

void add_report_outputs(CLI::App& app, ReportOutputs& outputs);

// The command line as typed, for reports to say how they were made (main() records it first).
void remember_command_line(int argc, char** argv);
const std::string& command_line();

// Where notes for people go: stdout, unless the JSON goes there (then stderr, so that stdout stays one JSON
// document).
std::FILE* notes_stream(const ReportOutputs& outputs);

// Whether a file can be written at `path` (the option that named it leads the message): an existing file
// that is writable, or a new name in a folder that exists and is writable. Checked before any replay, so
// that a long run does not end in a message about a missing folder. Nothing is created.
Result<void> check_writable(std::string_view option, const std::string& path);
// The same for --json (unless "-") and --html.
Result<void> check_writable(const ReportOutputs& outputs);

// Prints the table (unless the JSON goes to stdout) and writes the files; says where each went.
int write_outputs(std::span<const ReplayResult> results, const ReportOutputs& outputs, std::string_view command,
                  std::string_view note);

}  // namespace tessera::cli
