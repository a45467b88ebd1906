// AVX-512 vector primitives (see vec.h). Tails use masked loads, so no scalar remainder.
#include <immintrin.h>

#include "kernels/vec.h"

namespace infercast {
namespace {

__mmask16 tail_mask(std::size_t left) { return static_cast<__mmask16>((1U << left) - 1); }

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
    const __mmask16 m = n - i >= 16 ? 0xFFFF : tail_mask(n - i);
    acc0 = _mm512_fmadd_ps(load16(a + i, m), _mm512_maskz_loadu_ps(m, b + i), acc0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

template <class T>
void axpy(float a, const T* x, float* y, std::size_t n) {
  const __m512 va = _mm512_set1_ps(a);
  for (std::size_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? 0xFFFF : tail_mask(n - i);
    _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(va, load16(x + i, m), _mm512_maskz_loadu_ps(m, y + i)));
  }
}

const VecOps kAvx512{"avx512", dot<float>, dot<std::uint16_t>, axpy<float>, axpy<std::uint16_t>,
    dot_rows<float, dot<float>>, dot_rows<std::uint16_t, dot<std::uint16_t>>,
    axpy_rows<float, axpy<float>>, axpy_rows<std::uint16_t, axpy<std::uint16_t>>};

}  // namespace

const VecOps& avx512_vec_ops() { return kAvx512; }

}  // namespace infercast
