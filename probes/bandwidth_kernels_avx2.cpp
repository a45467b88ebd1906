// AVX2 streaming kernels (compiled with -mavx2 -mfma; see cmake/Isa.cmake).
#include <immintrin.h>

#include "probes/bandwidth_kernels.h"
#include "probes/cpu_features.h"

namespace infercast::avx2 {
namespace {
using Vec = __m256i;
using VecF = __m256;
constexpr std::size_t kLanes = 8;
inline Vec zero() { return _mm256_setzero_si256(); }
inline Vec load(const std::uint32_t* p) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(p)); }
inline void store(std::uint32_t* p, Vec v) { _mm256_store_si256(reinterpret_cast<__m256i*>(p), v); }
inline void stream(std::uint32_t* p, Vec v) { _mm256_stream_si256(reinterpret_cast<__m256i*>(p), v); }
inline Vec add(Vec a, Vec b) { return _mm256_add_epi32(a, b); }
inline Vec splat_u32(std::uint32_t x) { return _mm256_set1_epi32(static_cast<int>(x)); }
inline std::uint32_t reduce_add(Vec v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return static_cast<std::uint32_t>(_mm_cvtsi128_si32(s));
}
inline VecF splat_f32(float x) { return _mm256_set1_ps(x); }
inline VecF loadf(const float* p) { return _mm256_load_ps(p); }
inline void storef(float* p, VecF v) { _mm256_store_ps(p, v); }
inline VecF fmadd(VecF a, VecF b, VecF c) { return _mm256_fmadd_ps(a, b, c); }
}  // namespace
}  // namespace infercast::avx2

#define NS avx2
#include "probes/bandwidth_kernels_simd.inc"
#undef NS

namespace infercast {
const StreamKernels& stream_kernels_avx2() {
  static const StreamKernels k{IsaLevel::avx2, avx2::read, avx2::write, avx2::write_nt,
                               avx2::copy, avx2::triad};
  return k;
}
}  // namespace infercast
