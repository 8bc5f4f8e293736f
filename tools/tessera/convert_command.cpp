// `tessera convert IN OUT`: any trace Tessera reads, written in its own text format (gzip when OUT ends in
// .gz).
#include <fmt/format.h>

#include <memory>

#include "command.hpp"
#include "tessera/report.hpp"
#include "trace_input.hpp"
#include "usage_error.hpp"

namespace tessera::cli {

namespace {

struct ConvertOptions {
  std::string input;
  std::string output;
  TraceInputOptions read;
};

int run_convert(const ConvertOptions& options) {
  auto trace = read_input_trace(options.input, options.read);
  if (!trace) {
    fmt::print(stderr, "tessera convert: {}\n", trace.error().message);
    return exit_failure;
  }
  if (auto written = write_text_trace(*trace, options.output); !written) {
    fmt::print(stderr, "tessera convert: {}\n", written.error().message);
    return exit_failure;
  }
  const TraceSummary summary = summarize(*trace);
  fmt::print("{} -> {}: {} events ({} allocs, {} frees, {} iterations), {} initial blocks, peak live {}\n",
             options.input, options.output, trace->events.size(), summary.allocs, summary.frees, summary.iterations,
             summary.initial_blocks, format_bytes(summary.peak_live_bytes));
  return 0;
}

}  // namespace

Command add_convert_command(CLI::App& parent) {
  auto options = std::make_shared<ConvertOptions>();
  CLI::App* app = parent.add_subcommand("convert", "Convert a trace to Tessera's text format (.gz compresses)");
  app->add_option("input", options->input, "Trace to read")->required();
  app->add_option("output", options->output, "Text trace to write")->required();
  add_trace_input_options(*app, options->read);
  return {app, [options] { return run_convert(*options); }};
}

}  // namespace tessera::cli
