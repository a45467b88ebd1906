// AVX2 + FMA + F16C vector primitives (see vec.h). Tails run in scalar code, or under
// vmaskmov masks where a loop must treat every element alike (softmax, SwiGLU).
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>

#include "kernels/simd_macros.h"
#include "kernels/vec.h"

namespace infercast {
namespace {

float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Eight values as floats, from F32 or F16 storage.
__m256 load8(const float* p) { return _mm256_loadu_ps(p); }
__m256 load8(const std::uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
float scalar(float v) { return v; }
float scalar(std::uint16_t v) { return _cvtsh_ss(v); }

template <class T>
float dot(const T* a, const float* b, std::size_t n) {
  __m256 acc0 = _mm256_setzero_ps();
  __m256 acc1 = _mm256_setzero_ps();
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(load8(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(load8(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(load8(a + i), _mm256_loadu_ps(b + i), acc0);
  float s = hsum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) s += scalar(a[i]) * b[i];
  return s;
}

template <class T>
void axpy(float a, const T* x, float* y, std::size_t n) {
  const __m256 va = _mm256_set1_ps(a);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, load8(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += a * scalar(x[i]);
}

// Lanes [0, left) set, for vmaskmov.
inline __m256i tail_mask8(std::size_t left) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(std::min<std::size_t>(left, 8))), lane);
}

// As vec_avx512.cpp's dot_keys_pass, on two 8-wide halves of the 16-key block: H heads, one
// chain per head and half (eight FMAs in flight at H = 4).
template <class T, int H>
INFERCAST_INLINE void dot_keys_pass(const T* keys, std::size_t count, const float* q, std::size_t n, __m256 scale,
                                    float* out, std::size_t out_stride) {
  __m256 acc[H][2];
  INFERCAST_UNROLL
  for (int h = 0; h < H; ++h) acc[h][0] = acc[h][1] = _mm256_setzero_ps();
  for (std::size_t i = 0; i < n; ++i) {
    const __m256 k0 = load8(keys + i * kKeyBlock);
    const __m256 k1 = load8(keys + i * kKeyBlock + 8);
    INFERCAST_UNROLL
    for (int h = 0; h < H; ++h) {
      const __m256 qi = _mm256_set1_ps(q[h * n + i]);
      acc[h][0] = _mm256_fmadd_ps(qi, k0, acc[h][0]);
      acc[h][1] = _mm256_fmadd_ps(qi, k1, acc[h][1]);
    }
  }
  INFERCAST_UNROLL
  for (int h = 0; h < H; ++h) {
    alignas(32) float sums[16];
    _mm256_store_ps(sums, _mm256_mul_ps(acc[h][0], scale));
    _mm256_store_ps(sums + 8, _mm256_mul_ps(acc[h][1], scale));
    std::copy(sums, sums + count, out + h * out_stride);
  }
}

// A run's blocks one at a time, each block ahead asked for whole before the block is read.
template <class T>
void dot_keys(const T* const* blocks, const T* const* ahead, std::size_t count, const float* q, std::size_t heads,
              std::size_t n, float scale, float* out, std::size_t out_stride) {
  static_assert(kKeyBlock == 16);
  const __m256 vscale = _mm256_set1_ps(scale);
  for (std::size_t j0 = 0, b = 0; j0 < count; j0 += kKeyBlock, ++b) {
    ask_for_key_rows(ahead[b], 0, n);
    const std::size_t in_block = std::min(kKeyBlock, count - j0);
    in_head_passes(heads, [&]<int H>(std::size_t h) {
      dot_keys_pass<T, H>(blocks[b], in_block, q + h * n, n, vscale, out + h * out_stride + j0, out_stride);
    });
  }
}

// y_h += sum_j w_h[j] x (position j's row) for H heads over 32 columns from c0, over a run of
// blocks: each row chunk is loaded (and converted) once for H heads, and the 4 x H sums stay in
// registers across the run. With Ask (the pass that reads the blocks first), it asks for the
// blocks ahead as for_each_position does.
template <class T, int H, bool Ask>
void axpy_blocks_pass(const float* w, std::size_t w_stride, const T* const* blocks, const T* const* ahead,
                      std::size_t count, std::size_t n, std::size_t c0, float* y) {
  __m256 acc[H][4];
  INFERCAST_UNROLL
  for (int h = 0; h < H; ++h) {
    INFERCAST_UNROLL
    for (std::size_t s = 0; s < 4; ++s) acc[h][s] = _mm256_loadu_ps(y + h * n + c0 + 8 * s);
  }
  for_each_position<T, Ask>(blocks, ahead, count, n, [&](const T* row, std::size_t j) {
    __m256 v[4];
    INFERCAST_UNROLL
    for (std::size_t s = 0; s < 4; ++s) v[s] = load8(row + c0 + 8 * s);
    INFERCAST_UNROLL
    for (int h = 0; h < H; ++h) {
      const __m256 wj = _mm256_set1_ps(w[h * w_stride + j]);
      INFERCAST_UNROLL
      for (std::size_t s = 0; s < 4; ++s) acc[h][s] = _mm256_fmadd_ps(wj, v[s], acc[h][s]);
    }
  });
  INFERCAST_UNROLL
  for (int h = 0; h < H; ++h) {
    INFERCAST_UNROLL
    for (std::size_t s = 0; s < 4; ++s) _mm256_storeu_ps(y + h * n + c0 + 8 * s, acc[h][s]);
  }
}

template <class T>
void axpy_blocks(const float* w, std::size_t w_stride, const T* const* blocks, const T* const* ahead, std::size_t count,
                 std::size_t heads, std::size_t n, float* y) {
  if (n % 32 != 0) {
    axpy_blocks_by_rows<T, axpy<T>>(w, w_stride, blocks, ahead, count, heads, n, y);
    return;
  }
  bool asked = false;
  const auto pass = [&]<int H>(std::size_t h, std::size_t c0) {
    if (asked) {
      axpy_blocks_pass<T, H, false>(w + h * w_stride, w_stride, blocks, ahead, count, n, c0, y + h * n);
    } else {
      axpy_blocks_pass<T, H, true>(w + h * w_stride, w_stride, blocks, ahead, count, n, c0, y + h * n);
      asked = true;
    }
  };
  for (std::size_t c0 = 0; c0 < n; c0 += 32) {
    std::size_t h = 0;
    for (; h + 2 <= heads; h += 2) pass.template operator()<2>(h, c0);
    if (h < heads) pass.template operator()<1>(h, c0);
  }
}

// exp on eight floats, as vec_avx512.cpp's exp16 (same reduction, same degree-6 polynomial,
// at most 1.3 ulp over [-87, 0]); 2^k is built in the exponent field, k in [-126, 0] there.
inline __m256 exp8(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.3365F));
  const __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504F)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693359375F), x);
  r = _mm256_fnmadd_ps(k, _mm256_set1_ps(-2.12194440e-4F), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4F);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3F));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3F));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2F));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1F));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1F));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0F)));
  const __m256i two_k = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(two_k));
}

