// AVX-512 vector primitives (see vec.h). Tails use masked loads, so no scalar remainder.
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>

#include "kernels/simd_macros.h"
#include "kernels/vec.h"

namespace infercast {
namespace {

__mmask16 tail_mask(std::size_t left) { return static_cast<__mmask16>((1U << left) - 1); }
__mmask16 tail_mask16(std::size_t left) { return left >= 16 ? 0xFFFF : tail_mask(left); }

// Sixteen values (those under the mask, zeros elsewhere) as floats, from F32 or F16 storage.
__m512 load16(const float* p, __mmask16 m = 0xFFFF) { return _mm512_maskz_loadu_ps(m, p); }
__m512 load16(const std::uint16_t* p, __mmask16 m = 0xFFFF) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p)); }

template <class T>
float dot(const T* a, const float* b, std::size_t n) {
  __m512 acc0 = _mm512_setzero_ps();
  __m512 acc1 = _mm512_setzero_ps();
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm512_fmadd_ps(load16(a + i), _mm512_loadu_ps(b + i), acc0);
    acc1 = _mm512_fmadd_ps(load16(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
  }
  for (; i < n; i += 16) {
    const __mmask16 m = tail_mask16(n - i);
    acc0 = _mm512_fmadd_ps(load16(a + i, m), _mm512_maskz_loadu_ps(m, b + i), acc0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

template <class T>
void axpy(float a, const T* x, float* y, std::size_t n) {
  const __m512 va = _mm512_set1_ps(a);
  for (std::size_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask16(n - i);
    _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(va, load16(x + i, m), _mm512_maskz_loadu_ps(m, y + i)));
  }
}

// Scores of H heads against one block of keys in the column layout: each element row of the
// block is loaded (and converted) once for the H heads, one broadcast and FMA per head. Two
// chains per head (even and odd elements) keep eight FMAs in flight at H = 4. With Ask, the
// block at `ahead` is asked for an element row pair at a time.
template <class T, int H, bool Ask>
INFERCAST_INLINE void dot_keys_pass(const T* keys, __mmask16 stored, const T* ahead, const float* q, std::size_t n,
                                    __m512 scale, float* out, std::size_t out_stride) {
  __m512 acc[H][2];
  INFERCAST_UNROLL
  for (int h = 0; h < H; ++h) acc[h][0] = acc[h][1] = _mm512_setzero_ps();
  std::size_t i = 0;
  for (; i + 2 <= n; i += 2) {
    if constexpr (Ask) ask_for_key_rows(ahead, i, 2);
    const __m512 k0 = load16(keys + i * kKeyBlock);
    const __m512 k1 = load16(keys + (i + 1) * kKeyBlock);
    INFERCAST_UNROLL
    for (int h = 0; h < H; ++h) {
      acc[h][0] = _mm512_fmadd_ps(_mm512_set1_ps(q[h * n + i]), k0, acc[h][0]);
      acc[h][1] = _mm512_fmadd_ps(_mm512_set1_ps(q[h * n + i + 1]), k1, acc[h][1]);
    }
  }
  if (i < n) {
    if constexpr (Ask) ask_for_key_rows(ahead, i, 1);
    const __m512 k0 = load16(keys + i * kKeyBlock);
    INFERCAST_UNROLL
    for (int h = 0; h < H; ++h) acc[h][0] = _mm512_fmadd_ps(_mm512_set1_ps(q[h * n + i]), k0, acc[h][0]);
  }
  INFERCAST_UNROLL
  for (int h = 0; h < H; ++h)
    _mm512_mask_storeu_ps(out + h * out_stride, stored, _mm512_mul_ps(_mm512_add_ps(acc[h][0], acc[h][1]), scale));
}

// Two blocks of keys (the second's first `stored` columns kept) at once: each query element is
// broadcast into a register once for both blocks, where the one-block pass takes it from
// memory for each FMA (its loads, not its FMAs, bound that pass: 18 per 16 FMAs, here 12). The
// chains are dot_keys_pass's, two per head and block, so a block's scores are bit for bit the
// same in a pair and alone. Against one-block passes of eight heads (the kernel before): 0.79x
// the time at 512 positions, 0.84-0.89x at 48-79 (the scores alone, in cache, in one process,
// alternated; Zen 5).
template <class T, int H, bool Ask>
INFERCAST_INLINE void dot_keys_pair_pass(const T* const (&keys)[2], __mmask16 stored, const T* const (&ahead)[2],
                                         const float* q, std::size_t n, __m512 scale, float* out,
                                         std::size_t out_stride) {
  __m512 acc[H][2][2];  // [head][block][even, odd elements]
  INFERCAST_UNROLL
  for (int h = 0; h < H; ++h) acc[h][0][0] = acc[h][0][1] = acc[h][1][0] = acc[h][1][1] = _mm512_setzero_ps();
  std::size_t i = 0;
  for (; i + 2 <= n; i += 2) {
    __m512 k[2][2];
    INFERCAST_UNROLL
    for (int b = 0; b < 2; ++b) {
      if constexpr (Ask) ask_for_key_rows(ahead[b], i, 2);
      k[b][0] = load16(keys[b] + i * kKeyBlock);
      k[b][1] = load16(keys[b] + (i + 1) * kKeyBlock);
    }
    INFERCAST_UNROLL
    for (int h = 0; h < H; ++h) {
      const __m512 q0 = _mm512_set1_ps(q[h * n + i]);
      const __m512 q1 = _mm512_set1_ps(q[h * n + i + 1]);
      INFERCAST_UNROLL
      for (int b = 0; b < 2; ++b) {
        acc[h][b][0] = _mm512_fmadd_ps(q0, k[b][0], acc[h][b][0]);
        acc[h][b][1] = _mm512_fmadd_ps(q1, k[b][1], acc[h][b][1]);
      }
    }
  }
  if (i < n) {
    __m512 k[2];
    INFERCAST_UNROLL
    for (int b = 0; b < 2; ++b) {
      if constexpr (Ask) ask_for_key_rows(ahead[b], i, 1);
      k[b] = load16(keys[b] + i * kKeyBlock);
    }
    INFERCAST_UNROLL
    for (int h = 0; h < H; ++h) {
      const __m512 q0 = _mm512_set1_ps(q[h * n + i]);
      INFERCAST_UNROLL
      for (int b = 0; b < 2; ++b) acc[h][b][0] = _mm512_fmadd_ps(q0, k[b], acc[h][b][0]);
    }
  }
  INFERCAST_UNROLL
  for (int h = 0; h < H; ++h) {
    _mm512_storeu_ps(out + h * out_stride, _mm512_mul_ps(_mm512_add_ps(acc[h][0][0], acc[h][0][1]), scale));
    _mm512_mask_storeu_ps(out + h * out_stride + kKeyBlock, stored,
                          _mm512_mul_ps(_mm512_add_ps(acc[h][1][0], acc[h][1][1]), scale));
  }
}

// A run's blocks two at a time, four heads a pass (16 accumulators), the last odd block alone;
// the first pass over the heads asks for the blocks ahead.
template <class T>
void dot_keys(const T* const* blocks, const T* const* ahead, std::size_t count, const float* q, std::size_t heads,
              std::size_t n, float scale, float* out, std::size_t out_stride) {
  static_assert(kKeyBlock == 16);
  const __m512 vscale = _mm512_set1_ps(scale);
  const std::size_t blocks_in_run = (count + kKeyBlock - 1) / kKeyBlock;
  const auto pass = [&]<int H, bool Ask>(std::size_t h) {
    const float* qh = q + h * n;
    float* oh = out + h * out_stride;
    std::size_t b = 0;
    for (; b + 2 <= blocks_in_run; b += 2) {
      const T* const pair[2] = {blocks[b], blocks[b + 1]};
      const T* const asked[2] = {Ask ? ahead[b] : nullptr, Ask ? ahead[b + 1] : nullptr};
      dot_keys_pair_pass<T, H, Ask>(pair, tail_mask16(count - (b + 1) * kKeyBlock), asked, qh, n, vscale,
                                    oh + b * kKeyBlock, out_stride);
    }
    if (b < blocks_in_run) {
      dot_keys_pass<T, H, Ask>(blocks[b], tail_mask16(count - b * kKeyBlock), Ask ? ahead[b] : nullptr, qh, n, vscale,
                               oh + b * kKeyBlock, out_stride);
    }
  };
  bool asked = false;
  in_head_passes(heads, [&]<int H>(std::size_t h) {
    if (asked) {
      pass.template operator()<H, false>(h);
    } else {
      pass.template operator()<H, true>(h);
      asked = true;
    }
  });
}

// y_h += sum_j w_h[j] x (position j's row) for H heads over 16 x S columns from c0, over a run
// of blocks: each row chunk is loaded (and converted) once for H heads, and the S x H sums stay
// in registers across the run. With Ask (the pass that reads the blocks first), it asks for the
// blocks ahead as for_each_position does.
template <class T, int H, int S, bool Ask>
void axpy_blocks_pass(const float* w, std::size_t w_stride, const T* const* blocks, const T* const* ahead,
                      std::size_t count, std::size_t n, std::size_t c0, float* y) {
  __mmask16 mask[S];
  INFERCAST_UNROLL
  for (std::size_t s = 0; s < S; ++s) {
    const std::size_t c = c0 + 16 * s;
    mask[s] = c >= n ? 0 : tail_mask16(n - c);
  }
  __m512 acc[H][S];
  INFERCAST_UNROLL
  for (int h = 0; h < H; ++h) {
    INFERCAST_UNROLL
    for (std::size_t s = 0; s < S; ++s) acc[h][s] = _mm512_maskz_loadu_ps(mask[s], y + h * n + c0 + 16 * s);
  }
  for_each_position<T, Ask>(blocks, ahead, count, n, [&](const T* row, std::size_t j) {
    __m512 v[S];
    INFERCAST_UNROLL
    for (std::size_t s = 0; s < S; ++s) v[s] = load16(row + c0 + 16 * s, mask[s]);
    INFERCAST_UNROLL
    for (int h = 0; h < H; ++h) {
      const __m512 wj = _mm512_set1_ps(w[h * w_stride + j]);
      INFERCAST_UNROLL
      for (std::size_t s = 0; s < S; ++s) acc[h][s] = _mm512_fmadd_ps(wj, v[s], acc[h][s]);
    }
  });
  INFERCAST_UNROLL
  for (int h = 0; h < H; ++h) {
    INFERCAST_UNROLL
    for (std::size_t s = 0; s < S; ++s) _mm512_mask_storeu_ps(y + h * n + c0 + 16 * s, mask[s], acc[h][s]);
  }
}

template <class T>
void axpy_blocks(const float* w, std::size_t w_stride, const T* const* blocks, const T* const* ahead, std::size_t count,
                 std::size_t heads, std::size_t n, float* y) {
  // Eight heads over 32 columns where there are eight: each converted row chunk serves eight
  // FMAs instead of four, for twice the weight broadcasts; then the rest four heads at a time
  // over 64 columns. Both keep 16 accumulators. The first pass asks for the blocks ahead.
  bool asked = false;
  const auto pass = [&]<int H, int S>(std::size_t h, std::size_t c0) {
    if (asked) {
      axpy_blocks_pass<T, H, S, false>(w + h * w_stride, w_stride, blocks, ahead, count, n, c0, y + h * n);
    } else {
      axpy_blocks_pass<T, H, S, true>(w + h * w_stride, w_stride, blocks, ahead, count, n, c0, y + h * n);
      asked = true;
    }
  };
  std::size_t h = 0;
  for (; h + 8 <= heads; h += 8) {
    for (std::size_t c0 = 0; c0 < n; c0 += 32) pass.template operator()<8, 2>(h, c0);
  }
  for (std::size_t c0 = 0; c0 < n; c0 += 64) {
    in_head_passes(heads - h, [&]<int H>(std::size_t g) { pass.template operator()<H, 4>(h + g, c0); });
  }
}

// exp on sixteen floats: 2^k * p(r) with r = x - k ln 2 in [-ln2/2, ln2/2] and a degree-6
// polynomial (Cephes' coefficients): at most 1.3 ulp from exp over [-87, 0] (checked every 1e-4),
// the range a max-subtracted softmax feeds it.
inline __m512 exp16(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.3365F));
  const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504F)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693359375F), x);
  r = _mm512_fnmadd_ps(k, _mm512_set1_ps(-2.12194440e-4F), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4F);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3F));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3F));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2F));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1F));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1F));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0F)));
  return _mm512_scalef_ps(p, k);
}

