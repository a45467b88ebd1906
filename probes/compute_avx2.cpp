// AVX2 compute-peak kernels (compiled with -mavx2 -mfma -mavxvnni).
#include <immintrin.h>

#include <array>

#include "probes/compute_kernels.h"

namespace infercast::kernels_avx2 {
namespace {
// Values come through a volatile so the compiler cannot fold the arithmetic.
volatile float g_one = 1.0F;
volatile float g_step = 0x1p-20F;
volatile int g_ones = 0x01010101;
}  // namespace

bool fp32_fma(std::uint64_t iterations) {
  const __m256 m = _mm256_set1_ps(g_one), a = _mm256_set1_ps(g_step);
  __m256 acc[12];
  for (auto& x : acc) x = _mm256_setzero_ps();
  for (std::uint64_t i = 0; i < iterations; ++i) {
    for (auto& x : acc) x = _mm256_fmadd_ps(x, m, a);
  }
  // Each lane added step once per iteration: exactly iterations * 2^-20 while below 8.
  const float expected = static_cast<float>(iterations) * 0x1p-20F;
  bool ok = true;
  for (const auto& x : acc) {
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, x);
    for (float v : lanes) ok = ok && v == expected;
  }
  return ok;
}

// The AVX2 INT8 dot product without VNNI, as the block-format kernels run it: vpmaddubsw
// (32 unsigned x signed byte products summed in pairs) then a 16-bit accumulate. In assembly,
// because GCC hoists a product of loop-invariant operands out of the loop and leaves only the
// adds; four temporaries rotate so products never wait for each other.
bool int8_avx2(std::uint64_t iterations) {
  const __m256i ones = _mm256_set1_epi32(g_ones);
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0, a8 = a0,
          a9 = a0;
  __m256i t0, t1, t2, t3;
  for (std::uint64_t i = 0; i < iterations; ++i) {
    __asm__ volatile(
        "vpmaddubsw %[o], %[o], %[t0]\n\t"
        "vpmaddubsw %[o], %[o], %[t1]\n\t"
        "vpmaddubsw %[o], %[o], %[t2]\n\t"
        "vpmaddubsw %[o], %[o], %[t3]\n\t"
        "vpaddw %[t0], %[a0], %[a0]\n\t"
        "vpaddw %[t1], %[a1], %[a1]\n\t"
        "vpaddw %[t2], %[a2], %[a2]\n\t"
        "vpaddw %[t3], %[a3], %[a3]\n\t"
        "vpmaddubsw %[o], %[o], %[t0]\n\t"
        "vpmaddubsw %[o], %[o], %[t1]\n\t"
        "vpmaddubsw %[o], %[o], %[t2]\n\t"
        "vpmaddubsw %[o], %[o], %[t3]\n\t"
        "vpaddw %[t0], %[a4], %[a4]\n\t"
        "vpaddw %[t1], %[a5], %[a5]\n\t"
        "vpaddw %[t2], %[a6], %[a6]\n\t"
        "vpaddw %[t3], %[a7], %[a7]\n\t"
        "vpmaddubsw %[o], %[o], %[t0]\n\t"
        "vpmaddubsw %[o], %[o], %[t1]\n\t"
        "vpaddw %[t0], %[a8], %[a8]\n\t"
        "vpaddw %[t1], %[a9], %[a9]\n\t"
        : [a0] "+x"(a0), [a1] "+x"(a1), [a2] "+x"(a2), [a3] "+x"(a3), [a4] "+x"(a4), [a5] "+x"(a5),
          [a6] "+x"(a6), [a7] "+x"(a7), [a8] "+x"(a8), [a9] "+x"(a9), [t0] "=&x"(t0), [t1] "=&x"(t1),
          [t2] "=&x"(t2), [t3] "=&x"(t3)
        : [o] "x"(ones));
  }
  // Each 16-bit lane gained 2 per iteration, modulo 2^16.
  const auto expected = static_cast<std::uint16_t>(iterations * 2);
  bool ok = true;
  for (const __m256i& x : {a0, a1, a2, a3, a4, a5, a6, a7, a8, a9}) {
    alignas(32) std::uint16_t lanes[16];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), x);
    for (std::uint16_t v : lanes) ok = ok && v == expected;
  }
  return ok;
}

bool int8_avx_vnni(std::uint64_t iterations) {
  const __m256i ones = _mm256_set1_epi32(g_ones);
  __m256i acc[12];
  for (auto& x : acc) x = _mm256_setzero_si256();
  for (std::uint64_t i = 0; i < iterations; ++i) {
    for (auto& x : acc) x = _mm256_dpbusd_avx_epi32(x, ones, ones);
  }
  const auto expected = static_cast<std::uint32_t>(iterations * 4);
  bool ok = true;
  for (const auto& x : acc) {
    alignas(32) std::uint32_t lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), x);
    for (std::uint32_t v : lanes) ok = ok && v == expected;
  }
  return ok;
}

}  // namespace infercast::kernels_avx2
