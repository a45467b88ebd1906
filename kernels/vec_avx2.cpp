// AVX2 + FMA + F16C vector primitives (see vec.h). Tails run in scalar code.
#include <immintrin.h>

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

const VecOps kAvx2{"avx2", dot<float>, dot<std::uint16_t>, axpy<float>, axpy<std::uint16_t>,
    dot_rows<float, dot<float>>, dot_rows<std::uint16_t, dot<std::uint16_t>>,
    axpy_rows<float, axpy<float>>, axpy_rows<std::uint16_t, axpy<std::uint16_t>>, softmax_reference,
    swiglu_reference};

}  // namespace

const VecOps& avx2_vec_ops() { return kAvx2; }

}  // namespace infercast
