#pragma once
// Q8_0 activation quantization for the AVX2 files, bit-identical to reference::quantize_q8_0:
// eight blocks at a time, for the reason kernels/q8_0_avx512.h gives. In an unnamed namespace
// for the reason kernels/stream_prefetch.h gives: only files compiled for AVX2 (with FMA and
// F16C, which the AVX2 level requires) may include it.
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/blocks.h"
#include "kernels/simd_macros.h"

namespace infercast {
namespace {

// roundf: half away from zero. t - trunc(t) is exact for |t| < 2^23, so the comparison is too.
INFERCAST_INLINE __m256 round_half_away(__m256 t) {
  const __m256 r = _mm256_round_ps(t, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 frac = _mm256_andnot_ps(_mm256_set1_ps(-0.0F), _mm256_sub_ps(t, r));
  const __m256 up = _mm256_cmp_ps(frac, _mm256_set1_ps(0.5F), _CMP_GE_OQ);
  const __m256 one = _mm256_or_ps(_mm256_set1_ps(1.0F), _mm256_and_ps(t, _mm256_set1_ps(-0.0F)));
  return _mm256_add_ps(r, _mm256_and_ps(up, one));
}

// Quantizes `blocks` blocks of 32 floats from x and calls emit(k, d, d_fp16, q) for block k: its
// scale as the float its fp16 holds and as fp16, and its 32 quants in order in one vector.
template <typename Emit>
INFERCAST_INLINE void quantize_q8_0_blocks(const float* x, std::size_t blocks, Emit&& emit) {
  constexpr int kGroup = 8;
  const __m256 sign = _mm256_set1_ps(-0.0F);
  for (std::size_t k0 = 0; k0 < blocks; k0 += kGroup) {
    const int n = static_cast<int>(std::min<std::size_t>(kGroup, blocks - k0));
    alignas(32) float amax[kGroup] = {};
    for (int j = 0; j < n; ++j) {
      const float* p = x + (k0 + j) * kQk;
      const __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(p)), _mm256_andnot_ps(sign, _mm256_loadu_ps(p + 8))),
                                     _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(p + 16)), _mm256_andnot_ps(sign, _mm256_loadu_ps(p + 24))));
      __m128 s = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
      s = _mm_max_ps(s, _mm_movehl_ps(s, s));
      amax[j] = _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
    }
    // d = amax / 127; id = d != 0 ? 1 / d : 0, NaN included (unordered compares as not equal).
    const __m256 d = _mm256_div_ps(_mm256_load_ps(amax), _mm256_set1_ps(127.0F));
    const __m256 nonzero = _mm256_cmp_ps(d, _mm256_setzero_ps(), _CMP_NEQ_UQ);
    alignas(32) float id[kGroup];
    _mm256_store_ps(id, _mm256_and_ps(nonzero, _mm256_div_ps(_mm256_set1_ps(1.0F), d)));
    const __m128i d_half = _mm256_cvtps_ph(d, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    alignas(32) float d_back[kGroup];
    alignas(16) std::uint16_t d_bits[kGroup];
    _mm256_store_ps(d_back, _mm256_cvtph_ps(d_half));
    _mm_store_si128(reinterpret_cast<__m128i*>(d_bits), d_half);
    for (int j = 0; j < n; ++j) {
      const float* p = x + (k0 + j) * kQk;
      const __m256 s = _mm256_set1_ps(id[j]);
      __m256i q[4];
      for (int i = 0; i < 4; ++i) q[i] = _mm256_cvttps_epi32(round_half_away(_mm256_mul_ps(_mm256_loadu_ps(p + 8 * i), s)));
      // The packs work within 128-bit lanes: dword i of the low lane holds quants 8i..8i+3, of
      // the high lane 8i+4..8i+7; one permute puts them in order.
      const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
      emit(k0 + j, d_back[j], d_bits[j], _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    }
  }
}

}  // namespace
}  // namespace infercast
