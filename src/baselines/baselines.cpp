// The public face of the baselines: factories by name, the checks every option goes through, and the
// reader of PyTorch's configuration string.
#include <bit>
#include <charconv>
#include <cmath>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "baselines/caching_core.hpp"
#include "baselines/models.hpp"
#include "support/key_values.hpp"
#include "tessera/baselines.hpp"

namespace tessera {
namespace {

constexpr std::string_view names[] = {"pytorch", "expandable", "gmlake", "memory-saver"};

Error bad_option(std::string_view model, std::string message) {
  return make_error(Errc::invalid_argument, fmt::format("baseline {}: {}", model, message));
}

// The same limits PyTorch's configuration parser enforces, plus what a driver must offer.
Result<void> check(std::string_view model, const Driver& driver, const BaselineOptions& options) {
  if (driver.granularity() > 2 * MiB) {
    return bad_option(model, fmt::format("the models need a granularity of at most 2 MiB (PyTorch's 2 MiB "
                                         "rounding and pages); driver {} has {}",
                                         driver.name(), driver.granularity()));
  }
  if (options.max_split_size != unlimited_split_size && options.max_split_size <= baselines::kLargeBuffer) {
    return bad_option(
        model, fmt::format("max_split_size {} must be above 20 MiB, as PyTorch requires", options.max_split_size));
  }
  const double gc = options.garbage_collection_threshold;
  if (!(gc == 0.0 || (gc > 0.0 && gc < 1.0))) {
    return bad_option(model, fmt::format("garbage_collection_threshold {} must be 0 (off) or in (0, 1)", gc));
  }
  const double fraction = options.memory_fraction;
  if (!(fraction == 0.0 || (fraction > 0.0 && fraction <= 1.0))) {
    return bad_option(model, fmt::format("memory_fraction {} must be 0 (not set) or in (0, 1]", fraction));
  }
  const std::size_t divisions = options.roundup_power2_divisions;
  if (divisions != 0 && !std::has_single_bit(divisions)) {
    return bad_option(model, fmt::format("roundup_power2_divisions {} must be 0 (off) or a power of two", divisions));
  }
  if (model == "gmlake") {
    if (divisions > 1) {
      return bad_option(model,
                        "roundup_power2_divisions is not supported: GMLake rounds large requests to whole "
                        "2 MiB chunks");
    }
    if (!(options.gmlake.reuse_limit >= 1.0)) {
      return bad_option(model, fmt::format("gmlake.reuse_limit {} must be at least 1", options.gmlake.reuse_limit));
    }
    if (options.gmlake.fragment_limit == 0 || options.gmlake.auto_gc_limit == 0) {
      return bad_option(model, "gmlake.fragment_limit and gmlake.auto_gc_limit must be positive");
    }
  }
  return {};
}

template <class Make>
Result<std::unique_ptr<DeviceAllocator>> checked(std::string_view model, Driver& driver, const BaselineOptions& options,
                                                 Make make) {
  if (auto ok = check(model, driver, options); !ok) return std::move(ok).error();
  return make(driver, options);
}

Error bad_conf(std::string_view key, std::string_view value, std::string_view why) {
  return make_error(Errc::invalid_argument, fmt::format("allocator configuration: {}:{} {}", key, value, why));
}

}  // namespace

std::vector<std::string_view> baseline_names() { return {std::begin(names), std::end(names)}; }

Result<std::unique_ptr<DeviceAllocator>> make_pytorch_caching(Driver& driver, const BaselineOptions& options) {
  return checked("pytorch", driver, options, baselines::make_pytorch_caching_model);
}

Result<std::unique_ptr<DeviceAllocator>> make_expandable_segments(Driver& driver, const BaselineOptions& options) {
  return checked("expandable", driver, options, baselines::make_expandable_segments_model);
}

Result<std::unique_ptr<DeviceAllocator>> make_gmlake(Driver& driver, const BaselineOptions& options) {
  return checked("gmlake", driver, options, baselines::make_gmlake_model);
}

Result<std::unique_ptr<DeviceAllocator>> make_memory_saver(Driver& driver, const BaselineOptions& options) {
  return checked("memory-saver", driver, options, baselines::make_memory_saver_model);
}

Result<std::unique_ptr<DeviceAllocator>> make_baseline(std::string_view name, Driver& driver,
                                                       const BaselineOptions& options) {
  if (name == "pytorch") return make_pytorch_caching(driver, options);
  if (name == "expandable") return make_expandable_segments(driver, options);
  if (name == "gmlake") return make_gmlake(driver, options);
  if (name == "memory-saver") return make_memory_saver(driver, options);
  return make_error(Errc::invalid_argument,
                    fmt::format("unknown baseline '{}'; known: {}", name, fmt::join(names, ", ")));
}

Result<ParsedAllocConf> parse_pytorch_alloc_conf(std::string_view conf) {
  ParsedAllocConf parsed;
  auto entries = support::split_key_values(conf);
  if (!entries) {
    return make_error(Errc::invalid_argument, "allocator configuration: " + entries.error().message);
  }
  for (const support::KeyValue& entry : *entries) {
    const std::string_view key = entry.key;
    const std::string_view value = entry.value;
    auto as_unsigned = [&](std::size_t& out) {
      const auto [end, code] = std::from_chars(value.data(), value.data() + value.size(), out);
      return code == std::errc{} && end == value.data() + value.size();
    };
    if (key == "max_split_size_mb") {
      std::size_t mib = 0;
      if (!as_unsigned(mib) || mib <= baselines::kLargeBuffer / MiB || mib > unlimited_split_size / MiB) {
        return bad_conf(key, value, "must be a whole number of MiB above 20");
      }
      parsed.options.max_split_size = mib * MiB;
    } else if (key == "garbage_collection_threshold") {
      const std::string text(value);
      char* end = nullptr;
      const double threshold = std::strtod(text.c_str(), &end);
      if (text.empty() || end != text.c_str() + text.size() || !(threshold > 0.0 && threshold < 1.0)) {
        return bad_conf(key, value, "must be a number in (0, 1)");
      }
      parsed.options.garbage_collection_threshold = threshold;
    } else if (key == "roundup_power2_divisions") {
      std::size_t divisions = 0;
      if (!as_unsigned(divisions) || !std::has_single_bit(divisions)) {
        return bad_conf(key, value, "must be one power of two (the per-size list form is not supported)");
      }
      parsed.options.roundup_power2_divisions = divisions;
    } else if (key == "expandable_segments") {
      if (value != "True" && value != "False") return bad_conf(key, value, "must be True or False");
      parsed.expandable = value == "True";
    } else if (key == "backend") {
      if (value != "native") return bad_conf(key, value, "is not modelled (only backend:native)");
    } else {
      return bad_conf(key, value,
                      "is not a known key (max_split_size_mb, garbage_collection_threshold, "
                      "roundup_power2_divisions, expandable_segments, backend)");
    }
  }
  return parsed;
}

}  // namespace tessera
