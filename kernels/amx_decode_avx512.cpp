// Weight rows decoded for the AMX tiles, from the GGUF layout a row at a time and from the
// interleaved layout a group of eight rows at a time (see amx_decode.h).
//
// An interleaved block holds each 32-bit group of four consecutive quants of the eight rows side
// by side, so decoding a group is the GGUF decode plus an 8x8 transpose of 32-bit groups: two
// rounds of two-source permutes per 256 bytes of quants (transpose_x8). The rows then reach the
// tiles in the order they always did, so the AMX kernels read both layouts with the same code.
#include "kernels/amx_decode.h"

#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "kernels/interleave.h"
#include "kernels/simd_macros.h"

namespace infercast {
namespace {

#include "kernels/k_scales.inc"

inline void store32(std::int8_t* dst, __m256i v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), v); }

inline __m512i load64(const void* p) { return _mm512_loadu_si512(p); }

// The F16C instruction: half.h's portable conversion is for the reference paths.
inline float half_to_float(std::uint16_t h) { return _cvtsh_ss(h); }

// The fp16 scales of a GGUF row's `count` blocks, `stride` bytes apart from `first`, as floats:
// sixteen per gather (the low half of the dword at each block's scale).
void block_scales(const std::uint16_t* first, std::size_t stride, std::size_t count, float* out) {
  const __m512i offsets = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                             _mm512_set1_epi32(static_cast<int>(stride)));
  const auto* base = reinterpret_cast<const std::uint8_t*>(first);
  std::size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m512i d = _mm512_i32gather_epi32(offsets, base + i * stride, 1);
    _mm512_storeu_ps(out + i, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(d)));
  }
  for (; i < count; ++i) {
    std::uint16_t h;
    std::memcpy(&h, base + i * stride, sizeof h);
    out[i] = half_to_float(h);
  }
}

// --- The GGUF layout, a row at a time ------------------------------------------------------

// The 32 unsigned quants of a GGUF Q4_0 or Q5_0 block, element j in byte j: the low nibbles,
// then the high ones; Q5_0's qh, whose bit j is element j's fifth bit, is their byte mask.
INFERCAST_INLINE __m256i nibbles32(const std::uint8_t* qs) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0x0F));
}
INFERCAST_INLINE __m256i unsigned_quants(const BlockQ4_0& b) { return nibbles32(b.qs); }
INFERCAST_INLINE __m256i unsigned_quants(const BlockQ5_0& b) {
  const __m256i u = nibbles32(b.qs);
  std::uint32_t qh = 0;
  std::memcpy(&qh, b.qh, sizeof qh);
  return _mm256_mask_add_epi8(u, _cvtu32_mask32(qh), u, _mm256_set1_epi8(16));
}

template <GgmlType W>
void gguf_row(const std::uint8_t* row, std::size_t cols, const DecodedRows& s, std::size_t n) {
  std::int8_t* q = s.q + n * s.ldq;
  float* scale = s.scale + n * s.nsub;
  float* offset = s.offset + n * s.nsub;
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  if constexpr (W == GgmlType::q8_0 || W == GgmlType::q4_0 || W == GgmlType::q5_0) {
    using Block = LegacyBlock<W>;
    const auto* b = reinterpret_cast<const Block*>(row);
    const std::size_t nb = cols / kQk;
    block_scales(&b[0].d, sizeof(Block), nb, scale);
    for (std::size_t i = 0; i < nb; ++i) {
      if constexpr (W == GgmlType::q8_0) {
        store32(q + i * kQk, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].qs)));
      } else {
        const __m256i u = unsigned_quants(b[i]);
        store32(q + i * kQk, _mm256_sub_epi8(u, _mm256_set1_epi8(W == GgmlType::q5_0 ? 16 : 8)));
      }
    }
  } else if constexpr (W == GgmlType::q4_k || W == GgmlType::q5_k) {
    using Block = std::conditional_t<W == GgmlType::q4_k, BlockQ4_K, BlockQ5_K>;
    const auto* b = reinterpret_cast<const Block*>(row);
    for (std::size_t i = 0; i < cols / kQkK; ++i) {
      std::uint8_t sm[16];
      unpack_k4_scales(b[i].scales, sm);
      const float d = half_to_float(b[i].d);
      const float dmin = half_to_float(b[i].dmin);
      __m256i qh = _mm256_setzero_si256();
      if constexpr (W == GgmlType::q5_k) qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].qh));
      for (int j = 0; j < 4; ++j) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].qs + 32 * j));
        __m256i lo = _mm256_and_si256(v, nibble);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble);
        if constexpr (W == GgmlType::q5_k) {
          const __m256i b0 = _mm256_set1_epi8(static_cast<char>(1 << (2 * j)));
          const __m256i b1 = _mm256_set1_epi8(static_cast<char>(1 << (2 * j + 1)));
          lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, b0), b0), _mm256_set1_epi8(16)));
          hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, b1), b1), _mm256_set1_epi8(16)));
        }
        store32(q + i * kQkK + 64 * j, lo);
        store32(q + i * kQkK + 64 * j + 32, hi);
      }
      for (int j = 0; j < 8; ++j) {
        scale[i * 8 + j] = d * sm[j];
        offset[i * 8 + j] = -dmin * sm[8 + j];
      }
    }
  } else {
    static_assert(W == GgmlType::q6_k);
    const auto* b = reinterpret_cast<const BlockQ6_K*>(row);
    const __m256i two_bits = _mm256_set1_epi8(0x03);
    for (std::size_t i = 0; i < cols / kQkK; ++i) {
      const float d = half_to_float(b[i].d);
      for (int h = 0; h < 2; ++h) {
        const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].ql + 64 * h));
        const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].ql + 64 * h + 32));
        const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].qh + 32 * h));
        const auto high = [&](int shift) {
          return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, shift), two_bits), 4);
        };
        const __m256i bias = _mm256_set1_epi8(32);
        std::int8_t* out = q + i * kQkK + 128 * h;
        store32(out, _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(ql0, nibble), high(0)), bias));
        store32(out + 32, _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(ql1, nibble), high(2)), bias));
        store32(out + 64, _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), nibble), high(4)), bias));
        store32(out + 96, _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), nibble), high(6)), bias));
      }
      for (int g = 0; g < 16; ++g) scale[i * 16 + g] = d * b[i].scales[g];
    }
  }
}

