// The parameters training, moe and finetune share (parallelism, recomputation, ZeRO, buckets, ...), and
// reading them into a TrainerConfig.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/workload.hpp"
#include "workload/parameters.hpp"
#include "workload/trainer.hpp"

namespace tessera::workload {

// The model keys of `default_preset`, then the shared training keys, `seed` last, with `defaults` replacing
// the shared keys' usual defaults (a workload's own choices, e.g. finetune's flash_attention=true).
std::vector<WorkloadParameter> training_parameters(std::string_view default_preset, ModelKeys keys,
                                                   const std::map<std::string, std::string>& defaults);

// Reads the model and the shared keys, checks that they fit together. `max_seq` is the longest sequence
// the workload will run (sizes the learned position table).
TrainerConfig read_training(ParameterReader& reader, ModelKeys keys, std::uint64_t max_seq);

}  // namespace tessera::workload
