#include "trace_input.hpp"

#include <map>

namespace tessera::cli {

namespace {

const std::map<std::string, TraceFormat>& format_names() {
  static const std::map<std::string, TraceFormat> names{
      {"auto", TraceFormat::automatic},
      {"pytorch", TraceFormat::pytorch_snapshot},
      {"lifetimes", TraceFormat::lifetimes_csv},
      {"stalloc", TraceFormat::stalloc},
      {"text", TraceFormat::text},
  };
  return names;
}

}  // namespace

void add_trace_input_options(CLI::App& app, TraceInputOptions& options) {
  app.add_option("--format", options.format,
                 "Input format: auto (by content, then name), pytorch, lifetimes, "
                 "stalloc or text")
      ->check(CLI::IsMember({"auto", "pytorch", "lifetimes", "stalloc", "text"}))
      ->capture_default_str();
  app.add_option("--device", options.device,
                 "PyTorch snapshots: the device whose trace to read (default: the one "
                 "with most events)")
      ->check(CLI::NonNegativeNumber);
}

Result<Trace> read_input_trace(const std::filesystem::path& path, const TraceInputOptions& options) {
  TraceReadOptions read;
  read.format = format_names().at(options.format);
  read.pytorch.device = options.device;
  return read_trace(path, read);
}

}  // namespace tessera::cli