// Whole vectors two at a time, with two maxima and two sums, and the tail once under a mask:
// each vector's exp is a chain of a dozen dependent operations, and a row is a few dozen
// vectors, so the loop must keep several chains in flight rather than one vector's mask and
// branch per step.
void softmax(float* x, std::size_t n) {
  if (n == 0) return;
  const std::size_t full = n / 16 * 16;
  const __mmask16 tail = tail_mask(n - full);
  const __m512 lowest = _mm512_set1_ps(-INFINITY);
  __m512 max0 = lowest;
  __m512 max1 = _mm512_mask_loadu_ps(lowest, tail, x + full);
  std::size_t i = 0;
  for (; i + 32 <= full; i += 32) {
    max0 = _mm512_max_ps(max0, _mm512_loadu_ps(x + i));
    max1 = _mm512_max_ps(max1, _mm512_loadu_ps(x + i + 16));
  }
  if (i < full) max0 = _mm512_max_ps(max0, _mm512_loadu_ps(x + i));
  const __m512 max = _mm512_set1_ps(_mm512_reduce_max_ps(_mm512_max_ps(max0, max1)));
  __m512 sum0 = _mm512_setzero_ps();
  __m512 sum1 = _mm512_setzero_ps();
  for (i = 0; i + 32 <= full; i += 32) {
    const __m512 e0 = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), max));
    const __m512 e1 = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i + 16), max));
    _mm512_storeu_ps(x + i, e0);
    _mm512_storeu_ps(x + i + 16, e1);
    sum0 = _mm512_add_ps(sum0, e0);
    sum1 = _mm512_add_ps(sum1, e1);
  }
  if (i < full) {
    const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), max));
    _mm512_storeu_ps(x + i, e);
    sum0 = _mm512_add_ps(sum0, e);
  }
  if (tail != 0) {
    const __m512 e = _mm512_maskz_mov_ps(tail, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, x + full), max)));
    _mm512_mask_storeu_ps(x + full, tail, e);
    sum1 = _mm512_add_ps(sum1, e);
  }
  const __m512 inv = _mm512_set1_ps(1.0F / _mm512_reduce_add_ps(_mm512_add_ps(sum0, sum1)));
  for (i = 0; i < full; i += 16) _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), inv));
  if (tail != 0) _mm512_mask_storeu_ps(x + full, tail, _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, x + full), inv));
}

