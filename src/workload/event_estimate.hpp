// The events a generator will write, estimated from its parameters before it generates anything, so that
// settings whose trace cannot fit the emitter's event limit are refused at once: generating them first
// took a minute and ran out of memory. Each term is a product of parameters (an undercount: lengths at
// their means, the smallest ops), and the products saturate, since 64-bit parameters multiply past 2^64.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "workload/emitter.hpp"
#include "workload/parameters.hpp"

namespace tessera::workload {

inline constexpr std::uint64_t saturated = std::numeric_limits<std::uint64_t>::max();

constexpr std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) noexcept {
  return a > saturated - b ? saturated : a + b;
}

constexpr std::uint64_t saturating_mul(std::uint64_t a, std::uint64_t b) noexcept {
  return a != 0 && b > saturated / a ? saturated : a * b;
}

constexpr std::uint64_t saturating_product(std::initializer_list<std::uint64_t> factors) noexcept {
  std::uint64_t product = 1;
  for (const std::uint64_t factor : factors) product = saturating_mul(product, factor);
  return product;
}

// One term of the estimate: `events` grows with the parameter `key`, as `formula` (with the values) says.
struct EventTerm {
  std::string_view key;
  std::string formula;
  std::uint64_t events = 0;
};

// Fails when the terms add up past default_event_limit, naming the largest term's parameter, its formula,
// the estimate and the bound.
inline void refuse_past_event_limit(ParameterReader& reader, const std::vector<EventTerm>& terms) {
  if (!reader.ok()) return;
  std::uint64_t total = 0;
  const EventTerm* largest = nullptr;
  for (const EventTerm& term : terms) {
    total = saturating_add(total, term.events);
    if (largest == nullptr || term.events > largest->events) largest = &term;
  }
  if (largest == nullptr || total <= default_event_limit) return;
  const std::string estimate = total == saturated ? std::string("more than 2^64") : fmt::format("{}", total);
  reader.require(false, largest->key,
                 fmt::format("the trace would need at least about {} events ({}: {}), over the limit of {} events",
                             estimate, largest->formula, largest->events == saturated ? std::string("over 2^64")
                                                                                      : fmt::format("{}", largest->events),
                             default_event_limit));
}

}  // namespace tessera::workload
