// AVX2 compute-peak kernels (compiled with -mavx2 -mfma -mavxvnni).
#include <immintrin.h>

#include <array>

#include "probes/compute_kernels.h"

namespace infercast::kernels_avx2 {
namespace {
// Values come through a volatile so the compiler cannot fold the arithmetic.
volatile float g_one = 1.0F;
volatile float g_step = 0x1p-20F;
volatile int g_ones = 0x01010101;
}  // namespace

bool fp32_fma(std::uint64_t iterations) {
  const __m256 m = _mm256_set1_ps(g_one), a = _mm256_set1_ps(g_step);
  __m256 acc[12];
  for (auto& x : acc) x = _mm256_setzero_ps();
  for (std::uint64_t i = 0; i < iterations; ++i) {
    for (auto& x : acc) x = _mm256_fmadd_ps(x, m, a);
  }
  // Each lane added step once per iteration: exactly iterations * 2^-20 while below 8.
  const float expected = static_cast<float>(iterations) * 0x1p-20F;
  bool ok = true;
  for (const auto& x : acc) {
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, x);
    for (float v : lanes) ok = ok && v == expected;
  }
  return ok;
}

bool int8_avx_vnni(std::uint64_t iterations) {
  const __m256i ones = _mm256_set1_epi32(g_ones);
  __m256i acc[12];
  for (auto& x : acc) x = _mm256_setzero_si256();
  for (std::uint64_t i = 0; i < iterations; ++i) {
    for (auto& x : acc) x = _mm256_dpbusd_avx_epi32(x, ones, ones);
  }
  const auto expected = static_cast<std::uint32_t>(iterations * 4);
  bool ok = true;
  for (const auto& x : acc) {
    alignas(32) std::uint32_t lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), x);
    for (std::uint32_t v : lanes) ok = ok && v == expected;
  }
  return ok;
}

}  // namespace infercast::kernels_avx2