// --- The interleaved layout, eight rows at a time --------------------------------------------

// t[k] holds 32-bit groups 2k and 2k+1 of the eight rows (dword 8 * (g % 2) + r is group g of
// row r). Returns row r's groups 0..7 (32 bytes) in half r % 2 of vector r / 2.
INFERCAST_INLINE void transpose_x8(const __m512i (&t)[4], __m512i (&rows)[4]) {
  // Groups 0-3 of rows 0-3 (four dwords a row) from t[0] and t[1]; of rows 4-7; groups 4-7 alike.
  const __m512i rows_0_3 = _mm512_setr_epi32(0, 8, 16, 24, 1, 9, 17, 25, 2, 10, 18, 26, 3, 11, 19, 27);
  const __m512i rows_4_7 = _mm512_setr_epi32(4, 12, 20, 28, 5, 13, 21, 29, 6, 14, 22, 30, 7, 15, 23, 31);
  const __m512i a0 = _mm512_permutex2var_epi32(t[0], rows_0_3, t[1]);
  const __m512i a1 = _mm512_permutex2var_epi32(t[0], rows_4_7, t[1]);
  const __m512i b0 = _mm512_permutex2var_epi32(t[2], rows_0_3, t[3]);
  const __m512i b1 = _mm512_permutex2var_epi32(t[2], rows_4_7, t[3]);
  // A row's first four groups (from a) then its last four (from b), two rows per vector.
  const __m512i first_pair = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11);
  const __m512i second_pair = _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15);
  rows[0] = _mm512_permutex2var_epi64(a0, first_pair, b0);
  rows[1] = _mm512_permutex2var_epi64(a0, second_pair, b0);
  rows[2] = _mm512_permutex2var_epi64(a1, first_pair, b1);
  rows[3] = _mm512_permutex2var_epi64(a1, second_pair, b1);
}

INFERCAST_INLINE __m256i row_of(const __m512i (&rows)[4], int r) {
  return r % 2 == 0 ? _mm512_castsi512_si256(rows[r / 2]) : _mm512_extracti64x4_epi64(rows[r / 2], 1);
}

// The transposed rows, 32 bytes each, to out + r * ld.
INFERCAST_INLINE void store_rows_x8(const __m512i (&t)[4], std::int8_t* out, std::size_t ld) {
  __m512i rows[4];
  transpose_x8(t, rows);
  INFERCAST_UNROLL
  for (int r = 0; r < kInterleave; ++r) store32(out + r * ld, row_of(rows, r));
}

// Eight fp16 values (one per row) as floats.
INFERCAST_INLINE __m256 halves(const std::uint16_t* h) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h))); }

// The same in both halves of a vector: row r's value in lanes r and 8 + r.
INFERCAST_INLINE __m512 halves_twice(const std::uint16_t* h) {
  const __m256 v = halves(h);
  return _mm512_insertf32x8(_mm512_castps256_ps512(v), v, 1);
}

