#pragma once
// Deterministic test data for the kernel tests: a seeded generator that gives the same floats on
// every platform (std::normal_distribution does not promise that), and the weight shapes that
// stress quantizers (zeros, outliers, extremes).
#include <cmath>
#include <cstdint>
#include <vector>

#include "probes/random.h"

namespace infercast::testing {

// The test data's seeding (kept so the golden hashes stay valid).
inline SeededRng Rng(std::uint64_t seed) { return SeededRng(seed * 0x9E3779B97F4A7C15ULL + 1); }

inline std::vector<float> gaussian(std::size_t n, std::uint64_t seed, float scale = 1.0F) {
  SeededRng rng = Rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = scale * rng.gaussian();
  return v;
}

enum class Pattern { gaussian, zero_blocks, outlier_per_block, extreme, saturated };

// Weights for edge-case tests: `block` is the format's block size.
inline std::vector<float> pattern(Pattern p, std::size_t n, std::size_t block, std::uint64_t seed) {
  std::vector<float> v = gaussian(n, seed, 0.02F);
  SeededRng rng = Rng(seed + 7);
  for (std::size_t b = 0; b < n / block; ++b) {
    float* x = v.data() + b * block;
    switch (p) {
      case Pattern::gaussian: break;
      case Pattern::zero_blocks:
        if (b % 3 == 0) std::fill(x, x + block, 0.0F);
        break;
      case Pattern::outlier_per_block: x[rng.next() % block] = (rng.next() % 2 ? 1.0F : -1.0F) * 40.0F; break;
      case Pattern::extreme:
        // Largest magnitudes an fp16 scale can represent once divided by the quant range.
        for (std::size_t i = 0; i < block; ++i) x[i] = (i % 2 ? 1.0F : -1.0F) * 60000.0F * (0.5F + 0.5F * static_cast<float>(rng.uniform()));
        break;
      case Pattern::saturated:
        // A block format's largest quants: -1 then +1 in every 32, so every 4-bit quant but the
        // first of each 32 is 15 (the tests pair it with activations that quantize to -128).
        for (std::size_t i = 0; i < block; ++i) x[i] = i % 32 == 0 ? -1.0F : 1.0F;
        break;
    }
  }
  return v;
}

inline std::uint64_t fnv1a(const void* data, std::size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint64_t h = 0xCBF29CE484222325ULL;
  for (std::size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001B3ULL;
  return h;
}

}  // namespace infercast::testing
