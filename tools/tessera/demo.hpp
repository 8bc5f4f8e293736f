#pragma once

#include <string>

namespace tessera::cli {

struct DemoOptions {
  std::string driver = "host";
};

// The README's main job until the replay tool lands: stitching shown on a real driver.
int run_demo(const DemoOptions& options);

}  // namespace tessera::cli
