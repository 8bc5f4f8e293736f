#pragma once

#include <string>

namespace tessera::cli {

// `tessera demo --stitching`: what the VMM drivers make possible, shown on one driver (host: real memory).
int run_stitching_demo(const std::string& driver);

}  // namespace tessera::cli