// tmp[k][r] (k < count, r < 8) to row n0 + r of `rows` (s.scale or s.offset), sub-blocks
// first..first+count-1.
INFERCAST_INLINE void store_columns(const float* tmp, int count, float* rows, const DecodedRows& s, std::size_t n0,
                                    std::size_t first) {
  for (int r = 0; r < kInterleave; ++r) {
    float* dst = rows + (n0 + static_cast<std::size_t>(r)) * s.nsub + first;
    for (int k = 0; k < count; ++k) dst[k] = tmp[k * kInterleave + r];
  }
}

void q8_0_group(const std::uint8_t* group, std::size_t cols, const DecodedRows& s, std::size_t n0) {
  const auto* blocks = reinterpret_cast<const BlockQ8_0x8*>(group);
  for (std::size_t b = 0; b < cols / kQk; ++b) {
    const BlockQ8_0x8& x = blocks[b];
    const __m512i t[4] = {load64(x.qs[0]), load64(x.qs[2]), load64(x.qs[4]), load64(x.qs[6])};
    store_rows_x8(t, s.q + n0 * s.ldq + b * kQk, s.ldq);
    // Eight stores a block: a gather of sixteen blocks' scales per row, as the GGUF rows take
    // them, made this 1.3x slower (16 rows of 4096, Q8_0 2.0 -> 2.6 us).
    alignas(32) float d[kInterleave];
    _mm256_store_ps(d, halves(x.d));
    store_columns(d, 1, s.scale, s, n0, b);
  }
}

void q4_0_group(const std::uint8_t* group, std::size_t cols, const DecodedRows& s, std::size_t n0) {
  const auto* blocks = reinterpret_cast<const BlockQ4_0x8*>(group);
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i eight = _mm512_set1_epi8(8);
  for (std::size_t b = 0; b < cols / kQk; ++b) {
    const BlockQ4_0x8& x = blocks[b];
    const __m512i v0 = load64(x.qs[0]);  // groups 0, 1 (low nibbles) and 4, 5 (high)
    const __m512i v1 = load64(x.qs[2]);  // groups 2, 3 and 6, 7
    const __m512i t[4] = {_mm512_sub_epi8(_mm512_and_si512(v0, m4), eight), _mm512_sub_epi8(_mm512_and_si512(v1, m4), eight),
                          _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(v0, 4), m4), eight),
                          _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(v1, 4), m4), eight)};
    store_rows_x8(t, s.q + n0 * s.ldq + b * kQk, s.ldq);
    // Eight stores a block: a gather of sixteen blocks' scales per row, as the GGUF rows take
    // them, made this 1.3x slower (16 rows of 4096, Q8_0 2.0 -> 2.6 us).
    alignas(32) float d[kInterleave];
    _mm256_store_ps(d, halves(x.d));
    store_columns(d, 1, s.scale, s, n0, b);
  }
}

// The unsigned five-bit quants of a Q5_0 x8 block in the order q4_0_group's t[] holds its
// nibbles: t[k] has elements 8k..8k+3 of row r at byte 4r + i and 8k+4.. at 32 + 4r + i, whose
// fifth bits are the low and high nibble of the interleaved qh[k][r].
INFERCAST_INLINE void q5_0_quants(const BlockQ5_0x8& x, __m512i (&t)[4]) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i sixteen = _mm512_set1_epi8(16);
  const __m512i v0 = load64(x.qs[0]);
  const __m512i v1 = load64(x.qs[2]);
  t[0] = _mm512_and_si512(v0, m4);
  t[1] = _mm512_and_si512(v1, m4);
  t[2] = _mm512_and_si512(_mm512_srli_epi16(v0, 4), m4);
  t[3] = _mm512_and_si512(_mm512_srli_epi16(v1, 4), m4);
  // Byte 4r + i of each 32 takes byte r of the row bytes (every 128-bit lane holds all eight),
  // then bit i (low 32 bytes) or 4 + i (high 32) of it.
  const __m512i row_byte = _mm512_set_epi32(0x07070707, 0x06060606, 0x05050505, 0x04040404, 0x03030303, 0x02020202,
                                            0x01010101, 0x00000000, 0x07070707, 0x06060606, 0x05050505, 0x04040404,
                                            0x03030303, 0x02020202, 0x01010101, 0x00000000);
  const __m512i bit = _mm512_inserti64x4(_mm512_set1_epi32(0x08040201), _mm256_set1_epi32(static_cast<int>(0x80402010U)), 1);
  INFERCAST_UNROLL
  for (int k = 0; k < 4; ++k) {
    std::int64_t bytes = 0;
    std::memcpy(&bytes, x.qh[k], sizeof bytes);
    const __mmask64 fifth = _mm512_test_epi8_mask(_mm512_shuffle_epi8(_mm512_set1_epi64(bytes), row_byte), bit);
    t[k] = _mm512_mask_add_epi8(t[k], fifth, t[k], sixteen);
  }
}

