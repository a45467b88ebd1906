#pragma once
// IEEE binary16 and bfloat16 conversions in portable code. The reference quantizers and every
// scalar path use these, so the bytes a quantizer writes never depend on whether the build
// machine has F16C; SIMD paths use the hardware instructions, which round the same way
// (round to nearest, ties to even).
//
// Internal linkage on purpose: the ISA-flagged kernel files include this too, and with external
// linkage an out-of-line copy compiled there (say, with AVX-512 encodings) could be the one the
// linker keeps for the baseline code. `static` gives each file its own.
#include <bit>
#include <cstdint>

namespace infercast {

static inline float fp16_to_fp32(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000U) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1FU;
  std::uint32_t mantissa = h & 0x3FFU;
  if (exponent == 0x1F) return std::bit_cast<float>(sign | 0x7F800000U | (mantissa << 13));
  if (exponent != 0) return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
  if (mantissa == 0) return std::bit_cast<float>(sign);
  // Subnormal: normalise the mantissa into an fp32 exponent.
  int shift = 0;
  while ((mantissa & 0x400U) == 0) {
    mantissa <<= 1;
    ++shift;
  }
  mantissa &= 0x3FFU;
  return std::bit_cast<float>(sign | (static_cast<std::uint32_t>(113 - shift) << 23) | (mantissa << 13));
}

static inline std::uint16_t fp32_to_fp16(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (x >> 16) & 0x8000U;
  const std::uint32_t abs = x & 0x7FFFFFFFU;
  if (abs > 0x7F800000U) return static_cast<std::uint16_t>(sign | 0x7E00U | ((abs >> 13) & 0x3FFU));  // NaN
  if (abs >= 0x477FF000U) return static_cast<std::uint16_t>(sign | 0x7C00U);  // rounds to infinity
  if (abs < 0x38800000U) {
    // Result is subnormal (or zero): scale into the 10-bit mantissa with round-to-nearest-even.
    if (abs < 0x33000000U) return static_cast<std::uint16_t>(sign);  // below half the smallest subnormal
    const std::uint32_t exponent = abs >> 23;
    const std::uint32_t mantissa = (abs & 0x7FFFFFU) | 0x800000U;
    const std::uint32_t shift = 126 - exponent;  // 14..24
    std::uint32_t half = mantissa >> shift;
    const std::uint32_t rest = mantissa & ((1U << shift) - 1);
    const std::uint32_t halfway = 1U << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1U))) ++half;
    return static_cast<std::uint16_t>(sign | half);
  }
  // Normal: rebias the exponent and round the 13 dropped mantissa bits to nearest even.
  std::uint32_t h = ((abs - 0x38000000U) >> 13);
  const std::uint32_t rest = abs & 0x1FFFU;
  if (rest > 0x1000U || (rest == 0x1000U && (h & 1U))) ++h;
  return static_cast<std::uint16_t>(sign | h);
}

static inline float bf16_to_fp32(std::uint16_t b) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

static inline std::uint16_t fp32_to_bf16(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7FFFFFFFU) > 0x7F800000U) return static_cast<std::uint16_t>((x >> 16) | 0x40U);  // quiet NaN
  return static_cast<std::uint16_t>((x + 0x7FFFU + ((x >> 16) & 1U)) >> 16);
}

}  // namespace infercast
