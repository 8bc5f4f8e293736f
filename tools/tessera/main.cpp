// The `tessera` command. Subcommands live one file each beside this one.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "demo.hpp"

int main(int argc, char** argv) {
  CLI::App app{"Tessera: accelerator memory through the drivers' virtual memory APIs"};
  app.require_subcommand(0, 1);

  tessera::cli::DemoOptions demo;
  CLI::App* demo_command = app.add_subcommand("demo", "Show stitching on a real (host) or simulated driver");
  demo_command->add_option("--driver", demo.driver, "host, sim, cuda or ascend")
      ->check(CLI::IsMember({"host", "sim", "cuda", "ascend"}));

  CLI11_PARSE(app, argc, argv);
  try {
    // With no subcommand, the demo: the command is the README's main job.
    return tessera::cli::run_demo(demo);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "tessera: %s\n", error.what());
    return 1;
  }
}