void q5_0_group(const std::uint8_t* group, std::size_t cols, const DecodedRows& s, std::size_t n0) {
  const auto* blocks = reinterpret_cast<const BlockQ5_0x8*>(group);
  const __m512i sixteen = _mm512_set1_epi8(16);
  for (std::size_t b = 0; b < cols / kQk; ++b) {
    const BlockQ5_0x8& x = blocks[b];
    __m512i t[4];
    q5_0_quants(x, t);
    for (auto& v : t) v = _mm512_sub_epi8(v, sixteen);
    store_rows_x8(t, s.q + n0 * s.ldq + b * kQk, s.ldq);
    alignas(32) float d[kInterleave];
    _mm256_store_ps(d, halves(x.d));
    store_columns(d, 1, s.scale, s, n0, b);
  }
}

// The interleaved 6-bit scales and mins of a Q4_K/Q5_K block (kernels/interleave.h) as floats:
// scale[j][r] = d[r] x scale, offset[j][r] = -dmin[r] x min, as the GGUF decode computes them.
template <class X8>
void k4_group_scales(const X8& x, float (&scale)[8][kInterleave], float (&offset)[8][kInterleave]) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i low = load64(x.scales);  // entry e = 8 x sub-block + row
  const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.scales + 64));
  const __m512i high = _mm512_inserti64x4(_mm512_castsi256_si512(hb), hb, 1);
  // Entry e < 32 takes its top bits from bits 0-1 (scale) and 2-3 (min) of byte 64 + e; entry
  // e >= 32 from bits 4-5 and 6-7 of byte 64 + e - 32. A 16-bit shift is exact under the masks.
  const __m512i three = _mm512_set1_epi8(3);
  const __m512i scale_top = _mm512_and_si512(_mm512_mask_mov_epi64(high, 0xF0, _mm512_srli_epi16(high, 4)), three);
  const __m512i min_top =
      _mm512_and_si512(_mm512_mask_mov_epi64(_mm512_srli_epi16(high, 2), 0xF0, _mm512_srli_epi16(high, 6)), three);
  const __m512i sc = _mm512_or_si512(_mm512_and_si512(low, m4), _mm512_slli_epi16(scale_top, 4));
  const __m512i mn = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(low, 4), m4), _mm512_slli_epi16(min_top, 4));
  const __m512 d = halves_twice(x.d);
  // A sign flip, as the GGUF decode's -dmin (0 - dmin would turn -0 x min into +0).
  const __m512 neg_dmin = _mm512_xor_ps(halves_twice(x.dmin), _mm512_set1_ps(-0.0F));
  alignas(64) std::uint8_t sc_bytes[64];
  alignas(64) std::uint8_t mn_bytes[64];
  _mm512_store_si512(sc_bytes, sc);
  _mm512_store_si512(mn_bytes, mn);
  INFERCAST_UNROLL
  for (int p = 0; p < 4; ++p) {  // sub-blocks 2p and 2p+1
    const auto floats = [&](const std::uint8_t* bytes) {
      return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(bytes + 16 * p))));
    };
    _mm512_storeu_ps(scale[2 * p], _mm512_mul_ps(d, floats(sc_bytes)));
    _mm512_storeu_ps(offset[2 * p], _mm512_mul_ps(neg_dmin, floats(mn_bytes)));
  }
}

// Q5_K's fifth bits of a block, [step pair][row][byte] as the nibbles are (zeros for Q4_K): bit k
// of a byte belongs to sub-block k. Loaded once a block.
template <class X8>
INFERCAST_INLINE void k4_fifth_bits(const X8& x, __m512i (&qh)[4]) {
  for (int k = 0; k < 4; ++k) {
    if constexpr (std::is_same_v<X8, BlockQ5_Kx8>) {
      qh[k] = load64(x.qh[2 * k]);
    } else {
      qh[k] = _mm512_setzero_si512();
    }
  }
}

// The unsigned quants of sub-blocks 2j (lo) and 2j+1 (hi) of a Q4_K/Q5_K x8 block, four 32-bit
// groups of the eight rows per vector, as transpose_x8 takes them; Q5_K's fifth bits merged in.
template <class X8>
INFERCAST_INLINE void k4_quants(const X8& x, const __m512i (&qh)[4], int j, __m512i (&lo)[4], __m512i (&hi)[4]) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i sixteen = _mm512_set1_epi8(16);
  for (int k = 0; k < 4; ++k) {
    const __m512i v = load64(x.qs[j][2 * k]);
    lo[k] = _mm512_and_si512(v, m4);
    hi[k] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
    if constexpr (std::is_same_v<X8, BlockQ5_Kx8>) {
      const __mmask64 lo_bit = _mm512_test_epi8_mask(qh[k], _mm512_set1_epi8(static_cast<char>(1 << (2 * j))));
      const __mmask64 hi_bit = _mm512_test_epi8_mask(qh[k], _mm512_set1_epi8(static_cast<char>(1 << (2 * j + 1))));
      lo[k] = _mm512_mask_add_epi8(lo[k], lo_bit, lo[k], sixteen);  // bit 4 was clear: + is |
      hi[k] = _mm512_mask_add_epi8(hi[k], hi_bit, hi[k], sixteen);
    }
  }
}

