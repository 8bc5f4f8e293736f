#include "core/option_table.hpp"

#include <fmt/format.h>

#include <charconv>

namespace tessera::core {

namespace {

using Reclaim = AllocatorConfig::Reclaim;

// clang-format off
constexpr std::array<OptionRow, 9> rows{{
    {.key = "garbage_collection_threshold", .field = "garbage_collection_threshold",
     .member = &AllocatorConfig::garbage_collection_threshold, .type = OptionRow::Type::fraction,
     .meaning = "PyTorch's: when the memory held passes this fraction of the capacity, idle pages go back, "
                "oldest first"},
    {.key = "roundup_power2_divisions", .field = "roundup_power2_divisions",
     .member = &AllocatorConfig::roundup_power2_divisions, .type = OptionRow::Type::number,
     .minimum = 0, .maximum = 64, .power_of_two = true,
     .meaning = "PyTorch's: round sizes up to one of N divisions of their power-of-two interval (0: plain 512 B "
                "rounding)"},
    {.key = "small_max_kb", .field = "small_max", .member = &AllocatorConfig::small_max,
     .type = OptionRow::Type::number, .minimum = 4, .maximum = 65536, .unit = KiB,
     .meaning = "Tessera's: requests of at most this many KiB use the small pool"},
    {.key = "reclaim", .field = "reclaim", .member = &AllocatorConfig::reclaim, .type = OptionRow::Type::choice,
     .choices = {{{"first", static_cast<std::uint8_t>(Reclaim::first)},
                  {"when_full", static_cast<std::uint8_t>(Reclaim::when_full)},
                  {"never", static_cast<std::uint8_t>(Reclaim::never)}}},
     .meaning = "Tessera's: first takes the pages of idle cached blocks before creating new ones (least memory, "
                "more driver calls), when_full only when no new page can be created (no churn in steady state), "
                "never does not"},
    {.key = "page_max_mb", .field = "page_max", .member = &AllocatorConfig::page_max,
     .type = OptionRow::Type::number, .minimum = 0, .maximum = 1024, .unit = MiB,
     .meaning = "Tessera's: the largest page created at once. 0 (or anything up to the granule): one granule per "
                "page, least memory. Larger: the slots only one block touches get one page, and while at most "
                "half the limit is held a new page runs on into the free space after the block (as expandable "
                "segments grow): fewer driver calls, but a page goes back only when all of it is idle"},
    {.key = "chunk_max_mb", .field = "chunk_max", .member = &AllocatorConfig::chunk_max,
     .type = OptionRow::Type::number, .minimum = 0, .maximum = 65536, .unit = MiB,
     .meaning = "Tessera's: the most physical memory one create call makes. The pages of a block come from one "
                "chunk, made larger than the block needs while the device has room (at most half of this more), "
                "the rest pooled for the blocks that follow; a chunk goes back when all of it is idle. 0 (or up "
                "to the page): one call per page"},
    {.key = "share_slivers", .field = "share_slivers", .member = &AllocatorConfig::share_slivers,
     .type = OptionRow::Type::choice, .choices = {{{"on", 1}, {"off", 0}}},
     .meaning = "Tessera's: the last step of the out-of-memory ladder: build a request over the free edges of "
                "granules that live blocks half use"},
    {.key = "virtual_factor", .field = "virtual_factor", .member = &AllocatorConfig::virtual_factor,
     .type = OptionRow::Type::number, .minimum = 1, .maximum = 64,
     .meaning = "Tessera's: virtual space reserved per (stream, pool), in multiples of the capacity"},
    {.key = "backup_cache", .field = "backup_cache", .member = &AllocatorConfig::backup_cache,
     .type = OptionRow::Type::choice, .choices = {{{"on", 1}, {"off", 0}}},
     .meaning = "Tessera's: keep the host buffers of a tag's backups after its resume for its next pause (no new "
                "host memory to allocate and pin each time); empty_cache frees them. off: freed at each resume"},
}};
// clang-format on

std::string_view unit_name(Bytes unit) { return unit == MiB ? "MiB" : unit == KiB ? "KiB" : ""; }

std::string bytes_text(std::uint64_t bytes) {
  if (bytes >= MiB && bytes % MiB == 0) return fmt::format("{} MiB", bytes / MiB);
  if (bytes >= KiB && bytes % KiB == 0) return fmt::format("{} KiB", bytes / KiB);
  return fmt::format("{} bytes", bytes);
}

// The field's value as a number: a choice's value, a size in bytes, a count. Fractions are read apart.
std::uint64_t number_of(const OptionRow& row, const AllocatorConfig& config) {
  return std::visit(
      [&](auto member) -> std::uint64_t {
        using Value = std::remove_cvref_t<decltype(config.*member)>;
        if constexpr (std::is_same_v<Value, double>) {
          return 0;
        } else {
          return static_cast<std::uint64_t>(config.*member);
        }
      },
      row.member);
}

void set_number(const OptionRow& row, AllocatorConfig& config, std::uint64_t number) {
  std::visit(
      [&](auto member) {
        using Value = std::remove_cvref_t<decltype(config.*member)>;
        if constexpr (std::is_same_v<Value, bool>) {
          config.*member = number != 0;
        } else {
          config.*member = static_cast<Value>(number);
        }
      },
      row.member);
}

double fraction_of(const OptionRow& row, const AllocatorConfig& config) {
  return config.*std::get<double AllocatorConfig::*>(row.member);
}

bool in_range(const OptionRow& row, std::uint64_t units) {
  if (units < row.minimum || units > row.maximum) return false;
  return !row.power_of_two || units == 0 || is_power_of_two(units);
}

bool fraction_in_range(double fraction) { return fraction == 0.0 || (fraction > 0.0 && fraction < 1.0); }

template <class Number>
std::optional<Number> parse_number(std::string_view text) {
  Number value{};
  const char* end = text.data() + text.size();
  auto [stop, error] = std::from_chars(text.data(), end, value);
  if (error != std::errc{} || stop != end) return std::nullopt;
  return value;
}

}  // namespace

std::span<const OptionRow> option_table() { return rows; }

std::string describe_type(const OptionRow& row) {
  switch (row.type) {
    case OptionRow::Type::fraction:
      return "a fraction: 0 (off), or above 0 and below 1";
    case OptionRow::Type::number: {
      const std::string_view unit = unit_name(row.unit);
      const std::string whole = unit.empty() ? "a whole number" : fmt::format("a whole number of {}", unit);
      if (row.power_of_two) return fmt::format("0, or a power of two up to {}", row.maximum);
      return fmt::format("{} from {} to {}", whole, row.minimum, row.maximum);
    }
    case OptionRow::Type::choice: {
      std::string words;
      std::size_t count = 0;
      for (const OptionRow::Choice& choice : row.choices) count += choice.word.empty() ? 0 : 1;
      for (std::size_t i = 0; i < count; ++i) {
        if (i > 0) words += i + 1 == count ? " or " : ", ";
        words += row.choices[i].word;
      }
      return words;
    }
  }
  return {};
}

std::string default_text(const OptionRow& row) {
  const AllocatorConfig defaults;
  switch (row.type) {
    case OptionRow::Type::fraction:
      return fmt::format("{}", fraction_of(row, defaults));
    case OptionRow::Type::number:
      return fmt::format("{}", number_of(row, defaults) / row.unit);
    case OptionRow::Type::choice:
      for (const OptionRow::Choice& choice : row.choices) {
        if (!choice.word.empty() && choice.value == number_of(row, defaults)) return std::string(choice.word);
      }
      break;
  }
  return {};
}

std::optional<std::string> apply(const OptionRow& row, std::string_view value, AllocatorConfig& config) {
  const std::string expected = "expected " + describe_type(row);
  switch (row.type) {
    case OptionRow::Type::fraction: {
      const auto fraction = parse_number<double>(value);
      if (!fraction || !fraction_in_range(*fraction)) return expected;
      config.*std::get<double AllocatorConfig::*>(row.member) = *fraction;
      return std::nullopt;
    }
    case OptionRow::Type::number: {
      const auto units = parse_number<std::uint64_t>(value);
      if (!units || !in_range(row, *units)) return expected;
      set_number(row, config, *units * row.unit);  // maximum * unit fits: the table's ranges are small
      return std::nullopt;
    }
    case OptionRow::Type::choice:
      for (const OptionRow::Choice& choice : row.choices) {
        if (!choice.word.empty() && choice.word == value) {
          set_number(row, config, choice.value);
          return std::nullopt;
        }
      }
      return expected;
  }
  return expected;
}

std::optional<std::string> check(const OptionRow& row, const AllocatorConfig& config) {
  switch (row.type) {
    case OptionRow::Type::fraction: {
      const double fraction = fraction_of(row, config);
      if (fraction_in_range(fraction)) return std::nullopt;
      return fmt::format("{} is {}: {} expects {}", row.field, fraction, row.key, describe_type(row));
    }
    case OptionRow::Type::number: {
      const std::uint64_t number = number_of(row, config);
      // A size built in code need not be a whole number of the string's unit; it must be inside its range.
      const std::uint64_t low = row.minimum * row.unit;
      const std::uint64_t high = row.maximum * row.unit;
      const bool inside = number >= low && number <= high &&
                          (!row.power_of_two || number == 0 || is_power_of_two(number));
      if (inside) return std::nullopt;
      if (row.unit == 1) return fmt::format("{} is {}: expected {}", row.field, number, describe_type(row));
      return fmt::format("{} is {}: expected {} to {} ({} takes {})", row.field, bytes_text(number),
                         bytes_text(low), bytes_text(high), row.key, describe_type(row));
    }
    case OptionRow::Type::choice:
      for (const OptionRow::Choice& choice : row.choices) {
        if (!choice.word.empty() && choice.value == number_of(row, config)) return std::nullopt;
      }
      return fmt::format("{} holds {}, none of {}", row.field, number_of(row, config), describe_type(row));
  }
  return std::nullopt;
}

}  // namespace tessera::core
