// Reading traces named on the command line: the options every subcommand that reads traces shares
// (--format, --device), and one message per failure that names the file.
#pragma once

#include <CLI/CLI.hpp>
#include <filesystem>
#include <optional>
#include <string>

#include "tessera/trace.hpp"

namespace tessera::cli {

struct TraceInputOptions {
  std::string format = "auto";
  std::optional<int> device;
  std::optional<std::string> profile_device;
};

void add_trace_input_options(CLI::App& app, TraceInputOptions& options);

// Reads one trace; the error already names the file (the readers say which file and where).
Result<Trace> read_input_trace(const std::filesystem::path& path, const TraceInputOptions& options);
// The trace with what the file recorded of the real allocator (reserved and allocated bytes) where it does.
Result<ProfileRecording> read_input_recording(const std::filesystem::path& path, const TraceInputOptions& options);

}  // namespace tessera::cli
