#pragma once
// Q8_0 activation quantization for the AVX-512 files, bit-identical to reference::quantize_q8_0.
// In an unnamed namespace for the reason kernels/stream_prefetch.h gives: only files compiled
// for AVX-512 may include it.
//
// A GEMV quantizes its whole activation row on one thread before any weight is read, and the
// other threads wait for it. Block by block, each block's horizontal maximum, two scalar
// divisions and an fp16 rounding in software form one long chain: 2048 columns took 0.46-0.51 us
// (1.2 us in the interleaved kernels' packer, which called the quantizer once per block), as
// long as streaming 30 KB of weights. Sixteen blocks at a time turn the divisions and the
// rounding into one vector operation each (IEEE division and vcvtps2ph round as the scalar code
// does, so the bytes are the same); docs/PERFORMANCE.md, twenty-seventh session.
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/blocks.h"
#include "kernels/simd_macros.h"

namespace infercast {
namespace {

// roundf: half away from zero. t - trunc(t) is exact for |t| < 2^23, so the comparison is too.
INFERCAST_INLINE __m512 round_half_away(__m512 t) {
  const __m512 r = _mm512_roundscale_ps(t, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m512 frac = _mm512_abs_ps(_mm512_sub_ps(t, r));
  const __mmask16 up = _mm512_cmp_ps_mask(frac, _mm512_set1_ps(0.5F), _CMP_GE_OQ);
  const __m512 one = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(_mm512_set1_ps(1.0F)),
                                                          _mm512_and_si512(_mm512_castps_si512(t), _mm512_set1_epi32(INT32_MIN))));
  return _mm512_mask_add_ps(r, up, r, one);
}

// Quantizes `blocks` blocks of 32 floats from x and calls emit(k, d, d_fp16, q_lo, q_hi) for
// block k: its scale as fp16 and as the float that fp16 holds, and its 32 quants as two vectors
// of sixteen int32 (elements 0-15 and 16-31).
template <typename Emit>
INFERCAST_INLINE void quantize_q8_0_blocks(const float* x, std::size_t blocks, Emit&& emit) {
  constexpr int kGroup = 16;
  for (std::size_t k0 = 0; k0 < blocks; k0 += kGroup) {
    const int n = static_cast<int>(std::min<std::size_t>(kGroup, blocks - k0));
    alignas(64) float amax[kGroup] = {};
    for (int j = 0; j < n; ++j) {
      const float* p = x + (k0 + j) * kQk;
      amax[j] = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(p)), _mm512_abs_ps(_mm512_loadu_ps(p + 16))));
    }
    // d = amax / 127; id = d != 0 ? 1 / d : 0, NaN included (unordered compares as not equal).
    const __m512 d = _mm512_div_ps(_mm512_load_ps(amax), _mm512_set1_ps(127.0F));
    const __mmask16 nonzero = _mm512_cmp_ps_mask(d, _mm512_setzero_ps(), _CMP_NEQ_UQ);
    alignas(64) float id[kGroup];
    _mm512_store_ps(id, _mm512_maskz_div_ps(nonzero, _mm512_set1_ps(1.0F), d));
    const __m256i d_half = _mm512_cvtps_ph(d, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    alignas(64) float d_back[kGroup];
    alignas(32) std::uint16_t d_bits[kGroup];
    _mm512_store_ps(d_back, _mm512_cvtph_ps(d_half));
    _mm256_store_si256(reinterpret_cast<__m256i*>(d_bits), d_half);
    for (int j = 0; j < n; ++j) {
      const float* p = x + (k0 + j) * kQk;
      const __m512 s = _mm512_set1_ps(id[j]);
      const __m512i q0 = _mm512_cvttps_epi32(round_half_away(_mm512_mul_ps(_mm512_loadu_ps(p), s)));
      const __m512i q1 = _mm512_cvttps_epi32(round_half_away(_mm512_mul_ps(_mm512_loadu_ps(p + 16), s)));
      emit(k0 + j, d_back[j], d_bits[j], q0, q1);
    }
  }
}

}  // namespace
}  // namespace infercast