// silu(g) = g / (1 + e^-g), written with e = exp(-|g|) so the exponential stays in exp16's range:
// g / (1 + e) for g >= 0, g e / (1 + e) below (there e^-g = 1/e). Beyond |g| = 87.3, where exp16
// clamps, e is taken as 0: the exact silu of such a negative g is below 1e-35 in magnitude.
void swiglu(float* gate, const float* up, std::size_t n) {
  for (std::size_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask16(n - i);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
    const __m512 a = _mm512_abs_ps(g);
    const __m512 e = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(a, _mm512_set1_ps(87.3F), _CMP_LE_OQ),
                                         exp16(_mm512_sub_ps(_mm512_setzero_ps(), a)));
    const __m512 num = _mm512_mask_mul_ps(g, _mm512_cmp_ps_mask(g, _mm512_setzero_ps(), _CMP_LT_OQ), g, e);
    const __m512 silu = _mm512_div_ps(num, _mm512_add_ps(_mm512_set1_ps(1.0F), e));
    _mm512_mask_storeu_ps(gate + i, m, _mm512_mul_ps(silu, _mm512_maskz_loadu_ps(m, up + i)));
  }
}

// vcvtps2ph rounds to nearest even, as fp32_to_fp16 does; the tail goes through a masked store.
void to_f16(const float* x, std::uint16_t* out, std::size_t n) {
  for (std::size_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask16(n - i);
    const __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_mask_storeu_epi16(out + i, m, h);
  }
}

