// AVX-512 compute-peak kernels (compiled with -mavx512f, -mavx512vnni, -mavx512bf16).
#include <immintrin.h>

#include <array>
#include <cstring>

#include "probes/compute_kernels.h"

namespace infercast::kernels_avx512 {
namespace {
volatile float g_one = 1.0F;
volatile float g_step = 0x1p-20F;
volatile int g_ones = 0x01010101;
volatile float g_half_step = 0x1p-21F;

template <typename Vec, typename Lane>
bool all_lanes_equal(const Vec (&acc)[16], Lane expected) {
  for (const auto& x : acc) {
    Lane lanes[sizeof(Vec) / sizeof(Lane)];
    std::memcpy(lanes, &x, sizeof x);
    for (Lane v : lanes) {
      if (v != expected) return false;
    }
  }
  return true;
}
}  // namespace

bool fp32_fma(std::uint64_t iterations) {
  const __m512 m = _mm512_set1_ps(g_one), a = _mm512_set1_ps(g_step);
  __m512 acc[16];
  for (auto& x : acc) x = _mm512_setzero_ps();
  for (std::uint64_t i = 0; i < iterations; ++i) {
    for (auto& x : acc) x = _mm512_fmadd_ps(x, m, a);
  }
  return all_lanes_equal(acc, static_cast<float>(iterations) * 0x1p-20F);
}

bool bf16_dot(std::uint64_t iterations) {
  // Each lane adds 1 * 2^-21 + 1 * 2^-21 = 2^-20 per instruction.
  const __m512bh one = _mm512_cvtne2ps_pbh(_mm512_set1_ps(g_one), _mm512_set1_ps(g_one));
  const __m512bh step =
      _mm512_cvtne2ps_pbh(_mm512_set1_ps(g_half_step), _mm512_set1_ps(g_half_step));
  __m512 acc[16];
  for (auto& x : acc) x = _mm512_setzero_ps();
  for (std::uint64_t i = 0; i < iterations; ++i) {
    for (auto& x : acc) x = _mm512_dpbf16_ps(x, one, step);
  }
  return all_lanes_equal(acc, static_cast<float>(iterations) * 0x1p-20F);
}

bool int8_vnni(std::uint64_t iterations) {
  const __m512i ones = _mm512_set1_epi32(g_ones);
  __m512i acc[16];
  for (auto& x : acc) x = _mm512_setzero_si512();
  for (std::uint64_t i = 0; i < iterations; ++i) {
    for (auto& x : acc) x = _mm512_dpbusd_epi32(x, ones, ones);
  }
  return all_lanes_equal(acc, static_cast<std::uint32_t>(iterations * 4));
}

}  // namespace infercast::kernels_avx512
