// The `tessera` command. Subcommands live one file each beside this one; this file parses the command line,
// runs the chosen one, and turns failures into exit statuses: 2 for a wrong command line, 1 for anything
// else. With no subcommand it runs the demo.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <array>
#include <exception>

#include "command.hpp"
#include "report_output.hpp"
#include "usage_error.hpp"

int main(int argc, char** argv) {
  using namespace tessera::cli;
  remember_command_line(argc, argv);
  CLI::App app{
      "Tessera: accelerator memory through the drivers' virtual memory APIs.\n"
      "With no command: tessera demo."};
  app.require_subcommand(0, 1);
  const std::array<Command, 5> commands{add_demo_command(app), add_replay_command(app), add_gen_command(app),
                                        add_convert_command(app), add_info_command(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    // --help and --version exit 0; every other parse error is a usage error.
    return app.exit(error) == 0 ? 0 : exit_usage;
  }
  const Command* chosen = &commands.front();  // the demo
  for (const Command& command : commands) {
    if (command.app->parsed()) chosen = &command;
  }
  try {
    return chosen->run();
  } catch (const UsageError& error) {
    fmt::print(stderr, "tessera {}: {}\nRun with --help for more information.\n", chosen->app->get_name(),
               error.what());
    return exit_usage;
  } catch (const std::exception& error) {
    fmt::print(stderr, "tessera {}: {}\n", chosen->app->get_name(), error.what());
    return exit_failure;
  }
}