float hmax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// As vec_avx512.cpp's softmax: whole vectors two at a time, with two maxima and two sums, and
// the tail once under a mask. The loop with a vmaskmov load and store per vector and one sum
// took 1.25-1.65x the time (eight rows of 48-2048, in one process, Zen 5).
void softmax(float* x, std::size_t n) {
  if (n == 0) return;
  const std::size_t full = n / 8 * 8;
  const __m256i tail = tail_mask8(n - full);
  const __m256 tail_lanes = _mm256_castsi256_ps(tail);
  const __m256 lowest = _mm256_set1_ps(-INFINITY);
  __m256 max0 = lowest;
  __m256 max1 = _mm256_blendv_ps(lowest, _mm256_maskload_ps(x + full, tail), tail_lanes);
  std::size_t i = 0;
  for (; i + 16 <= full; i += 16) {
    max0 = _mm256_max_ps(max0, _mm256_loadu_ps(x + i));
    max1 = _mm256_max_ps(max1, _mm256_loadu_ps(x + i + 8));
  }
  if (i < full) max0 = _mm256_max_ps(max0, _mm256_loadu_ps(x + i));
  const __m256 max = _mm256_set1_ps(hmax(_mm256_max_ps(max0, max1)));
  __m256 sum0 = _mm256_setzero_ps();
  __m256 sum1 = _mm256_setzero_ps();
  for (i = 0; i + 16 <= full; i += 16) {
    const __m256 e0 = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), max));
    const __m256 e1 = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), max));
    _mm256_storeu_ps(x + i, e0);
    _mm256_storeu_ps(x + i + 8, e1);
    sum0 = _mm256_add_ps(sum0, e0);
    sum1 = _mm256_add_ps(sum1, e1);
  }
  if (i < full) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), max));
    _mm256_storeu_ps(x + i, e);
    sum0 = _mm256_add_ps(sum0, e);
  }
  if (full < n) {
    const __m256 e = _mm256_and_ps(exp8(_mm256_sub_ps(_mm256_maskload_ps(x + full, tail), max)), tail_lanes);
    _mm256_maskstore_ps(x + full, tail, e);
    sum1 = _mm256_add_ps(sum1, e);
  }
  const __m256 inv = _mm256_set1_ps(1.0F / hsum(_mm256_add_ps(sum0, sum1)));
  for (i = 0; i < full; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
  if (full < n) _mm256_maskstore_ps(x + full, tail, _mm256_mul_ps(_mm256_maskload_ps(x + full, tail), inv));
}

