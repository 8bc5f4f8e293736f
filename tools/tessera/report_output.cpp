#include "report_output.hpp"

#include <fmt/format.h>

#include <filesystem>

#include "tessera/report.hpp"
#include "usage_error.hpp"

namespace tessera::cli {

namespace {
std::string& recorded_command_line() {
  static std::string line;
  return line;
}
}  // namespace

void remember_command_line(int argc, char** argv) {
  std::string line = "tessera";
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    // Quoted when a shell would split it.
    const bool quote = arg.empty() || arg.find_first_of(" \t'\"$`\\") != std::string_view::npos;
    line += quote ? fmt::format(" '{}'", arg) : fmt::format(" {}", arg);
  }
  recorded_command_line() = std::move(line);
}

const std::string& command_line() { return recorded_command_line(); }

void add_report_outputs(CLI::App& app, ReportOutputs& outputs) {
  app.add_option("--json", outputs.json,
                 "Write the results as JSON to this file ('-': stdout, instead of the "
                 "table)");
  app.add_option("--html", outputs.html, "Write an HTML report with charts to this file");
}

std::FILE* notes_stream(const ReportOutputs& outputs) { return outputs.json == "-" ? stderr : stdout; }

int write_outputs(std::span<const ReplayResult> results, const ReportOutputs& outputs, std::string_view command,
                  std::string_view note) {
  if (outputs.json == "-") {
    fmt::print("{}", format_json_report(results));
  } else {
    fmt::print("{}", format_table(results));
  }
  std::fflush(stdout);
  auto write = [&](const std::string& path, const std::string& content, std::string_view what) {
    if (auto written = write_report_file(path, content); !written) {
      fmt::print(stderr, "{}: {}\n", command, written.error().message);
      return false;
    }
    std::error_code ignored;
    const auto absolute = std::filesystem::absolute(path, ignored);
    fmt::print(notes_stream(outputs), "{} report: {}\n", what, ignored ? path : absolute.string());
    return true;
  };
  bool ok = true;
  if (!outputs.json.empty() && outputs.json != "-") ok = write(outputs.json, format_json_report(results), "JSON") && ok;
  if (!outputs.html.empty()) {
    ok = write(outputs.html, format_html_report(results, {.title = "Tessera replay report", .note = std::string(note)}),
               "HTML") &&
         ok;
  }
  return ok ? 0 : exit_failure;
}

}  // namespace tessera::cli
