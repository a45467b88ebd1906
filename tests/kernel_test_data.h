#pragma once
// Deterministic test data for the kernel tests: a seeded generator that gives the same floats on
// every platform (std::normal_distribution does not promise that), and the weight shapes that
// stress quantizers (zeros, outliers, extremes).
#include <cmath>
#include <cstdint>
#include <vector>

namespace infercast::testing {

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed * 0x9E3779B97F4A7C15ULL + 1) {}
  std::uint64_t next() {  // splitmix64
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  float gaussian() {
    const double u1 = uniform() + 0x1.0p-60;
    const double u2 = uniform();
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }

 private:
  std::uint64_t state_;
};

inline std::vector<float> gaussian(std::size_t n, std::uint64_t seed, float scale = 1.0F) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = scale * rng.gaussian();
  return v;
}

enum class Pattern { gaussian, zero_blocks, outlier_per_block, extreme };

// Weights for edge-case tests: `block` is the format's block size.
inline std::vector<float> pattern(Pattern p, std::size_t n, std::size_t block, std::uint64_t seed) {
  std::vector<float> v = gaussian(n, seed, 0.02F);
  Rng rng(seed + 7);
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