// silu(g) = g / (1 + e^-g) with e = exp(-|g|), as vec_avx512.cpp's swiglu: g / (1 + e) for
// g >= 0, g e / (1 + e) below, e taken as 0 beyond |g| = 87.3.
void swiglu(float* gate, const float* up, std::size_t n) {
  for (std::size_t i = 0; i < n; i += 8) {
    const __m256i m = tail_mask8(n - i);
    const __m256 g = _mm256_maskload_ps(gate + i, m);
    const __m256 a = _mm256_andnot_ps(_mm256_set1_ps(-0.0F), g);
    const __m256 e = _mm256_and_ps(_mm256_cmp_ps(a, _mm256_set1_ps(87.3F), _CMP_LE_OQ), exp8(_mm256_sub_ps(_mm256_setzero_ps(), a)));
    const __m256 num = _mm256_blendv_ps(g, _mm256_mul_ps(g, e), _mm256_cmp_ps(g, _mm256_setzero_ps(), _CMP_LT_OQ));
    const __m256 silu = _mm256_div_ps(num, _mm256_add_ps(_mm256_set1_ps(1.0F), e));
    _mm256_maskstore_ps(gate + i, m, _mm256_mul_ps(silu, _mm256_maskload_ps(up + i, m)));
  }
}

// vcvtps2ph (F16C, part of this level) rounds to nearest even, as fp32_to_fp16 does.
void to_f16(const float* x, std::uint16_t* out, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  to_f16_reference(x + i, out + i, n - i);
}

// As vec_avx512.cpp's argmax; the last n % 8 values go through scalar code.
std::size_t argmax(const float* x, std::size_t n) {
  if (std::isnan(x[0])) return 0;
  __m256 m = _mm256_set1_ps(x[0]);
  const std::size_t whole = n / 8 * 8;
  for (std::size_t i = 0; i < whole; i += 8) m = _mm256_max_ps(_mm256_loadu_ps(x + i), m);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, m);
  float largest = x[0];
  for (float v : lanes) largest = v > largest ? v : largest;
  for (std::size_t i = whole; i < n; ++i) largest = x[i] > largest ? x[i] : largest;
  const __m256 best = _mm256_set1_ps(largest);
  for (std::size_t i = 0; i < whole; i += 8) {
    const auto equal = static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), best, _CMP_EQ_OQ)));
    if (equal != 0) return i + static_cast<std::size_t>(std::countr_zero(equal));
  }
  for (std::size_t i = whole; i < n; ++i) {
    if (x[i] == largest) return i;
  }
  return 0;  // not reached: the largest value is one of x's
}

const VecOps kAvx2{"avx2", dot<float>, dot<std::uint16_t>, axpy<float>, axpy<std::uint16_t>,
    dot_keys<float>, dot_keys<std::uint16_t>, axpy_blocks<float>, axpy_blocks<std::uint16_t>,
    softmax, swiglu, to_f16, argmax};

}  // namespace

const VecOps& avx2_vec_ops() { return kAvx2; }

}  // namespace infercast
