// The model presets at the real sizes of published models (docs/workloads.md lists the sources). A preset
// names every model key, so that choosing one never inherits another's leftovers.
#include "workload/parameters.hpp"

namespace tessera::workload {
namespace {

using Values = std::vector<std::pair<std::string_view, std::string_view>>;

// GPT-3 family: learned positions, LayerNorm with biases, GeLU MLP of 4 x hidden, dropout 0.1, tied
// embeddings, GPT-2's BPE vocabulary.
Values gpt3(std::string_view layers, std::string_view hidden, std::string_view heads, std::string_view ffn,
            std::string_view tp, std::string_view vocab = "50257", std::string_view seq = "2048") {
  return {{"layers", layers}, {"hidden", hidden},  {"heads", heads},   {"kv_heads", "0"},
          {"ffn", ffn},       {"vocab", vocab},    {"seq", seq},       {"mlp", "gelu"},
          {"norm", "layernorm"}, {"bias", "true"}, {"dropout", "true"}, {"positions", "learned"},
          {"tied_embeddings", "true"}, {"tp", tp}};
}

// Llama 2 family: rotary positions, RMSNorm, SwiGLU, no biases, no dropout, untied output layer,
// 32000-token SentencePiece vocabulary, 4096-token context.
Values llama2(std::string_view layers, std::string_view hidden, std::string_view heads, std::string_view kv_heads,
              std::string_view ffn, std::string_view tp) {
  return {{"layers", layers}, {"hidden", hidden},  {"heads", heads},     {"kv_heads", kv_heads},
          {"ffn", ffn},       {"vocab", "32000"},  {"seq", "4096"},      {"mlp", "swiglu"},
          {"norm", "rmsnorm"}, {"bias", "false"},  {"dropout", "false"}, {"positions", "rope"},
          {"tied_embeddings", "false"}, {"tp", tp}};
}

Values with(Values values, const Values& more) {
  values.insert(values.end(), more.begin(), more.end());
  return values;
}

std::vector<Preset> make_presets() {
  constexpr std::string_view gpt3_source = "GPT-3 XL, Brown et al. 2020 (arXiv:2005.14165) Table 2.1";
  constexpr std::string_view llama7_source = "Touvron et al. 2023 (arXiv:2307.09288); meta-llama/Llama-2-7b-hf config.json";
  constexpr std::string_view llama13_source = "Touvron et al. 2023 (arXiv:2307.09288); meta-llama/Llama-2-13b-hf config.json";
  constexpr std::string_view pangu_source = "PanGu-α 13B, Zeng et al. 2021 (arXiv:2104.12369) Table 1; GPT-3's architecture assumed";
  constexpr std::string_view mixtral_source = "Jiang et al. 2024 (arXiv:2401.04088); mistralai/Mixtral-8x7B-v0.1 config.json";
  return {
      {"tiny", "a small GPT-shaped model for tests", gpt3("2", "256", "4", "1024", "1", "1000", "128")},
      {"gpt3-1.3b", gpt3_source, gpt3("24", "2048", "16", "8192", "1")},
      {"gpt3-1.3b-tp2", gpt3_source, gpt3("24", "2048", "16", "8192", "2")},
      {"llama2-7b", llama7_source, llama2("32", "4096", "32", "0", "11008", "1")},
      {"llama2-7b-tp2", llama7_source, llama2("32", "4096", "32", "0", "11008", "2")},
      {"llama2-7b-tp4", llama7_source, llama2("32", "4096", "32", "0", "11008", "4")},
      {"llama2-13b", llama13_source, llama2("40", "5120", "40", "0", "13824", "1")},
      {"llama2-13b-tp2", llama13_source, llama2("40", "5120", "40", "0", "13824", "2")},
      {"llama2-13b-tp4", llama13_source, llama2("40", "5120", "40", "0", "13824", "4")},
      // PanGu-α's shape (40 x 5120, 40 heads, ffn 4h, 40000-token vocabulary, 1024-token context) on the
      // GPT-3 family's architecture; its extra query layer is left out.
      {"pangu-13b", pangu_source, gpt3("40", "5120", "40", "20480", "1", "40000", "1024")},
      {"mixtral-8x7b", mixtral_source,
       with(llama2("32", "4096", "32", "8", "14336", "1"), {{"experts", "8"}, {"top_k", "2"}, {"expert_ffn", "0"}}),
       true},
      {"tiny-moe", "a small GPT-shaped mixture of experts for tests",
       with(gpt3("2", "256", "4", "1024", "1", "1000", "128"),
            {{"experts", "4"}, {"top_k", "2"}, {"expert_ffn", "0"}}),
       true},
  };
}

}  // namespace

const std::vector<Preset>& model_presets() {
  static const std::vector<Preset> presets = make_presets();
  return presets;
}

std::vector<std::string> preset_names(bool with_moe) {
  std::vector<std::string> names;
  for (const Preset& preset : model_presets()) {
    if (with_moe || !preset.moe) names.emplace_back(preset.name);
  }
  return names;
}

}  // namespace tessera::workload
