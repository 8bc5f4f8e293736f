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
      {"kineto", TraceFormat::kineto_json},
      {"operator-memory", TraceFormat::operator_memory_csv},
  };
  return names;
}

}  // namespace

void add_trace_input_options(CLI::App& app, TraceInputOptions& options) {
  app.add_option("--format", options.format,
                 "Input format: auto (by content, then name), pytorch, kineto, operator-memory, lifetimes, "
                 "stalloc or text")
      ->check(CLI::IsMember({"auto", "pytorch", "kineto", "operator-memory", "lifetimes", "stalloc", "text"}))
      ->capture_default_str();
  app.add_option("--device", options.device,
                 "PyTorch snapshots: the device whose trace to read (default: the one "
                 "with most events); Kineto profiles: cuda:N; operator_memory.csv: npu:N")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--profile-device", options.profile_device,
                 "Kineto profiles and operator_memory.csv: the device by name (cpu, cuda:0, npu:0; default: the "
                 "one with most events)");
}

namespace {

TraceReadOptions read_options(const TraceInputOptions& options) {
  TraceReadOptions read;
  read.format = format_names().at(options.format);
  read.pytorch.device = options.device;
  read.profile_device = options.profile_device;
  return read;
}

}  // namespace

Result<Trace> read_input_trace(const std::filesystem::path& path, const TraceInputOptions& options) {
  return read_trace(path, read_options(options));
}

Result<ProfileRecording> read_input_recording(const std::filesystem::path& path, const TraceInputOptions& options) {
  return read_recording(path, read_options(options));
}

}  // namespace tessera::cli