template <class X8>
void k4_group(const std::uint8_t* group, std::size_t cols, const DecodedRows& s, std::size_t n0) {
  const auto* blocks = reinterpret_cast<const X8*>(group);
  for (std::size_t b = 0; b < cols / kQkK; ++b) {
    const X8& x = blocks[b];
    __m512i qh[4];
    k4_fifth_bits(x, qh);
    std::int8_t* out = s.q + n0 * s.ldq + b * kQkK;
    for (int j = 0; j < 4; ++j) {
      __m512i lo[4];
      __m512i hi[4];
      k4_quants(x, qh, j, lo, hi);
      store_rows_x8(lo, out + 64 * j, s.ldq);
      store_rows_x8(hi, out + 64 * j + 32, s.ldq);
    }
    alignas(64) float scale[8][kInterleave];
    alignas(64) float offset[8][kInterleave];
    k4_group_scales(x, scale, offset);
    store_columns(&scale[0][0], 8, s.scale, s, n0, b * 8);
    store_columns(&offset[0][0], 8, s.offset, s, n0, b * 8);
  }
}

void q6_k_group(const std::uint8_t* group, std::size_t cols, const DecodedRows& s, std::size_t n0) {
  const auto* blocks = reinterpret_cast<const BlockQ6_Kx8*>(group);
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i three = _mm512_set1_epi8(3);
  const __m512i bias = _mm512_set1_epi8(32);
  // The top bits of groups 2p (low half) and 2p+1 (high half) sit at bits 2p and 2p+2 of qh.
  const __m512i shift_01 = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1);
  const __m512i shift_23 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(6), 1);
  for (std::size_t b = 0; b < cols / kQkK; ++b) {
    const BlockQ6_Kx8& x = blocks[b];
    std::int8_t* out = s.q + n0 * s.ldq + b * kQkK;
    for (int u = 0; u < 8; ++u) {
      const __m512i a = load64(x.ql[u][0]);  // p = 0, 1
      const __m512i c = load64(x.ql[u][2]);  // p = 2, 3
      const __m512i qh = load64(x.qh[u][0]);
      const __m512i h0 = _mm512_shuffle_i64x2(qh, qh, 0x44);  // h = 0 in both halves
      const __m512i h1 = _mm512_shuffle_i64x2(qh, qh, 0xEE);  // h = 1
      const auto top = [&](__m512i h, __m512i shift) {
        return _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(h, shift), three), 4);
      };
      const auto value = [&](__m512i low4, __m512i high2) { return _mm512_sub_epi8(_mm512_or_si512(low4, high2), bias); };
      const __m512i t[4] = {value(_mm512_and_si512(a, m4), top(h0, shift_01)),
                            value(_mm512_and_si512(c, m4), top(h0, shift_23)),
                            value(_mm512_and_si512(_mm512_srli_epi16(a, 4), m4), top(h1, shift_01)),
                            value(_mm512_and_si512(_mm512_srli_epi16(c, 4), m4), top(h1, shift_23))};
      store_rows_x8(t, out + 32 * u, s.ldq);
    }
    alignas(64) float scale[16][kInterleave];
    const __m512 d = halves_twice(x.d);
    for (int p = 0; p < 8; ++p) {  // groups 2p and 2p+1
      const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales[2 * p]));
      _mm512_store_ps(scale[2 * p], _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(sc))));
    }
    store_columns(&scale[0][0], 16, s.scale, s, n0, b * 16);
  }
}

// --- Rows as bf16 with their scales applied (the AMX BF16 tiles) ---------------------------

// Sixteen bf16 values (q - bias) x scale + offset for q = 0..15: a 4-bit format's sub-block as a
// lookup table, so decoding is one word permute per 32 weights. The same rounding as the decoded
// rows' conversion below: the float product rounded once (by the FMA), then to bf16.
INFERCAST_INLINE __m512i nibble_table(float scale, float offset, float bias) {
  const __m512 q = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512 v = _mm512_fmadd_ps(_mm512_sub_ps(q, _mm512_set1_ps(bias)), _mm512_set1_ps(scale), _mm512_set1_ps(offset));
  return _mm512_castsi256_si512(reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v)));
}

