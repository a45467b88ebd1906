#pragma once
// Weight rows decoded for the AMX INT8 tiles (and, through them, for the BF16 tiles): each
// row's quants as signed bytes, plus a float scale per sub-block and, for Q4_K/Q5_K, a float
// offset (-dmin x min). Decoded from either weight layout, the same rows give the same bytes
// and floats, so the tile kernels do not depend on the layout they were fed from.
//
// Plain AVX-512 code (amx_decode_avx512.cpp), kept out of the AMX translation unit so a machine
// without AMX can test it; callers check for AVX-512 (F, BW, VL, DQ).
#include <cstddef>
#include <cstdint>

#include "kernels/blocks.h"

namespace infercast {

struct DecodedRows {
  std::int8_t* q;      // row n's quants at q + n * ldq
  float* scale;        // row n's sub-block j at scale[n * nsub + j]
  float* offset;       // as scale; written for Q4_K and Q5_K only
  std::size_t ldq;
  std::size_t nsub;    // cols / decoded_sub_block(type)
};

// Elements per scale in the decoded rows: 16 for Q6_K, 32 for Q4_0, Q5_0, Q8_0, Q4_K and Q5_K.
constexpr std::size_t decoded_sub_block(GgmlType type) { return type == GgmlType::q6_k ? 16 : 32; }

// Row n of `out` <- one GGUF-layout row of `cols` elements.
void decode_gguf_row(GgmlType type, const std::uint8_t* row, std::size_t cols, const DecodedRows& out, std::size_t n);

// Rows n0..n0+7 of `out` <- one group of eight interleaved rows (kernels/interleave.h),
// starting at `group`: the rows decode_gguf_row gives for the same rows in the GGUF layout.
void decode_x8_group(GgmlType type, const std::uint8_t* group, std::size_t cols, const DecodedRows& out,
                     std::size_t n0);

// The same rows as bf16 with their scales applied, for the AMX BF16 tiles: one GGUF row to `dst`,
// or eight interleaved rows to dst + r * ld (r < 8). Each weight is its float value (q x scale,
// + offset, one rounding) rounded once to bf16, in either layout. The 4- and 5-bit formats look
// their values up in a table of bf16 per sub-block; Q6_K goes through the decoded rows, so
// `scratch` must hold eight. Needs AVX512-BF16 as well.
void decode_gguf_row_bf16(GgmlType type, const std::uint8_t* row, std::size_t cols, std::uint16_t* dst,
                          const DecodedRows& scratch);
void decode_x8_group_bf16(GgmlType type, const std::uint8_t* group, std::size_t cols, std::uint16_t* dst, std::size_t ld,
                          const DecodedRows& scratch);

}  // namespace infercast
