// AVX-512 vector primitives (see vec.h). Tails use masked loads, so no scalar remainder.
#include <immintrin.h>

#include <algorithm>
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

// Sixteen vectors of partial sums into one vector of their sums: element i = sum of v[i]. Three
// rounds of shuffles and adds, 45 instructions for 16 sums where 16 horizontal reductions take
// about 150.
inline __m512 sum16(const __m512 (&v)[16]) {
  __m512 x[8];
  for (int i = 0; i < 8; ++i) x[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  __m512 y[4];
  for (int i = 0; i < 4; ++i) {
    y[i] = _mm512_add_ps(_mm512_shuffle_ps(x[2 * i], x[2 * i + 1], 0x44), _mm512_shuffle_ps(x[2 * i], x[2 * i + 1], 0xEE));
  }
  const __m512 u0 = _mm512_add_ps(_mm512_shuffle_f32x4(y[0], y[1], 0x88), _mm512_shuffle_f32x4(y[0], y[1], 0xDD));
  const __m512 u1 = _mm512_add_ps(_mm512_shuffle_f32x4(y[2], y[3], 0x88), _mm512_shuffle_f32x4(y[2], y[3], 0xDD));
  return _mm512_add_ps(_mm512_shuffle_f32x4(u0, u1, 0x88), _mm512_shuffle_f32x4(u0, u1, 0xDD));
}

constexpr std::size_t kMaxBlockN = 256;  // head sizes up to this use the converted-block path

// Scores of several query heads against up to 16 keys at a time. The keys are converted to F32
// once into a block every head then reads; per head, the sixteen dot products are summed
// together by sum16 instead of one horizontal reduction each.
template <class T>
void dot_rows_heads(const T* rows, std::size_t stride, std::size_t count, const float* q, std::size_t heads,
                    std::size_t n, float scale, float* out, std::size_t out_stride) {
  if (n > kMaxBlockN) {
    dot_rows<T, dot<T>>(rows, stride, count, q, heads, n, scale, out, out_stride);
    return;
  }
  const std::size_t chunks = (n + 15) / 16;
  const __mmask16 last = n % 16 == 0 ? 0xFFFF : tail_mask(n % 16);
  alignas(64) float block[16 * kMaxBlockN];
  const __m512 vscale = _mm512_set1_ps(scale);
  for (std::size_t j0 = 0; j0 < count; j0 += 16) {
    const std::size_t m = std::min<std::size_t>(16, count - j0);
    for (std::size_t r = 0; r < 16; ++r) {
      for (std::size_t c = 0; c < chunks; ++c) {
        const __mmask16 mask = c + 1 == chunks ? last : 0xFFFF;
        const __m512 v = r < m ? load16(rows + (j0 + r) * stride + 16 * c, mask) : _mm512_setzero_ps();
        _mm512_store_ps(block + (r * chunks + c) * 16, v);
      }
    }
    for (std::size_t h = 0; h < heads; ++h) {
      const float* qh = q + h * n;
      __m512 acc[16];
      INFERCAST_UNROLL
      for (auto& a : acc) a = _mm512_setzero_ps();
      for (std::size_t c = 0; c < chunks; ++c) {
        const __m512 qv = _mm512_maskz_loadu_ps(c + 1 == chunks ? last : 0xFFFF, qh + 16 * c);
        INFERCAST_UNROLL
        for (std::size_t r = 0; r < 16; ++r) acc[r] = _mm512_fmadd_ps(_mm512_load_ps(block + (r * chunks + c) * 16), qv, acc[r]);
      }
      _mm512_mask_storeu_ps(out + h * out_stride + j0, tail_mask16(m), _mm512_mul_ps(sum16(acc), vscale));
    }
  }
}

// y_h += sum_j w_h[j] * row j for H heads over 64 columns from c0: each row chunk is loaded (and
// converted) once for H heads, the 4 x H accumulators stay in registers across the rows.
template <class T, int H>
void axpy_pass(const float* w, std::size_t w_stride, const T* rows, std::size_t stride, std::size_t count,
               std::size_t n, std::size_t c0, float* y) {
  __mmask16 mask[4];
  INFERCAST_UNROLL
  for (std::size_t s = 0; s < 4; ++s) {
    const std::size_t c = c0 + 16 * s;
    mask[s] = c >= n ? 0 : tail_mask16(n - c);
  }
  __m512 acc[H][4];
  INFERCAST_UNROLL
  for (int h = 0; h < H; ++h) {
    INFERCAST_UNROLL
    for (std::size_t s = 0; s < 4; ++s) acc[h][s] = _mm512_maskz_loadu_ps(mask[s], y + h * n + c0 + 16 * s);
  }
  for (std::size_t j = 0; j < count; ++j) {
    __m512 v[4];
    INFERCAST_UNROLL
    for (std::size_t s = 0; s < 4; ++s) v[s] = load16(rows + j * stride + c0 + 16 * s, mask[s]);
    INFERCAST_UNROLL
    for (int h = 0; h < H; ++h) {
      const __m512 wj = _mm512_set1_ps(w[h * w_stride + j]);
      INFERCAST_UNROLL
      for (std::size_t s = 0; s < 4; ++s) acc[h][s] = _mm512_fmadd_ps(wj, v[s], acc[h][s]);
    }
  }
  INFERCAST_UNROLL
  for (int h = 0; h < H; ++h) {
    INFERCAST_UNROLL
    for (std::size_t s = 0; s < 4; ++s) _mm512_mask_storeu_ps(y + h * n + c0 + 16 * s, mask[s], acc[h][s]);
  }
}

template <class T>
void axpy_rows_heads(const float* w, std::size_t w_stride, const T* rows, std::size_t stride, std::size_t count,
                     std::size_t heads, std::size_t n, float* y) {
  for (std::size_t c0 = 0; c0 < n; c0 += 64) {
    std::size_t h = 0;
    for (; h + 4 <= heads; h += 4) axpy_pass<T, 4>(w + h * w_stride, w_stride, rows, stride, count, n, c0, y + h * n);
    switch (heads - h) {
      case 3: axpy_pass<T, 3>(w + h * w_stride, w_stride, rows, stride, count, n, c0, y + h * n); break;
      case 2: axpy_pass<T, 2>(w + h * w_stride, w_stride, rows, stride, count, n, c0, y + h * n); break;
      case 1: axpy_pass<T, 1>(w + h * w_stride, w_stride, rows, stride, count, n, c0, y + h * n); break;
      default: break;
    }
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

void softmax(float* x, std::size_t n) {
  if (n == 0) return;
  __m512 vmax = _mm512_set1_ps(-INFINITY);
  for (std::size_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask16(n - i);
    vmax = _mm512_max_ps(vmax, _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), m, x + i));
  }
  const __m512 max = _mm512_set1_ps(_mm512_reduce_max_ps(vmax));
  __m512 sum = _mm512_setzero_ps();
  for (std::size_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask16(n - i);
    const __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), max));
    _mm512_mask_storeu_ps(x + i, m, e);
    sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(m, e));
  }
  const __m512 inv = _mm512_set1_ps(1.0F / _mm512_reduce_add_ps(sum));
  for (std::size_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask16(n - i);
    _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), inv));
  }
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

const VecOps kAvx512{"avx512", dot<float>, dot<std::uint16_t>, axpy<float>, axpy<std::uint16_t>,
    dot_rows_heads<float>, dot_rows_heads<std::uint16_t>, axpy_rows_heads<float>, axpy_rows_heads<std::uint16_t>,
    softmax, swiglu};

}  // namespace

const VecOps& avx512_vec_ops() { return kAvx512; }

}  // namespace infercast