// The same for five-bit quants, q = 0..31 (Q5_K): thirty-two bf16 values fill the register.
INFERCAST_INLINE __m512i five_bit_table(float scale, float offset) {
  const __m512 q = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512 s = _mm512_set1_ps(scale);
  const __m512 o = _mm512_set1_ps(offset);
  const __m512 lo = _mm512_fmadd_ps(q, s, o);
  const __m512 hi = _mm512_fmadd_ps(_mm512_add_ps(q, _mm512_set1_ps(16.0F)), s, o);
  return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
}

template <bool FifthBit>
INFERCAST_INLINE __m512i k_table(float scale, float offset) {
  if constexpr (FifthBit) return five_bit_table(scale, offset);
  return nibble_table(scale, offset, 0.0F);
}

INFERCAST_INLINE void store_bf16(std::uint16_t* dst, __m512i v) { _mm512_storeu_si512(dst, v); }

// Thirty-two weights of a Q8_0 block (signed bytes) times its scale, as bf16.
INFERCAST_INLINE __m512i q8_0_bf16(__m256i q, float scale) {
  const __m512 d = _mm512_set1_ps(scale);
  const __m512 lo = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(q))), d);
  const __m512 hi = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(q, 1))), d);
  return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
}

// Q6_K's rows as bf16 from the decoded rows: q x scale, rounded as the tables are (its 64
// values per 16-weight sub-block would cost more to tabulate than to convert). The sub-block is
// a constant: a division per 16 weights made this 2.8x slower (16 rows of 4096: 10.4 us, not 3.7).
void decoded_rows_bf16(const DecodedRows& q, std::size_t count, std::size_t cols, std::uint16_t* dst, std::size_t ld) {
  constexpr std::size_t kSub = decoded_sub_block(GgmlType::q6_k);
  for (std::size_t n = 0; n < count; ++n) {
    const std::int8_t* row = q.q + n * q.ldq;
    const float* scale = q.scale + n * q.nsub;
    const auto scaled16 = [&](std::size_t k) {
      const __m512 v = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + k))));
      return _mm512_mul_ps(v, _mm512_set1_ps(scale[k / kSub]));
    };
    for (std::size_t k = 0; k < cols; k += 32) {
      store_bf16(dst + n * ld + k, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(scaled16(k + 16), scaled16(k))));
    }
  }
}

void q8_0_row_bf16(const std::uint8_t* row, std::size_t cols, std::uint16_t* dst) {
  const auto* b = reinterpret_cast<const BlockQ8_0*>(row);
  for (std::size_t i = 0; i < cols / kQk; ++i) {
    store_bf16(dst + kQk * i, q8_0_bf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].qs)), half_to_float(b[i].d)));
  }
}

void q4_0_row_bf16(const std::uint8_t* row, std::size_t cols, std::uint16_t* dst) {
  const auto* b = reinterpret_cast<const BlockQ4_0*>(row);
  for (std::size_t i = 0; i < cols / kQk; ++i) {
    const __m512i table = nibble_table(half_to_float(b[i].d), 0.0F, 8.0F);
    // Elements 0..15 are the low nibbles of the 16 bytes, 16..31 the high ones.
    const __m256i bytes = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].qs)));
    const __m512i words = _mm512_inserti64x4(_mm512_castsi256_si512(bytes), bytes, 1);
    const __m512i idx = _mm512_mask_srli_epi16(_mm512_and_si512(words, _mm512_set1_epi16(0x0F)), 0xFFFF0000U, words, 4);
    store_bf16(dst + kQk * i, _mm512_permutexvar_epi16(idx, table));
  }
}

void q5_0_row_bf16(const std::uint8_t* row, std::size_t cols, std::uint16_t* dst) {
  const auto* b = reinterpret_cast<const BlockQ5_0*>(row);
  for (std::size_t i = 0; i < cols / kQk; ++i) {
    const float d = half_to_float(b[i].d);
    // q x d - 16 d in one rounding is (q - 16) x d in one rounding: 16 d is exact.
    const __m512i table = five_bit_table(d, -16.0F * d);
    store_bf16(dst + kQk * i, _mm512_permutexvar_epi16(_mm512_cvtepu8_epi16(unsigned_quants(b[i])), table));
  }
}

