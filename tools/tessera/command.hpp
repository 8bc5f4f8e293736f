// How main() sees a subcommand: its CLI11 app, and what to run once the command line is parsed. Each
// subcommand's file builds one; the options live in the closure.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace tessera::cli {

struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;  // an exit status; may throw UsageError (exit 2) or any exception (exit 1)
};

Command add_replay_command(CLI::App& parent);
Command add_gen_command(CLI::App& parent);
Command add_convert_command(CLI::App& parent);
Command add_info_command(CLI::App& parent);
Command add_demo_command(CLI::App& parent);

}  // namespace tessera::cli