// Two passes, the largest value and then its first index: the logits of a step are in L2.
// vmaxps returns its second operand where either is NaN, so max(x, m) keeps m past a NaN x.
std::size_t argmax(const float* x, std::size_t n) {
  if (std::isnan(x[0])) return 0;
  __m512 m = _mm512_set1_ps(x[0]);
  for (std::size_t i = 0; i < n; i += 16) {
    const __mmask16 k = tail_mask16(n - i);
    m = _mm512_mask_max_ps(m, k, _mm512_maskz_loadu_ps(k, x + i), m);
  }
  const __m512 best = _mm512_set1_ps(_mm512_reduce_max_ps(m));
  for (std::size_t i = 0; i < n; i += 16) {
    const __mmask16 k = tail_mask16(n - i);
    const auto equal = static_cast<unsigned>(_mm512_mask_cmp_ps_mask(k, _mm512_maskz_loadu_ps(k, x + i), best, _CMP_EQ_OQ));
    if (equal != 0) return i + static_cast<std::size_t>(std::countr_zero(equal));
  }
  return 0;  // not reached: the largest value is one of x's
}

const VecOps kAvx512{"avx512", dot<float>, dot<std::uint16_t>, axpy<float>, axpy<std::uint16_t>,
    dot_keys<float>, dot_keys<std::uint16_t>, axpy_blocks<float>, axpy_blocks<std::uint16_t>,
    softmax, swiglu, to_f16, argmax};

}  // namespace

const VecOps& avx512_vec_ops() { return kAvx512; }

}  // namespace infercast