template <bool FifthBit>
void k4_row_bf16(const std::uint8_t* row, std::size_t cols, std::uint16_t* dst) {
  using Block = std::conditional_t<FifthBit, BlockQ5_K, BlockQ4_K>;
  const auto* b = reinterpret_cast<const Block*>(row);
  [[maybe_unused]] const __m256i m4 = _mm256_set1_epi8(0x0F);
  [[maybe_unused]] const __m256i sixteen = _mm256_set1_epi8(16);
  for (std::size_t i = 0; i < cols / kQkK; ++i) {
    alignas(16) std::uint8_t sm[16];
    unpack_k4_scales(b[i].scales, sm);
    const float d = half_to_float(b[i].d);
    const float dmin = half_to_float(b[i].dmin);
    [[maybe_unused]] __m256i qh = _mm256_setzero_si256();
    if constexpr (FifthBit) qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].qh));
    for (int j = 0; j < 4; ++j) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].qs + 32 * j));
      __m512i idx[2];
      if constexpr (FifthBit) {
        for (int h = 0; h < 2; ++h) {
          const __m256i nibbles = _mm256_and_si256(h == 0 ? v : _mm256_srli_epi16(v, 4), m4);
          const __mmask32 bit = _mm256_test_epi8_mask(qh, _mm256_set1_epi8(static_cast<char>(1 << (2 * j + h))));
          idx[h] = _mm512_cvtepu8_epi16(_mm256_mask_add_epi8(nibbles, bit, nibbles, sixteen));
        }
      } else {
        // One widening for both sub-blocks; the nibbles are picked from the words.
        const __m512i words = _mm512_cvtepu8_epi16(v);
        idx[0] = _mm512_and_si512(words, _mm512_set1_epi16(0x0F));
        idx[1] = _mm512_srli_epi16(words, 4);
      }
      for (int h = 0; h < 2; ++h) {
        const int sub = 2 * j + h;
        const __m512i table = k_table<FifthBit>(d * static_cast<float>(sm[sub]), -dmin * static_cast<float>(sm[8 + sub]));
        store_bf16(dst + kQkK * i + 32 * sub, _mm512_permutexvar_epi16(idx[h], table));
      }
    }
  }
}

// Eight interleaved rows: the quants transposed as for the INT8 tiles, then converted per row as
// the GGUF rows are.
void q8_0_group_bf16(const std::uint8_t* group, std::size_t cols, std::uint16_t* dst, std::size_t ld) {
  const auto* blocks = reinterpret_cast<const BlockQ8_0x8*>(group);
  for (std::size_t b = 0; b < cols / kQk; ++b) {
    const BlockQ8_0x8& x = blocks[b];
    const __m512i t[4] = {load64(x.qs[0]), load64(x.qs[2]), load64(x.qs[4]), load64(x.qs[6])};
    __m512i rows[4];
    transpose_x8(t, rows);
    // The eight scales converted at once and read back as memory operands, broadcast by the
    // multiplies: one conversion per row would cost a shuffle-port operation each.
    alignas(32) float d[kInterleave];
    _mm256_store_ps(d, halves(x.d));
    INFERCAST_UNROLL
    for (int r = 0; r < kInterleave; ++r) store_bf16(dst + r * ld + b * kQk, q8_0_bf16(row_of(rows, r), d[r]));
  }
}

void q4_0_group_bf16(const std::uint8_t* group, std::size_t cols, std::uint16_t* dst, std::size_t ld) {
  const auto* blocks = reinterpret_cast<const BlockQ4_0x8*>(group);
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  for (std::size_t b = 0; b < cols / kQk; ++b) {
    const BlockQ4_0x8& x = blocks[b];
    const __m512i v0 = load64(x.qs[0]);
    const __m512i v1 = load64(x.qs[2]);
    const __m512i t[4] = {_mm512_and_si512(v0, m4), _mm512_and_si512(v1, m4), _mm512_and_si512(_mm512_srli_epi16(v0, 4), m4),
                          _mm512_and_si512(_mm512_srli_epi16(v1, 4), m4)};
    __m512i rows[4];
    transpose_x8(t, rows);
    alignas(32) float d[kInterleave];  // as in q8_0_group_bf16
    _mm256_store_ps(d, halves(x.d));
    INFERCAST_UNROLL
    for (int r = 0; r < kInterleave; ++r) {
      const __m512i table = nibble_table(d[r], 0.0F, 8.0F);
      store_bf16(dst + r * ld + b * kQk, _mm512_permutexvar_epi16(_mm512_cvtepu8_epi16(row_of(rows, r)), table));
    }
  }
}

void q5_0_group_bf16(const std::uint8_t* group, std::size_t cols, std::uint16_t* dst, std::size_t ld) {
  const auto* blocks = reinterpret_cast<const BlockQ5_0x8*>(group);
  for (std::size_t b = 0; b < cols / kQk; ++b) {
    const BlockQ5_0x8& x = blocks[b];
    __m512i t[4];
    q5_0_quants(x, t);
    __m512i rows[4];
    transpose_x8(t, rows);
    alignas(32) float scales[kInterleave];  // as in q8_0_group_bf16
    _mm256_store_ps(scales, halves(x.d));
    INFERCAST_UNROLL
    for (int r = 0; r < kInterleave; ++r) {
      const float d = scales[r];
      const __m512i table = five_bit_table(d, -16.0F * d);
      store_bf16(dst + r * ld + b * kQk, _mm512_permutexvar_epi16(_mm512_cvtepu8_epi16(row_of(rows, r)), table));
    }
  }
}

