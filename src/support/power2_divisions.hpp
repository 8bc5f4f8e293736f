// PyTorch's roundup_power2_divisions: a size rounded up to the next of `divisions` equal steps between the
// powers of two around it (with 4 divisions, sizes between 256 and 512 MiB round to 320, 384, 448 or 512 MiB).
// Tessera's allocator and the PyTorch models round with this one function, so that the option means the same.
#pragma once

#include <bit>
#include <optional>

#include "tessera/types.hpp"

namespace tessera::support {

// `divisions` is a power of two. A power of two stays as it is; a size whose step would be below one byte goes
// to the next power of two. Empty where the result would be 2^64 or more.
constexpr std::optional<Bytes> round_up_to_power2_division(Bytes size, Bytes divisions) noexcept {
  if (size == 0 || std::has_single_bit(size)) return size;
  const Bytes floor = std::bit_floor(size);
  const Bytes step = floor >> std::countr_zero(divisions);
  if (step == 0) return floor == Bytes{1} << 63 ? std::nullopt : std::optional<Bytes>(floor << 1);
  const Bytes rounded_down = size & ~(step - 1);
  if (rounded_down == size) return size;
  if (rounded_down > ~Bytes{0} - step) return std::nullopt;
  return rounded_down + step;
}

}  // namespace tessera::support
