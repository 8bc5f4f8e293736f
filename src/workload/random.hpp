// Seeded randomness that gives the same numbers on every platform and standard library: the standard
// distributions (std::normal_distribution, ...) are implementation-defined, so they are written out here.
// Each purpose draws from its own stream (seed mixed with a tag), so adding draws for one purpose never
// shifts another's.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string_view>

namespace tessera::workload {

constexpr std::uint64_t splitmix64(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A stable hash of a tag (FNV-1a), to name random streams and per-site choices.
constexpr std::uint64_t hash_tag(std::string_view tag) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (const char c : tag) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  return h;
}

constexpr std::uint64_t mix(std::uint64_t a, std::uint64_t b) noexcept { return splitmix64(a ^ splitmix64(b)); }

// xoshiro256** (Blackman and Vigna), seeded through splitmix64.
class Rng {
 public:
  Rng(std::uint64_t seed, std::string_view purpose) noexcept {
    std::uint64_t x = mix(seed, hash_tag(purpose));
    for (std::uint64_t& word : s_) {
      x = splitmix64(x);
      word = x;
    }
  }

  std::uint64_t next() noexcept {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  // In [0, 1), 53 random bits.
  double uniform() noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

  // In [0, n); n > 0. Scaling 53 random bits: exact enough for every n a workload draws from (< 2^40).
  std::uint64_t below(std::uint64_t n) noexcept {
    const auto k = static_cast<std::uint64_t>(uniform() * static_cast<double>(n));
    return k < n ? k : n - 1;
  }

  // Standard normal, Box-Muller.
  double normal() noexcept {
    const double u1 = 1.0 - uniform();  // (0, 1]: log is finite
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

  // Log-normal with the given mean (mu = ln(mean) - sigma^2 / 2), rounded and clipped to [1, max]: the long
  // tail of real prompt and answer lengths (ShareGPT-like).
  std::uint64_t length(std::uint64_t mean, std::uint64_t max, double sigma) noexcept {
    const double mu = std::log(static_cast<double>(mean)) - sigma * sigma / 2;
    const double value = std::round(std::exp(mu + sigma * normal()));
    return static_cast<std::uint64_t>(std::clamp(value, 1.0, static_cast<double>(max)));
  }

  // Poisson: Knuth's product method for small means, a rounded normal above 30 (error well under 1%).
  std::uint64_t poisson(double mean) noexcept {
    if (mean <= 0) return 0;
    if (mean > 30) {
      const double x = std::round(mean + std::sqrt(mean) * normal());
      return x < 0 ? 0 : static_cast<std::uint64_t>(x);
    }
    const double limit = std::exp(-mean);
    std::uint64_t k = 0;
    for (double p = uniform(); p > limit; p *= uniform()) ++k;
    return k;
  }

 private:
  static constexpr std::uint64_t rotl(std::uint64_t x, int k) noexcept { return (x << k) | (x >> (64 - k)); }
  std::uint64_t s_[4] = {};
};

}  // namespace tessera::workload
