#pragma once
// The interleaved ("x8") weight layout: eight consecutive rows of a block format rewritten so
// that one 32-byte load holds four consecutive quants of each of the eight rows, row r in the
// r-th 32-bit lane. A kernel then multiplies eight rows at once against one broadcast group of
// four activations and ends with the eight outputs in one vector: no horizontal sums, no
// per-row scale conversions, and about a third of the instructions per weight of the row
// layout, which on AVX2 is what keeps a 4-bit GEMV at memory speed (see docs/PERFORMANCE.md).
//
// Eight interleaved rows take exactly the bytes of the eight rows they came from, at the same
// offsets, so a matrix is rewritten in place, and slicing rows in multiples of eight (MoE
// experts) works as before. Rows past the last full group of eight keep the GGUF layout.
//
// The scales of Q4_K/Q5_K keep their 6 bits but in an order a vector decodes with a few masks
// and shifts (`scales` below); every other field holds the same values as the GGUF block.
#include <cstddef>
#include <cstdint>

#include "kernels/blocks.h"

namespace infercast {

inline constexpr int kInterleave = 8;

// qs[t][r][i]: low nibble = element 4t+i of row r, high nibble = element 16+4t+i.
struct BlockQ4_0x8 {
  std::uint16_t d[kInterleave];
  std::uint8_t qs[4][kInterleave][4];
};
static_assert(sizeof(BlockQ4_0x8) == kInterleave * sizeof(BlockQ4_0));

// As Q4_0, plus qh[p][r] = byte p of row r's fifth bits: bit j is that of element 8p+j. Byte p
// of the eight rows is then the 64-bit mask of exactly the bytes of the vector that holds
// elements 8p..8p+7 of every row (kernels/gemm_x8_avx512.cpp), so an AVX-512 kernel adds the
// fifth bits with one masked add per vector.
struct BlockQ5_0x8 {
  std::uint16_t d[kInterleave];
  std::uint8_t qh[4][kInterleave];
  std::uint8_t qs[4][kInterleave][4];
};
static_assert(sizeof(BlockQ5_0x8) == kInterleave * sizeof(BlockQ5_0));

// qs[t][r][i] = element 4t+i of row r.
struct BlockQ8_0x8 {
  std::uint16_t d[kInterleave];
  std::int8_t qs[8][kInterleave][4];
};
static_assert(sizeof(BlockQ8_0x8) == kInterleave * sizeof(BlockQ8_0));

// Sub-block scale s and min m of row r, e = 8 * sub_block + r:
//   scales[e]      = (s & 15) | (m & 15) << 4                      (e < 64)
//   scales[64 + k] = s[k] >> 4 | (m[k] >> 4) << 2 | s[k+32] >> 4 << 4 | m[k+32] >> 4 << 6   (k <
//   32)
inline constexpr int kK4x8ScaleBytes = kInterleave * kKScaleBytes;

// qs[j][t][r][i]: low nibble = element 64j+4t+i of row r (sub-block 2j), high nibble =
// element 64j+32+4t+i (sub-block 2j+1).
struct BlockQ4_Kx8 {
  std::uint16_t d[kInterleave];
  std::uint16_t dmin[kInterleave];
  std::uint8_t scales[kK4x8ScaleBytes];
  std::uint8_t qs[4][8][kInterleave][4];
};
static_assert(sizeof(BlockQ4_Kx8) == kInterleave * sizeof(BlockQ4_K));

// As Q4_K, plus qh[t][r][i]: bit k = fifth bit of element 32k+4t+i of row r.
struct BlockQ5_Kx8 {
  std::uint16_t d[kInterleave];
  std::uint16_t dmin[kInterleave];
  std::uint8_t scales[kK4x8ScaleBytes];
  std::uint8_t qh[8][kInterleave][4];
  std::uint8_t qs[4][8][kInterleave][4];
};
static_assert(sizeof(BlockQ5_Kx8) == kInterleave * sizeof(BlockQ5_K));

// Elements in units of 32 (u); unsigned 6-bit quants q (value = d * scale * (q - 32)):
//   ql[u][p][r][i]: low nibble = low four bits of element 32u+4p+i, high nibble = of 32u+16+4p+i
//   qh[u][h][r][i]: bits 2p, 2p+1 = top two bits of element 32u+16h+4p+i
//   scales[g][r]: the signed scale of sub-block g (elements 16g..16g+15) of row r.
struct BlockQ6_Kx8 {
  std::uint16_t d[kInterleave];
  std::int8_t scales[16][kInterleave];
  std::uint8_t ql[8][4][kInterleave][4];
  std::uint8_t qh[8][2][kInterleave][4];
};
static_assert(sizeof(BlockQ6_Kx8) == kInterleave * sizeof(BlockQ6_K));

// Whether `type` has an interleaved layout.
bool has_interleaved_layout(GgmlType type);

// Rewrites rows [8g, 8g+8) for every full group g of a row-major matrix in place (rows of
// `row_bytes`, `cols` elements); the rows past the last full group are left as they are.
void interleave_rows(GgmlType type, std::uint8_t* data, std::size_t rows, std::size_t cols,
                     std::size_t row_bytes);

// The GGUF bytes of rows [r, r + n) of a matrix interleaved by interleave_rows, into `out`
// (n x row_bytes); each group of eight is decoded once however many of its rows are asked for.
void copy_gguf_rows(GgmlType type, const std::uint8_t* data, std::size_t rows, std::size_t cols,
                    std::size_t row_bytes, std::size_t r, std::size_t n, std::uint8_t* out);
// The GGUF bytes of row r of a matrix interleaved by interleave_rows, into `out` (row_bytes).
void copy_gguf_row(GgmlType type, const std::uint8_t* data, std::size_t rows, std::size_t cols,
                   std::size_t row_bytes, std::size_t r, std::uint8_t* out);

}  // namespace infercast
