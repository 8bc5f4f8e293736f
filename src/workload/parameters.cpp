#include "workload/parameters.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>

namespace tessera::workload {
namespace {

Error invalid(std::string message) { return make_error(Errc::invalid_argument, std::move(message)); }

std::vector<std::string_view> keys_of(const WorkloadDescription& description) {
  std::vector<std::string_view> keys;
  for (const WorkloadParameter& parameter : description.parameters) keys.emplace_back(parameter.key);
  return keys;
}

}  // namespace

const Preset* find_preset(std::string_view name) {
  for (const Preset& preset : model_presets()) {
    if (preset.name == name) return &preset;
  }
  return nullptr;
}

Result<Parameters> Parameters::resolve(const WorkloadDescription& description,
                                       const std::map<std::string, std::string>& settings) {
  Parameters resolved;
  resolved.workload_ = description.name;
  for (const WorkloadParameter& parameter : description.parameters) {
    resolved.values_[parameter.key] = parameter.default_value;
  }
  for (const auto& [key, value] : settings) {
    if (!resolved.values_.contains(key)) {
      return invalid(fmt::format("workload {} has no parameter '{}' (its parameters: {})", description.name, key,
                                 fmt::join(keys_of(description), ", ")));
    }
    resolved.explicit_[key] = value;
  }
  // The preset's values go over the defaults and under the explicit settings.
  if (const auto preset_value = resolved.values_.find("preset"); preset_value != resolved.values_.end()) {
    const std::string name = settings.contains("preset") ? settings.at("preset") : preset_value->second;
    const bool offered = std::find(description.presets.begin(), description.presets.end(), name) !=
                         description.presets.end();
    const Preset* preset = offered ? find_preset(name) : nullptr;
    if (preset == nullptr) {
      return invalid(fmt::format("workload {}: preset={}: unknown preset (presets: {})", description.name, name,
                                 fmt::join(description.presets, ", ")));
    }
    for (const auto& [key, value] : preset->values) {
      if (const auto it = resolved.values_.find(key); it != resolved.values_.end()) it->second = value;
    }
  }
  for (const auto& [key, value] : resolved.explicit_) resolved.values_[key] = value;
  return resolved;
}

const std::string& Parameters::text(std::string_view key) const {
  static const std::string none;
  const auto it = values_.find(key);
  return it == values_.end() ? none : it->second;
}

void ParameterReader::fail(std::string_view key, std::string_view why) {
  if (error_) return;
  error_ = invalid(fmt::format("workload {}: {}={}: {}", parameters_.workload(), key, parameters_.text(key), why));
}

void ParameterReader::require(bool condition, std::string_view key, std::string_view why) {
  if (!condition) fail(key, why);
}

Result<void> ParameterReader::status() const {
  if (error_) return *error_;
  return {};
}

std::uint64_t ParameterReader::integer(std::string_view key, std::uint64_t min, std::uint64_t max) {
  const std::string& text = parameters_.text(key);
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size() || value < min || value > max) {
    fail(key, fmt::format("expected an integer from {} to {}", min, max));
    return min;
  }
  return value;
}

double ParameterReader::number(std::string_view key, double min, double max) {
  const std::string& text = parameters_.text(key);
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size() || !std::isfinite(value) ||
      value < min || value > max) {
    fail(key, fmt::format("expected a number from {} to {}", min, max));
    return min;
  }
  return value;
}

bool ParameterReader::flag(std::string_view key) {
  const std::string& text = parameters_.text(key);
  if (text == "true" || text == "1" || text == "yes" || text == "on") return true;
  if (text == "false" || text == "0" || text == "no" || text == "off") return false;
  fail(key, "expected true or false");
  return false;
}

std::size_t ParameterReader::choice(std::string_view key, std::initializer_list<std::string_view> options) {
  const std::string& text = parameters_.text(key);
  const auto it = std::find(options.begin(), options.end(), text);
  if (it == options.end()) {
    fail(key, fmt::format("expected one of {}", fmt::join(options, ", ")));
    return 0;
  }
  return static_cast<std::size_t>(it - options.begin());
}

}  // namespace tessera::workload
