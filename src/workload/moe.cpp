// `moe`: mixture-of-experts training. The MLP of every layer is E experts with top-k routing; how many
// tokens each local expert receives is drawn afresh for every micro-batch and layer around the balanced
// load, so the experts' activations change size all the time: the fragmentation stressor.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "workload/random.hpp"
#include "workload/training_parameters.hpp"
#include "workload/workloads.hpp"

namespace tessera::workload {
namespace {

struct Routing {
  std::uint64_t experts = 0;
  std::uint64_t top_k = 0;
  std::uint64_t ep = 1;
  double skew = 0;
  double capacity_factor = 0;
  std::uint64_t seed = 0;
};

// Tokens each local expert receives. The ep devices of the group route rows x k assignments each; expert
// e gets a share proportional to exp(skew x z_e), z_e standard normal (a log-normal popularity; skew 0 is
// perfect balance), split by largest remainder so the shares add up exactly. With a capacity factor,
// an expert takes at most capacity_factor x the balanced load and drops the rest (GShard); 0 is dropless.
// This device holds experts 0 .. E/ep-1.
std::vector<std::uint64_t> draw_loads(const Routing& routing, std::uint64_t rows, std::uint64_t step,
                                      std::uint64_t micro, std::uint64_t layer) {
  Rng rng(mix(mix(routing.seed, step), (micro << 20) | layer), "moe-routing");
  const std::uint64_t total = routing.ep * rows * routing.top_k;
  std::vector<double> weight(routing.experts);
  double sum = 0;
  for (double& w : weight) {
    w = std::exp(routing.skew * rng.normal());
    sum += w;
  }
  std::vector<std::uint64_t> load(routing.experts);
  std::vector<std::pair<double, std::size_t>> remainder;
  std::uint64_t given = 0;
  for (std::size_t e = 0; e < load.size(); ++e) {
    const double exact = static_cast<double>(total) * weight[e] / sum;
    load[e] = static_cast<std::uint64_t>(exact);
    given += load[e];
    remainder.emplace_back(exact - static_cast<double>(load[e]), e);
  }
  std::sort(remainder.begin(), remainder.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  for (std::size_t i = 0; given < total && i < remainder.size(); ++i, ++given) ++load[remainder[i].second];
  if (routing.capacity_factor > 0) {
    const auto capacity = static_cast<std::uint64_t>(
        std::ceil(routing.capacity_factor * static_cast<double>(total) / static_cast<double>(routing.experts)));
    for (std::uint64_t& l : load) l = std::min(l, capacity);
  }
  load.resize(routing.experts / routing.ep);
  return load;
}

}  // namespace

WorkloadDescription moe_description() {
  std::vector<WorkloadParameter> parameters = training_parameters("gpt3-1.3b", {}, {{"dp", "4"}, {"zero", "1"}});
  const std::vector<WorkloadParameter> own = {
      {"experts", "8", "experts per layer (E) (preset)"},
      {"top_k", "2", "experts each token is routed to (preset)"},
      {"expert_ffn", "0", "hidden size of an expert's MLP; 0 = ffn (preset)"},
      {"ep", "4", "expert-parallel size: this device holds experts/ep experts; must divide dp"},
      {"skew", "0.5",
       "routing imbalance: expert popularity is exp(skew x N(0,1)), drawn per micro-batch and layer; 0 = balanced"},
      {"capacity_factor", "0", "tokens an expert takes, as a multiple of the balanced load, the rest dropped; 0 = dropless"},
      {"grouped_gemm", "false", "one grouped GEMM over the local experts instead of one GEMM per expert"},
  };
  parameters.insert(parameters.end() - 1, own.begin(), own.end());  // before `seed`
  return {"moe",
          "mixture-of-experts training: like training, with E experts and top-k routing whose per-expert token "
          "counts change every micro-batch",
          std::move(parameters), preset_names(true)};
}

Result<Trace> generate_moe(const Parameters& parameters) {
  ParameterReader reader(parameters);
  const std::uint64_t seq = reader.integer("seq", 1, 1 << 20);
  const std::uint64_t batch = reader.integer("micro_batch", 1, 1 << 16);
  TrainerConfig config = read_training(reader, {}, seq);
  Routing routing;
  routing.experts = reader.integer("experts", 1, 4096);
  routing.top_k = reader.integer("top_k", 1, 4096);
  routing.ep = reader.integer("ep", 1, 4096);
  routing.skew = reader.number("skew", 0, 10);
  routing.capacity_factor = reader.number("capacity_factor", 0, 1000);
  routing.seed = config.setup.seed;
  MoeShape& moe = config.setup.moe;
  moe.experts = routing.experts;
  moe.top_k = routing.top_k;
  moe.expert_ffn = reader.integer("expert_ffn", 0, 1 << 22);
  moe.grouped_gemm = reader.flag("grouped_gemm");
  config.setup.parallel.ep = routing.ep;
  if (reader.ok()) {
    if (moe.expert_ffn == 0) moe.expert_ffn = config.setup.model.ffn;
    reader.require(moe.top_k <= moe.experts, "top_k", fmt::format("must not exceed experts={}", moe.experts));
    reader.require(moe.experts % routing.ep == 0, "ep", fmt::format("must divide experts={}", moe.experts));
    reader.require(config.setup.parallel.dp % routing.ep == 0, "ep",
                   fmt::format("must divide dp={}", config.setup.parallel.dp));
    reader.require(moe.expert_ffn % config.setup.parallel.tp == 0, "expert_ffn",
                   fmt::format("must be divisible by tp={}", config.setup.parallel.tp));
  }
  if (auto status = reader.status(); !status) return std::move(status).error();
  config.name = "moe";
  const std::uint64_t rows = ceil_div(batch * seq, config.setup.sequence_shard());
  const std::uint64_t layers = config.setup.layers_here();
  config.shape = [batch, seq, rows, layers, routing](std::uint64_t step, std::uint64_t micro) {
    MicroBatchShape shape{batch, seq, {}};
    for (std::uint64_t l = 0; l < layers; ++l) shape.expert_tokens.push_back(draw_loads(routing, rows, step, micro, l));
    return shape;
  };
  return run_training(config);
}

}  // namespace tessera::workload
