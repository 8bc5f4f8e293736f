// A workload's parameters: the values resolved from the parameters' defaults, the chosen preset and the
// explicit settings (in that order, later wins), and typed reading whose errors name the parameter.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tessera/result.hpp"
#include "tessera/workload.hpp"

namespace tessera::workload {

// A named set of parameter values at the real sizes of a published model. A workload applies the values
// of the keys it has and ignores the others (inference has no `dropout`, for one).
struct Preset {
  std::string_view name;
  std::string_view source;  // where the numbers come from
  std::vector<std::pair<std::string_view, std::string_view>> values;
  bool moe = false;  // sets the experts: offered by the moe workload only
};

const std::vector<Preset>& model_presets();
const Preset* find_preset(std::string_view name);
// The presets' names; with_moe adds those that set experts.
std::vector<std::string> preset_names(bool with_moe);

class Parameters {
 public:
  // Fails on an unknown key or an unknown preset, naming it.
  static Result<Parameters> resolve(const WorkloadDescription& description,
                                    const std::map<std::string, std::string>& settings);

  const std::string& workload() const noexcept { return workload_; }
  const std::string& text(std::string_view key) const;

 private:
  std::string workload_;
  std::map<std::string, std::string, std::less<>> values_;
  std::map<std::string, std::string, std::less<>> explicit_;
};

// Typed reading. The first error is kept and later reads return harmless values, so that a generator reads
// all its parameters in a row and checks once.
class ParameterReader {
 public:
  explicit ParameterReader(const Parameters& parameters) : parameters_(parameters) {}

  std::uint64_t integer(std::string_view key, std::uint64_t min, std::uint64_t max);
  double number(std::string_view key, double min, double max);
  bool flag(std::string_view key);
  // The index of the value among `options`.
  std::size_t choice(std::string_view key, std::initializer_list<std::string_view> options);

  // A check across parameters: fails naming `key` and its value, with `why`.
  void require(bool condition, std::string_view key, std::string_view why);

  bool ok() const noexcept { return !error_.has_value(); }
  Result<void> status() const;

 private:
  void fail(std::string_view key, std::string_view why);

  const Parameters& parameters_;
  std::optional<Error> error_;
};

}  // namespace tessera::workload