template <class X8>
void k4_group_bf16(const std::uint8_t* group, std::size_t cols, std::uint16_t* dst, std::size_t ld) {
  constexpr bool kFifthBit = std::is_same_v<X8, BlockQ5_Kx8>;
  const auto* blocks = reinterpret_cast<const X8*>(group);
  for (std::size_t b = 0; b < cols / kQkK; ++b) {
    const X8& x = blocks[b];
    alignas(64) float scale[8][kInterleave];
    alignas(64) float offset[8][kInterleave];
    k4_group_scales(x, scale, offset);
    __m512i qh[4];
    k4_fifth_bits(x, qh);
    for (int j = 0; j < 4; ++j) {
      __m512i q[2][4];
      k4_quants(x, qh, j, q[0], q[1]);
      for (int h = 0; h < 2; ++h) {
        __m512i rows[4];
        transpose_x8(q[h], rows);
        const int sub = 2 * j + h;
        INFERCAST_UNROLL
        for (int r = 0; r < kInterleave; ++r) {
          const __m512i table = k_table<kFifthBit>(scale[sub][r], offset[sub][r]);
          store_bf16(dst + r * ld + b * kQkK + 32 * sub, _mm512_permutexvar_epi16(_mm512_cvtepu8_epi16(row_of(rows, r)), table));
        }
      }
    }
  }
}

}  // namespace

void decode_gguf_row(GgmlType type, const std::uint8_t* row, std::size_t cols, const DecodedRows& out, std::size_t n) {
  switch (type) {
    case GgmlType::q8_0: return gguf_row<GgmlType::q8_0>(row, cols, out, n);
    case GgmlType::q4_0: return gguf_row<GgmlType::q4_0>(row, cols, out, n);
    case GgmlType::q5_0: return gguf_row<GgmlType::q5_0>(row, cols, out, n);
    case GgmlType::q4_k: return gguf_row<GgmlType::q4_k>(row, cols, out, n);
    case GgmlType::q5_k: return gguf_row<GgmlType::q5_k>(row, cols, out, n);
    case GgmlType::q6_k: return gguf_row<GgmlType::q6_k>(row, cols, out, n);
    default: break;
  }
}

void decode_x8_group(GgmlType type, const std::uint8_t* group, std::size_t cols, const DecodedRows& out,
                     std::size_t n0) {
  switch (type) {
    case GgmlType::q8_0: return q8_0_group(group, cols, out, n0);
    case GgmlType::q4_0: return q4_0_group(group, cols, out, n0);
    case GgmlType::q5_0: return q5_0_group(group, cols, out, n0);
    case GgmlType::q4_k: return k4_group<BlockQ4_Kx8>(group, cols, out, n0);
    case GgmlType::q5_k: return k4_group<BlockQ5_Kx8>(group, cols, out, n0);
    case GgmlType::q6_k: return q6_k_group(group, cols, out, n0);
    default: break;
  }
}

void decode_gguf_row_bf16(GgmlType type, const std::uint8_t* row, std::size_t cols, std::uint16_t* dst,
                          const DecodedRows& scratch) {
  switch (type) {
    case GgmlType::q8_0: return q8_0_row_bf16(row, cols, dst);
    case GgmlType::q4_0: return q4_0_row_bf16(row, cols, dst);
    case GgmlType::q5_0: return q5_0_row_bf16(row, cols, dst);
    case GgmlType::q4_k: return k4_row_bf16<false>(row, cols, dst);
    case GgmlType::q5_k: return k4_row_bf16<true>(row, cols, dst);
    case GgmlType::q6_k:
      decode_gguf_row(type, row, cols, scratch, 0);
      return decoded_rows_bf16(scratch, 1, cols, dst, 0);
    default: break;
  }
}

void decode_x8_group_bf16(GgmlType type, const std::uint8_t* group, std::size_t cols, std::uint16_t* dst, std::size_t ld,
                          const DecodedRows& scratch) {
  switch (type) {
    case GgmlType::q8_0: return q8_0_group_bf16(group, cols, dst, ld);
    case GgmlType::q4_0: return q4_0_group_bf16(group, cols, dst, ld);
    case GgmlType::q5_0: return q5_0_group_bf16(group, cols, dst, ld);
    case GgmlType::q4_k: return k4_group_bf16<BlockQ4_Kx8>(group, cols, dst, ld);
    case GgmlType::q5_k: return k4_group_bf16<BlockQ5_Kx8>(group, cols, dst, ld);
    case GgmlType::q6_k:
      decode_x8_group(type, group, cols, scratch, 0);
      return decoded_rows_bf16(scratch, kInterleave, cols, dst, ld);
    default: break;
  }
}

}  // namespace infercast
