#include "report_output.hpp"

#include <fmt/format.h>

#include <unistd.h>

#include <cerrno>
#include <cstring>
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

Result<void> check_writable(std::string_view option, const std::string& path) {
  namespace fs = std::filesystem;
  auto refused = [&](const std::string& why, int err = 0) {
    return make_error(Errc::invalid_argument, fmt::format("{} {}: {}", option, path, why), err);
  };
  auto writable = [](const fs::path& at, int mode) -> int { return ::access(at.c_str(), mode) == 0 ? 0 : errno; };
  std::error_code ignored;
  const fs::file_status file = fs::status(path, ignored);
  if (fs::is_directory(file)) return refused("is a folder, not a file");
  if (fs::exists(file)) {
    if (const int err = writable(path, W_OK); err != 0) {
      return refused(fmt::format("cannot write: {}", std::strerror(err)), err);
    }
    return {};
  }
  const fs::path folder = fs::path(path).has_parent_path() ? fs::path(path).parent_path() : fs::path(".");
  const fs::file_status parent = fs::status(folder, ignored);
  if (!fs::exists(parent)) return refused(fmt::format("the folder {} does not exist", folder.string()));
  if (!fs::is_directory(parent)) return refused(fmt::format("{} is not a folder", folder.string()));
  if (const int err = writable(folder, W_OK | X_OK); err != 0) {
    return refused(fmt::format("cannot create a file in {}: {}", folder.string(), std::strerror(err)), err);
  }
  return {};
}

Result<void> check_writable(const ReportOutputs& outputs) {
  if (!outputs.json.empty() && outputs.json != "-") {
    if (auto ok = check_writable("--json", outputs.json); !ok) return ok;
  }
  if (!outputs.html.empty()) return check_writable("--html", outputs.html);
  return {};
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
