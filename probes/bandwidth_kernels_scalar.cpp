// Portable reference kernels: plain loops for baseline x86-64, the oracle for the SIMD ones.
#include <emmintrin.h>

#include "probes/bandwidth_kernels.h"

namespace infercast {
namespace {

inline void compiler_barrier() { __asm__ volatile("" ::: "memory"); }

std::uint32_t read_scalar(const std::uint32_t* a, std::size_t n, std::size_t passes,
                          unsigned /*streams*/) {
  std::uint32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  for (std::size_t p = 0; p < passes; ++p) {
    for (std::size_t i = 0; i < n; i += 4) {
      s0 += a[i];
      s1 += a[i + 1];
      s2 += a[i + 2];
      s3 += a[i + 3];
    }
    compiler_barrier();
  }
  return s0 + s1 + s2 + s3;
}

void write_scalar(std::uint32_t* a, std::size_t n, std::uint32_t value, std::size_t passes) {
  for (std::size_t p = 0; p < passes; ++p) {
    for (std::size_t i = 0; i < n; ++i) a[i] = value;
    compiler_barrier();
  }
}

void write_nt_scalar(std::uint32_t* a, std::size_t n, std::uint32_t value, std::size_t passes) {
  // movnti is part of baseline x86-64 (SSE2), so even the reference path bypasses the cache.
  const auto v = static_cast<int>(value);
  for (std::size_t p = 0; p < passes; ++p) {
    for (std::size_t i = 0; i < n; ++i) _mm_stream_si32(reinterpret_cast<int*>(a + i), v);
    _mm_sfence();
    compiler_barrier();
  }
}

void copy_scalar(std::uint32_t* dst, const std::uint32_t* src, std::size_t n,
                 std::size_t passes) {
  for (std::size_t p = 0; p < passes; ++p) {
    for (std::size_t i = 0; i < n; ++i) dst[i] = src[i];
    compiler_barrier();
  }
}

void triad_scalar(float* a, const float* b, const float* c, float s, std::size_t n,
                  std::size_t passes) {
  for (std::size_t p = 0; p < passes; ++p) {
    for (std::size_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
    compiler_barrier();
  }
}

}  // namespace

const StreamKernels& stream_kernels_scalar() {
  static const StreamKernels k{IsaLevel::scalar, read_scalar, write_scalar, write_nt_scalar,
                               copy_scalar, triad_scalar};
  return k;
}

}  // namespace infercast
