// The workloads, each in its own file; registry.cpp lists them.
#pragma once

#include "tessera/result.hpp"
#include "tessera/trace.hpp"
#include "tessera/workload.hpp"
#include "workload/parameters.hpp"

namespace tessera::workload {

WorkloadDescription training_description();
Result<Trace> generate_training(const Parameters& parameters);

WorkloadDescription moe_description();
Result<Trace> generate_moe(const Parameters& parameters);

WorkloadDescription finetune_description();
Result<Trace> generate_finetune(const Parameters& parameters);

WorkloadDescription inference_description();
Result<Trace> generate_inference(const Parameters& parameters);

WorkloadDescription rl_description();
Result<Trace> generate_rl(const Parameters& parameters);

WorkloadDescription serving_description();
Result<Trace> generate_serving(const Parameters& parameters);
WorkloadDescription fsdp_description();
Result<Trace> generate_fsdp(const Parameters& parameters);

}  // namespace tessera::workload
