// The three models, each defined in its own file; options are already checked by the public factories
// (src/baselines/baselines.cpp).
#pragma once

#include <memory>

#include "tessera/baselines.hpp"

namespace tessera::baselines {

Result<std::unique_ptr<DeviceAllocator>> make_pytorch_caching_model(Driver& driver, const BaselineOptions& options);
Result<std::unique_ptr<DeviceAllocator>> make_expandable_segments_model(Driver& driver, const BaselineOptions& options);
Result<std::unique_ptr<DeviceAllocator>> make_gmlake_model(Driver& driver, const BaselineOptions& options);
Result<std::unique_ptr<DeviceAllocator>> make_memory_saver_model(Driver& driver, const BaselineOptions& options);

}  // namespace tessera::baselines
