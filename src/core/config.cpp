// The allocator's options, as one table: key, default, meaning, and how its value is parsed.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>
#include <cstdlib>
#include <functional>
#include <set>

#include "tessera/allocator.hpp"

namespace tessera {

namespace {

struct Option {
  OptionDescription description;
  std::function<std::optional<std::string>(std::string_view value, AllocatorConfig&)> apply;  // error text
};

template <class Number>
std::optional<Number> parse_number(std::string_view text) {
  Number value{};
  const auto* end = text.data() + text.size();
  auto [stop, error] = std::from_chars(text.data(), end, value);
  if (error != std::errc{} || stop != end) return std::nullopt;
  return value;
}

const std::vector<Option>& option_table() {
  static const std::vector<Option> table = {
      {{"garbage_collection_threshold", "off",
        "PyTorch's: when the memory held passes this fraction of capacity, idle pages go back, oldest first"},
       [](std::string_view value, AllocatorConfig& config) -> std::optional<std::string> {
         auto fraction = parse_number<double>(value);
         if (!fraction || !(*fraction > 0.0 && *fraction < 1.0)) return "expected a fraction between 0 and 1";
         config.garbage_collection_threshold = *fraction;
         return std::nullopt;
       }},
      {{"roundup_power2_divisions", "0 (512 B rounding)",
        "PyTorch's: round sizes up to one of N divisions of their power-of-two interval (N a power of two)"},
       [](std::string_view value, AllocatorConfig& config) -> std::optional<std::string> {
         auto divisions = parse_number<unsigned>(value);
         if (!divisions || (*divisions != 0 && !is_power_of_two(*divisions)) || *divisions > 64) {
           return "expected 0 or a power of two up to 64";
         }
         config.roundup_power2_divisions = *divisions;
         return std::nullopt;
       }},
      {{"small_max_kb", "1024", "Tessera's: requests of at most this many KiB use the small pool (4 to 65536)"},
       [](std::string_view value, AllocatorConfig& config) -> std::optional<std::string> {
         auto kib = parse_number<std::uint64_t>(value);
         if (!kib || *kib < 4 || *kib > 65536) return "expected a whole number of KiB from 4 to 65536";
         config.small_max = static_cast<Bytes>(*kib) * KiB;
         return std::nullopt;
       }},
      {{"page_max_mb", "0",
        "Tessera's: the largest page created at once, in MiB (0 to 1024; 0, or anything up to the granule, "
        "means one granule per page: least memory; larger: fewer driver calls)"},
       [](std::string_view value, AllocatorConfig& config) -> std::optional<std::string> {
         auto mib = parse_number<std::uint64_t>(value);
         if (!mib || *mib > 1024) return "expected a whole number of MiB from 0 to 1024";
         config.page_max = static_cast<Bytes>(*mib) * MiB;
         return std::nullopt;
       }},
      {{"chunk_max_mb", "64",
        "Tessera's: the most physical memory created by one driver call, in MiB (0 to 65536; 0, or anything "
        "up to the page, means one call per page). A chunk serves many pages, each still mapped and moved on "
        "its own; it goes back to the device when all of it is idle"},
       [](std::string_view value, AllocatorConfig& config) -> std::optional<std::string> {
         auto mib = parse_number<std::uint64_t>(value);
         if (!mib || *mib > 65536) return "expected a whole number of MiB from 0 to 65536";
         config.chunk_max = static_cast<Bytes>(*mib) * MiB;
         return std::nullopt;
       }},
      {{"reclaim", "when_full",
        "Tessera's: take the pages of idle cached blocks before creating new ones (first), only when no "
        "new page can be created (when_full), or never"},
       [](std::string_view value, AllocatorConfig& config) -> std::optional<std::string> {
         using Reclaim = AllocatorConfig::Reclaim;
         if (value == "first") {
           config.reclaim = Reclaim::first;
         } else if (value == "when_full") {
           config.reclaim = Reclaim::when_full;
         } else if (value == "never") {
           config.reclaim = Reclaim::never;
         } else {
           return "expected first, when_full or never";
         }
         return std::nullopt;
       }},
      {{"share_slivers", "on",
        "Tessera's: on the out-of-memory ladder, build a block whose first and last granules are the free "
        "edges of granules live blocks half use (on or off)"},
       [](std::string_view value, AllocatorConfig& config) -> std::optional<std::string> {
         if (value == "on") {
           config.share_slivers = true;
         } else if (value == "off") {
           config.share_slivers = false;
         } else {
           return "expected on or off";
         }
         return std::nullopt;
       }},
      {{"virtual_factor", "2",
        "Tessera's: virtual space reserved per (stream, pool), in multiples of the capacity (1 to 64)"},
       [](std::string_view value, AllocatorConfig& config) -> std::optional<std::string> {
         auto factor = parse_number<unsigned>(value);
         if (!factor || *factor < 1 || *factor > 64) return "expected a whole number from 1 to 64";
         config.virtual_factor = *factor;
         return std::nullopt;
       }},
  };
  return table;
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

Error config_error(std::string message) {
  return make_error(Errc::invalid_argument, "allocator configuration: " + std::move(message));
}

}  // namespace

const std::vector<OptionDescription>& allocator_options() {
  static const std::vector<OptionDescription> descriptions = [] {
    std::vector<OptionDescription> all;
    for (const Option& option : option_table()) all.push_back(option.description);
    return all;
  }();
  return descriptions;
}

Result<AllocatorConfig> parse_allocator_config(std::string_view text) {
  AllocatorConfig config;
  std::set<std::string_view> seen;
  while (!trim(text).empty()) {
    const auto comma = text.find(',');
    const std::string_view item = trim(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    if (item.empty()) return config_error("an empty entry between commas");
    const auto colon = item.find(':');
    if (colon == std::string_view::npos) {
      return config_error(fmt::format("'{}' has no value: expected key:value", item));
    }
    const std::string_view key = trim(item.substr(0, colon));
    const std::string_view value = trim(item.substr(colon + 1));
    const Option* option = nullptr;
    for (const Option& candidate : option_table()) {
      if (candidate.description.key == key) option = &candidate;
    }
    if (option == nullptr) {
      std::vector<std::string_view> keys;
      for (const Option& candidate : option_table()) keys.push_back(candidate.description.key);
      return config_error(fmt::format("unknown key '{}' (known keys: {})", key, fmt::join(keys, ", ")));
    }
    if (!seen.insert(option->description.key).second) return config_error(fmt::format("key '{}' given twice", key));
    if (auto problem = option->apply(value, config)) {
      return config_error(fmt::format("bad value '{}' for key '{}': {}", value, key, *problem));
    }
  }
  return config;
}

Result<void> check_allocator_config(const AllocatorConfig& config) {
  if (config.small_max < 512) return make_error(Errc::invalid_argument, "tessera: small_max must be at least 512 bytes");
  if (config.virtual_factor == 0) return make_error(Errc::invalid_argument, "tessera: virtual_factor must be at least 1");
  // The same rules as the configuration string's, for configurations built in code.
  if (config.roundup_power2_divisions > 64 ||
      (config.roundup_power2_divisions != 0 && !is_power_of_two(config.roundup_power2_divisions))) {
    return make_error(Errc::invalid_argument, "tessera: roundup_power2_divisions must be 0 or a power of two up to 64");
  }
  if (!(config.garbage_collection_threshold >= 0.0 && config.garbage_collection_threshold < 1.0)) {
    return make_error(Errc::invalid_argument, "tessera: garbage_collection_threshold must be in [0, 1)");
  }
  if (config.page_max > GiB) return make_error(Errc::invalid_argument, "tessera: page_max must be at most 1 GiB");
  return {};
}

Result<AllocatorConfig> allocator_config_from_environment() {
  const char* text = std::getenv("TESSERA_ALLOC_CONF");
  if (text == nullptr) return AllocatorConfig{};
  auto config = parse_allocator_config(text);
  if (!config) {
    return make_error(Errc::invalid_argument, "TESSERA_ALLOC_CONF: " + config.error().message);
  }
  return config;
}

}  // namespace tessera
