#pragma once
// GGUF/ggml tensor types and their block layouts, byte for byte, so tensors from any GGUF file
// can be used in place. Each block is a plain struct whose size is checked at compile time;
// scales are stored as raw binary16 bits (see half.h).
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace infercast {

// Values are ggml's type numbers, as stored in GGUF tensor infos.
enum class GgmlType : std::uint32_t {
  f32 = 0,
  f16 = 1,
  q4_0 = 2,
  q5_0 = 6,
  q8_0 = 8,
  q4_k = 12,
  q5_k = 13,
  q6_k = 14,
  q8_k = 15,
  bf16 = 30,
};

inline constexpr int kQk = 32;      // elements per block of the legacy formats
inline constexpr int kQkK = 256;    // elements per super-block of the K-quants
inline constexpr int kKScaleBytes = 12;

struct BlockQ8_0 {
  std::uint16_t d;       // scale
  std::int8_t qs[kQk];   // value = d * qs[i]
};
static_assert(sizeof(BlockQ8_0) == 34);

struct BlockQ4_0 {
  std::uint16_t d;            // scale
  std::uint8_t qs[kQk / 2];   // element i in the low nibble of qs[i], element i+16 in the high one
};
static_assert(sizeof(BlockQ4_0) == 18);

// Q4_0 with a fifth bit: element i's in bit i of qh, element i+16's in bit i+16.
struct BlockQ5_0 {
  std::uint16_t d;            // scale
  std::uint8_t qh[4];         // fifth bits, little-endian
  std::uint8_t qs[kQk / 2];   // low four bits, laid out as in Q4_0
};
static_assert(sizeof(BlockQ5_0) == 22);

// Element j (0..31) of a Q4_0 block as its unsigned four bits (the value is d x (q - 8)), and
// of a Q5_0 block as its unsigned five bits (d x (q - 16)).
inline int unsigned_quant(const BlockQ4_0& b, int j) { return j < kQk / 2 ? b.qs[j] & 0xF : b.qs[j - kQk / 2] >> 4; }
inline int unsigned_quant(const BlockQ5_0& b, int j) {
  const int low = j < kQk / 2 ? b.qs[j] & 0xF : b.qs[j - kQk / 2] >> 4;
  return low | ((b.qh[j / 8] >> (j % 8)) & 1) << 4;
}

// The block of a legacy 32-element weight format: Q8_0, Q4_0 or Q5_0.
template <GgmlType W>
  requires(W == GgmlType::q8_0 || W == GgmlType::q4_0 || W == GgmlType::q5_0)
using LegacyBlock = std::conditional_t<W == GgmlType::q8_0, BlockQ8_0, std::conditional_t<W == GgmlType::q4_0, BlockQ4_0, BlockQ5_0>>;

// 8 sub-blocks of 32 with 6-bit scales and mins packed into 12 bytes.
struct BlockQ4_K {
  std::uint16_t d;                   // super-scale of the sub-block scales
  std::uint16_t dmin;                // super-scale of the sub-block mins
  std::uint8_t scales[kKScaleBytes];
  std::uint8_t qs[kQkK / 2];         // per 64 elements: 32 bytes, low nibbles first 32, high next 32
};
static_assert(sizeof(BlockQ4_K) == 144);

struct BlockQ5_K {
  std::uint16_t d;
  std::uint16_t dmin;
  std::uint8_t scales[kKScaleBytes];
  std::uint8_t qh[kQkK / 8];   // fifth bits: bit 2j of qh[l] for element 64j+l, bit 2j+1 for 64j+32+l
  std::uint8_t qs[kQkK / 2];   // low four bits, laid out as in Q4_K
};
static_assert(sizeof(BlockQ5_K) == 176);

// 16 sub-blocks of 16 with signed 8-bit scales; values are 6-bit minus 32.
struct BlockQ6_K {
  std::uint8_t ql[kQkK / 2];
  std::uint8_t qh[kQkK / 4];
  std::int8_t scales[kQkK / 16];
  std::uint16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210);

// Activation format of the K-quant dot products: one float scale per 256 and the sums of
// every 16 quants, so the mins of Q4_K/Q5_K cost one small dot product per super-block.
struct BlockQ8_K {
  float d;
  std::int8_t qs[kQkK];
  std::int16_t bsums[kQkK / 16];
};
static_assert(sizeof(BlockQ8_K) == 292);

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K super-block.
inline void unpack_scale_min_k4(int j, const std::uint8_t* packed, std::uint8_t& scale, std::uint8_t& min) {
  if (j < 4) {
    scale = packed[j] & 63;
    min = packed[j + 4] & 63;
  } else {
    scale = static_cast<std::uint8_t>((packed[j + 4] & 0xF) | ((packed[j - 4] >> 6) << 4));
    min = static_cast<std::uint8_t>((packed[j + 4] >> 4) | ((packed[j] >> 6) << 4));
  }
}

}  // namespace infercast
