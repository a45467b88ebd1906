// AVX-512 streaming kernels (compiled with -mavx512f and friends; see cmake/Isa.cmake).
#include <immintrin.h>

#include "probes/bandwidth_kernels.h"
#include "probes/cpu_features.h"

namespace infercast::avx512 {
namespace {
using Vec = __m512i;
using VecF = __m512;
constexpr std::size_t kLanes = 16;
inline Vec zero() { return _mm512_setzero_si512(); }
inline Vec load(const std::uint32_t* p) { return _mm512_load_si512(p); }
inline void store(std::uint32_t* p, Vec v) { _mm512_store_si512(p, v); }
inline void stream(std::uint32_t* p, Vec v) { _mm512_stream_si512(reinterpret_cast<__m512i*>(p), v); }
inline Vec add(Vec a, Vec b) { return _mm512_add_epi32(a, b); }
inline Vec splat_u32(std::uint32_t x) { return _mm512_set1_epi32(static_cast<int>(x)); }
// Summed as unsigned lanes: GCC's _mm512_reduce_add_epi32 adds signed ints, which overflow
// (undefined behaviour) for the wrapping checksums the read kernel produces.
inline std::uint32_t reduce_add(Vec v) {
  alignas(64) std::uint32_t lanes[16];
  _mm512_store_si512(lanes, v);
  std::uint32_t sum = 0;
  for (std::uint32_t x : lanes) sum += x;
  return sum;
}
inline VecF splat_f32(float x) { return _mm512_set1_ps(x); }
inline VecF loadf(const float* p) { return _mm512_load_ps(p); }
inline void storef(float* p, VecF v) { _mm512_store_ps(p, v); }
inline VecF fmadd(VecF a, VecF b, VecF c) { return _mm512_fmadd_ps(a, b, c); }
}  // namespace
}  // namespace infercast::avx512

#define NS avx512
#include "probes/bandwidth_kernels_simd.inc"
#undef NS

namespace infercast {
const StreamKernels& stream_kernels_avx512() {
  static const StreamKernels k{IsaLevel::avx512, avx512::read, avx512::write, avx512::write_nt,
                               avx512::copy, avx512::triad};
  return k;
}
}  // namespace infercast
