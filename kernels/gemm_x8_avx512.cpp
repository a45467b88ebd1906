// AVX-512 VNNI kernels for the interleaved layout (kernels/interleave.h). A 512-bit load takes
// two consecutive 32-byte steps of a group of eight rows; one vpermd per load puts row r's two
// steps side by side in lanes 2r and 2r+1, so the eight activation quants they need are one
// 64-bit broadcast (vpbroadcastq) from the activation row as it was quantized. The permute is
// paid once per weight vector and shared by every activation row of a batch, which is where
// the 256-bit kernels spend most of their instructions (widening vpmaddubsw sums); vpdpbusd
// multiplies and accumulates 64 quant pairs in one instruction instead.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>

#include "kernels/formats.h"
#include "kernels/gemm_kernels.h"
#include "kernels/interleave.h"
#include "kernels/q8_0_avx512.h"
#include "kernels/simd_quantize.h"
#include "kernels/with_count.h"
#include "kernels/x8_prefetch.h"

namespace infercast {
namespace {

constexpr std::size_t kR = kInterleave;

// Lane 2r <- lane r (step t of row r), lane 2r+1 <- lane 8+r (step t+1 of row r).
INFERCAST_INLINE __m512i pair_steps(__m512i v) {
  const __m512i idx = _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
  return _mm512_permutexvar_epi32(idx, v);
}

INFERCAST_INLINE __m512i load_pair(const void* p) {
  return pair_steps(_mm512_loadu_si512(p));
}

// Lanes 2r and 2r+1 <- lane r (step t of row r), or lane 8+r (step t+1): the batch kernels'
// weights, one row per lane pair against two activation rows (see "Activation pairs").
INFERCAST_INLINE __m512i first_step_twice(__m512i v) {
  return _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7), v);
}
INFERCAST_INLINE __m512i second_step_twice(__m512i v) {
  return _mm512_permutexvar_epi32(_mm512_setr_epi32(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15), v);
}

// Eight activation quants (two dwords) in every lane pair.
INFERCAST_INLINE __m512i broadcast8(const std::int8_t* p) {
  std::int64_t v = 0;
  std::memcpy(&v, p, 8);
  return _mm512_set1_epi64(v);
}

// Eight fp16 row scales, each in both lanes of its row's pair.
INFERCAST_INLINE __m512 row_scales(const std::uint16_t* d) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(d));
  return _mm512_cvtph_ps(_mm256_set_m128i(_mm_unpackhi_epi16(h, h), _mm_unpacklo_epi16(h, h)));
}

// Eight 8-bit values (one per row), each in both lanes of its row's pair, as int32.
template <bool Signed>
INFERCAST_INLINE __m512i row_bytes8(const void* p) {
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  const __m128i twice = _mm_unpacklo_epi8(b, b);
  return Signed ? _mm512_cvtepi8_epi32(twice) : _mm512_cvtepu8_epi32(twice);
}

// Row r's output is lane 2r plus lane 2r+1.
INFERCAST_INLINE __m256 fold_pairs(__m512 v) {
  const __m512 s = _mm512_add_ps(v, _mm512_permute_ps(v, 0xB1));
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 0, 2, 4, 6, 8, 10, 12, 14);
  return _mm512_castps512_ps256(_mm512_permutexvar_ps(even, s));
}

// An offset added once per row: in the even lane of each pair only.
INFERCAST_INLINE __m512i once_per_row(std::int32_t v) { return _mm512_maskz_set1_epi32(0x5555, v); }

// The accumulators of a kernel's row groups. Zeroed by a loop GCC unrolls, and read back through
// in_register: GCC otherwise kept a copy of them in memory (from a range-for's zeroing, or to
// read a half of one for a store) and stored every accumulator again at each block.
template <int Ng, int Na>
INFERCAST_INLINE void zero_all(__m512 (&acc)[Ng][Na]) {
  INFERCAST_UNROLL
  for (int g = 0; g < Ng; ++g) {
    INFERCAST_UNROLL
    for (int a = 0; a < Na; ++a) acc[g][a] = _mm512_setzero_ps();
  }
}
INFERCAST_INLINE __m512 in_register(__m512 v) {
  asm("" : "+v"(v));
  return v;
}

// --- The sixteen-row kernel's helpers (see "Sixteen rows" below) ------------------------------

// acc += q . (the four quants at p, in every lane): the broadcast is vpdpbusd's own memory
// operand ({1to16}), which GCC 12 does not fold from _mm512_set1_epi32 but issues apart.
INFERCAST_INLINE __m512i dpbusd_broadcast4(__m512i acc, __m512i q, const std::int8_t* p) {
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(q), "m"(*reinterpret_cast<const std::int32_t*>(p)));
  return acc;
}

// Step t of group a in lanes 0-7 and of group b in lanes 8-15, from a load of each holding steps
// t (low half) and t+1 (high half); and step t+1 likewise.
INFERCAST_INLINE __m512i first_steps(__m512i a, __m512i b) {
  return _mm512_permutex2var_epi32(a, _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23), b);
}
INFERCAST_INLINE __m512i second_steps(__m512i a, __m512i b) {
  return _mm512_permutex2var_epi32(a, _mm512_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31), b);
}

// The sixteen rows' fp16 scales: group a's eight, then b's.
INFERCAST_INLINE __m512 row_scales16(const std::uint16_t* da, const std::uint16_t* db) {
  return _mm512_cvtph_ps(_mm256_set_m128i(_mm_loadu_si128(reinterpret_cast<const __m128i*>(db)),
                                          _mm_loadu_si128(reinterpret_cast<const __m128i*>(da))));
}

// --- Activations ------------------------------------------------------------------------------

// Q4_0 and Q8_0 take Q8_0 activations with the scale as a float and the block's offset ready:
// -8 x sum (Q4_0's nibbles are q + 8) or -128 x sum (Q8_0's quants are read as q + 128).
struct ActQ8_0 {
  float d;
  std::int32_t offset;
  std::int8_t qs[kQk];
};
static_assert(sizeof(ActQ8_0) == 40);

std::size_t act_q8_0_row(std::size_t cols) { return round_up(cols / kQk * sizeof(ActQ8_0), 64); }
std::size_t act_q8_k_row(std::size_t cols) { return round_up(cols / kQkK * sizeof(BlockQ8_K), 64); }
std::size_t packed_q8_0(std::size_t batch, std::size_t cols) { return batch * act_q8_0_row(cols); }
std::size_t packed_q8_k(std::size_t batch, std::size_t cols) { return batch * act_q8_k_row(cols); }

INFERCAST_INLINE std::int32_t quant_sum(__m512i q0, __m512i q1) { return _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1)); }

template <int OffsetPerUnit>
void pack_q8_0(const GemmCall& c, std::size_t begin, std::size_t end) {
  for (std::size_t b = begin; b < end; ++b) {
    auto* out = reinterpret_cast<ActQ8_0*>(c.packed + b * act_q8_0_row(c.cols));
    quantize_q8_0_blocks(c.x + b * c.ldx, c.cols / kQk, [&](std::size_t k, float d, std::uint16_t, __m512i q0, __m512i q1) {
      out[k].d = d;
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out[k].qs), _mm512_cvtepi32_epi8(q0));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out[k].qs + 16), _mm512_cvtepi32_epi8(q1));
      out[k].offset = -OffsetPerUnit * quant_sum(q0, q1);
    });
  }
}

// The batch kernels of Q4_0 and Q8_0 take their activation rows two at a time (see "Activation
// pairs" below): each quad of four quants of row a beside the same quad of row a+1, so that one
// 64-bit broadcast gives every even lane row a's quad and every odd lane row a+1's.
struct ActPairQ8_0 {
  float d[2];
  std::int32_t offset[2];
  std::int8_t qs[kQk / 4][2][4];  // qs[k][j][i]: element 4k+i of activation row a+j
};
static_assert(sizeof(ActPairQ8_0) == 80);

std::size_t act_pair_row(std::size_t cols) { return round_up(cols / kQk * sizeof(ActPairQ8_0), 64); }
std::size_t packed_pairs(std::size_t batch, std::size_t cols) { return (batch + 1) / 2 * act_pair_row(cols); }

// Rows [begin, end), begin even (the kernel's pack_step is 2, so no pair is shared between threads).
template <int OffsetPerUnit>
void pack_pairs(const GemmCall& c, std::size_t begin, std::size_t end) {
  const std::size_t blocks = c.cols / kQk;
  for (std::size_t b = begin; b < end; ++b) {
    auto* out = reinterpret_cast<ActPairQ8_0*>(c.packed + b / 2 * act_pair_row(c.cols));
    const std::size_t j = b % 2;
    quantize_q8_0_blocks(c.x + b * c.ldx, blocks, [&](std::size_t k, float d, std::uint16_t, __m512i q0, __m512i q1) {
      out[k].d[j] = d;
      out[k].offset[j] = -OffsetPerUnit * quant_sum(q0, q1);
      alignas(16) std::int8_t q[kQk];
      _mm_store_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtepi32_epi8(q0));
      _mm_store_si128(reinterpret_cast<__m128i*>(q + 16), _mm512_cvtepi32_epi8(q1));
      for (int g = 0; g < kQk / 4; ++g) std::memcpy(out[k].qs[g][j], q + 4 * g, 4);
    });
  }
  // An odd batch's last pair gets a row of zeros beside it: its outputs are never stored, but
  // leftover bytes could make them NaNs or denormals, which some cores compute slowly.
  if (end == c.batch && c.batch % 2 == 1) {
    auto* out = reinterpret_cast<ActPairQ8_0*>(c.packed + c.batch / 2 * act_pair_row(c.cols));
    for (std::size_t k = 0; k < blocks; ++k) {
      out[k].d[1] = 0;
      out[k].offset[1] = 0;
      for (auto& quad : out[k].qs) std::memset(quad[1], 0, 4);
    }
  }
}

void pack_q8_k(const GemmCall& c, std::size_t begin, std::size_t end) {
  const auto quantize = avx512_activation_quantizers().q8_k;
  for (std::size_t b = begin; b < end; ++b)
    quantize(c.x + b * c.ldx, reinterpret_cast<BlockQ8_K*>(c.packed + b * act_q8_k_row(c.cols)), c.cols);
}

struct Q8ActivationKernel {
  using Act = ActQ8_0;
  static constexpr std::size_t kElems = kQk;
  static constexpr int kMaxNa = 8;
  static constexpr int kTwoStreamBatch = 4;
  static constexpr int kGemvStreams = 3;  // every format here: see gemv_streams in x8_rows.inc
  static std::size_t act_row(std::size_t cols) { return act_q8_0_row(cols); }
};

// acc += (dot as float) x (row scales x the activation row's scale).
template <int Na>
INFERCAST_INLINE void add_scaled(const __m512i (&dot)[Na], __m512 dw, const ActQ8_0* const (&x)[Na],
                                 std::size_t b, __m512 (&acc)[Na]) {
  INFERCAST_UNROLL
  for (int a = 0; a < Na; ++a)
    acc[a] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[a]), _mm512_mul_ps(dw, _mm512_set1_ps(x[a][b].d)), acc[a]);
}

// A Q4_0/Q8_0 block's four unsigned weight vectors (elements 8p..8p+7 of each row in vector p)
// against Na activation rows: acc += (offset + dot) x row scales x activation scale.
template <int Na>
INFERCAST_INLINE void multiply_block(const __m512i (&q)[4], const std::uint16_t* d, const ActQ8_0* const (&x)[Na],
                                     std::size_t b, __m512 (&acc)[Na]) {
  __m512i dot[Na];
  INFERCAST_UNROLL
  for (int a = 0; a < Na; ++a) {
    const ActQ8_0& xa = x[a][b];
    dot[a] = once_per_row(xa.offset);
    INFERCAST_UNROLL
    for (int p = 0; p < 4; ++p) dot[a] = _mm512_dpbusd_epi32(dot[a], q[p], broadcast8(xa.qs + 8 * p));
  }
  add_scaled(dot, row_scales(d), x, b, acc);
}

// --- Q4_0 -------------------------------------------------------------------------------------

// The quants as the VNNI kernels multiply them, unsigned: Q8_0's as q + 128 (kernels/blocks.h
// has Q4_0's and Q5_0's).
int unsigned_quant(const BlockQ8_0& b, int j) { return b.qs[j] + 128; }

// A row past the last group of eight (GGUF layout) against one activation row, summed as the
// vector kernels sum it: unsigned quants, then the block's offset.
template <class Block>
float legacy_tail(const GemmCall& c, std::size_t r, const std::uint8_t* act) {
  const auto* w = reinterpret_cast<const Block*>(c.w + r * c.row_bytes);
  const auto* x = reinterpret_cast<const ActQ8_0*>(act);
  float sum = 0;
  for (std::size_t b = 0; b < c.cols / kQk; ++b) {
    int isum = x[b].offset;
    for (int j = 0; j < kQk; ++j) isum += unsigned_quant(w[b], j) * x[b].qs[j];
    sum += static_cast<float>(isum) * (_cvtsh_ss(w[b].d) * x[b].d);
  }
  return sum;
}

// The nibbles of a Q4_0/Q5_0 block as the single-row kernel multiplies them: q[p] holds
// elements 8p..8p+7 of row r in lanes 2r and 2r+1 (one permute per load, load_pair).
INFERCAST_INLINE void paired_nibbles(const std::uint8_t (&qs)[4][kInterleave][4], __m512i (&q)[4]) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i v0 = load_pair(qs[0]);  // elements 0-3 | 4-7 (low nibbles), 16-23 (high)
  const __m512i v1 = load_pair(qs[2]);  // elements 8-15 (low), 24-31 (high)
  q[0] = _mm512_and_si512(v0, m4);
  q[1] = _mm512_and_si512(v1, m4);
  q[2] = _mm512_and_si512(_mm512_srli_epi16(v0, 4), m4);
  q[3] = _mm512_and_si512(_mm512_srli_epi16(v1, 4), m4);
}

// Element group k (elements 4k..4k+3) of each row of a Q4_0/Q5_0 block in both lanes of its
// pair, in q[k]: the pairs kernels' weights.
INFERCAST_INLINE void duplicated_nibbles(const std::uint8_t (&qs)[4][kInterleave][4], __m512i (&q)[8]) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i v0 = _mm512_loadu_si512(qs[0]);  // steps 0, 1
  const __m512i v1 = _mm512_loadu_si512(qs[2]);  // steps 2, 3
  const __m512i s[4] = {first_step_twice(v0), second_step_twice(v0), first_step_twice(v1), second_step_twice(v1)};
  INFERCAST_UNROLL
  for (int t = 0; t < 4; ++t) {
    q[t] = _mm512_and_si512(s[t], m4);                              // elements 4t..4t+3
    q[4 + t] = _mm512_and_si512(_mm512_srli_epi16(s[t], 4), m4);  // elements 16+4t..
  }
}

// Steps of two Q4_0/Q5_0 groups a and b side by side (see "Sixteen rows"): q[k] against
// activation quants 4k..4k+3, the low nibbles of step t in q[t] and the high ones in q[4 + t].
INFERCAST_INLINE void sixteen_nibbles(const std::uint8_t (&a)[4][kInterleave][4], const std::uint8_t (&b)[4][kInterleave][4],
                                      __m512i (&q)[8]) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i a0 = _mm512_loadu_si512(a[0]);
  const __m512i b0 = _mm512_loadu_si512(b[0]);
  const __m512i a1 = _mm512_loadu_si512(a[2]);
  const __m512i b1 = _mm512_loadu_si512(b[2]);
  const __m512i s[4] = {first_steps(a0, b0), second_steps(a0, b0), first_steps(a1, b1), second_steps(a1, b1)};
  INFERCAST_UNROLL
  for (int t = 0; t < 4; ++t) {
    q[t] = _mm512_and_si512(s[t], m4);
    q[4 + t] = _mm512_and_si512(_mm512_srli_epi16(s[t], 4), m4);
  }
}

struct Q4_0x8 : Q8ActivationKernel {
  using X8 = BlockQ4_0x8;
  using Block = BlockQ4_0;
  static constexpr int kOffset = 8;
  // Batches of up to four rows (two pairs) on two streams in rows_pairs, which takes Q4_0 only
  // beyond kSixteenMaxBatch while the sixteen-row kernel serves the small batches. Three and
  // four pairs on two streams ran at 0.85-1.01x of one (batches 5-8, weights from DRAM, two
  // threads, Zen 5): its second group's decoding left the pairs kernel short of registers.
  static constexpr int kTwoStreamPairs = 2;

  template <int Na>
  INFERCAST_INLINE static void block(const X8& w, const Act* const (&x)[Na], std::size_t b, __m512 (&acc)[Na]) {
    prefetch_part<sizeof(X8), 1, kX8Ahead<Na>>(&w, 0);
    __m512i q[4];
    paired_nibbles(w.qs, q);
    multiply_block(q, w.d, x, b, acc);
  }

  // Element group k (elements 4k..4k+3) of each row in both lanes of its pair, in q[k].
  template <bool Prefetch>
  INFERCAST_INLINE static void duplicated(const X8& w, __m512i (&q)[8]) {
    if constexpr (Prefetch) prefetch_part<sizeof(X8), 1, kX8BatchAhead>(&w, 0);
    duplicated_nibbles(w.qs, q);
  }

  INFERCAST_INLINE static void sixteen(const X8& a, const X8& b, __m512i (&q)[8]) { sixteen_nibbles(a.qs, b.qs, q); }

  static float tail(const GemmCall& c, std::size_t r, const std::uint8_t* act) { return legacy_tail<BlockQ4_0>(c, r, act); }
};

// --- Q5_0 -------------------------------------------------------------------------------------

// Q4_0's kernel with the fifth bits added: the interleaved qh[p] is the byte mask of weight
// vector p (kernels/interleave.h), so each vector takes one masked add of 16, and the offset is
// -16 x sum. The GEMV and batches of two take this kernel; batches of three to eight the
// sixteen-row kernel and larger ones the pairs kernel (kQ5_0PairMinBatch), whose masks are
// reshuffled from the same bytes (sixteen and duplicated below).
struct Q5_0x8 : Q8ActivationKernel {
  using X8 = BlockQ5_0x8;
  using Block = BlockQ5_0;
  static constexpr int kOffset = 16;
  // Unused: two pairs on two streams are batches of up to four, and Q5_0's pairs start at nine.
  static constexpr int kTwoStreamPairs = Q4_0x8::kTwoStreamPairs;

  template <int Na>
  INFERCAST_INLINE static void block(const X8& w, const Act* const (&x)[Na], std::size_t b, __m512 (&acc)[Na]) {
    prefetch_part<sizeof(X8), 1, kX8Ahead<Na>>(&w, 0);
    const __m512i sixteen = _mm512_set1_epi8(16);
    __m512i q[4];
    paired_nibbles(w.qs, q);
    INFERCAST_UNROLL
    for (int p = 0; p < 4; ++p) {
      std::uint64_t bits = 0;
      std::memcpy(&bits, w.qh[p], sizeof bits);
      q[p] = _mm512_mask_add_epi8(q[p], _cvtu64_mask64(bits), q[p], sixteen);
    }
    multiply_block(q, w.d, x, b, acc);
  }

  // As Q4_0x8::duplicated: q[k] holds elements 4k..4k+3 of row r in both lanes of its pair, so
  // its mask takes nibble k % 2 of the row's qh byte k / 2 into both nibbles of mask byte r.
  template <bool Prefetch>
  INFERCAST_INLINE static void duplicated(const X8& w, __m512i (&q)[8]) {
    if constexpr (Prefetch) prefetch_part<sizeof(X8), 1, kX8BatchAhead>(&w, 0);
    duplicated_nibbles(w.qs, q);
    const __m512i sixteen = _mm512_set1_epi8(16);
    INFERCAST_UNROLL
    for (int p = 0; p < 4; ++p) {
      std::uint64_t bits = 0;
      std::memcpy(&bits, w.qh[p], sizeof bits);
      const std::uint64_t even = bits & 0x0F0F0F0F0F0F0F0FULL;
      const std::uint64_t odd = (bits >> 4) & 0x0F0F0F0F0F0F0F0FULL;
      q[2 * p] = _mm512_mask_add_epi8(q[2 * p], _cvtu64_mask64(even | even << 4), q[2 * p], sixteen);
      q[2 * p + 1] = _mm512_mask_add_epi8(q[2 * p + 1], _cvtu64_mask64(odd | odd << 4), q[2 * p + 1], sixteen);
    }
  }

  // As Q4_0x8::sixteen: q[k] holds elements 4k..4k+3 of group a's row r in lane r and of group
  // b's in lane 8 + r, so its mask takes nibble k % 2 of each row's qh byte k / 2 into mask bits
  // 4r..4r+3 (a) and 32+4r.. (b): a byte shuffle spreads the sixteen rows' qh bytes, a bit test
  // per nibble makes the two masks.
  INFERCAST_INLINE static void sixteen(const X8& a, const X8& b, __m512i (&q)[8]) {
    sixteen_nibbles(a.qs, b.qs, q);
    const __m512i sixteen = _mm512_set1_epi8(16);
    const __m512i row_byte = _mm512_set_epi32(0x0F0F0F0F, 0x0E0E0E0E, 0x0D0D0D0D, 0x0C0C0C0C, 0x0B0B0B0B, 0x0A0A0A0A,
                                              0x09090909, 0x08080808, 0x07070707, 0x06060606, 0x05050505, 0x04040404,
                                              0x03030303, 0x02020202, 0x01010101, 0x00000000);
    const __m512i low_nibble = _mm512_set1_epi32(0x08040201);
    const __m512i high_nibble = _mm512_set1_epi32(static_cast<int>(0x80402010U));
    INFERCAST_UNROLL
    for (int p = 0; p < 4; ++p) {
      const __m128i both = _mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(a.qh[p])),
                                              _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.qh[p])));
      const __m512i spread = _mm512_shuffle_epi8(_mm512_broadcast_i32x4(both), row_byte);
      q[2 * p] = _mm512_mask_add_epi8(q[2 * p], _mm512_test_epi8_mask(spread, low_nibble), q[2 * p], sixteen);
      q[2 * p + 1] = _mm512_mask_add_epi8(q[2 * p + 1], _mm512_test_epi8_mask(spread, high_nibble), q[2 * p + 1], sixteen);
    }
  }

  static float tail(const GemmCall& c, std::size_t r, const std::uint8_t* act) { return legacy_tail<BlockQ5_0>(c, r, act); }
};

// --- Q8_0 -------------------------------------------------------------------------------------

struct Q8_0x8 : Q8ActivationKernel {
  using X8 = BlockQ8_0x8;
  using Block = BlockQ8_0;
  static constexpr int kOffset = 128;
  // Batches of up to eight rows (four pairs) on two streams (rows_pairs): Q8_0 reads twice the
  // bytes of Q4_0 per product and stays bound by DRAM there; batches 5-8 ran 1.09-1.27x
  // faster than on one stream (weights from DRAM, two threads, Zen 5).
  static constexpr int kTwoStreamPairs = 4;

  // Its GEMV prefetches 2 KiB ahead, not 3: inside one process 1.03-1.05x the bytes per second
  // (three runs); TinyLlama Q8_0 decode 1.054 (0.912-1.115) and, in the other order, 1/0.973
  // against the previous build (eight pairs each; docs/PERFORMANCE.md, thirty-fourth session).
  static constexpr std::size_t kGemvAhead = 2048;
  template <int Na>
  INFERCAST_INLINE static void block(const X8& w, const Act* const (&x)[Na], std::size_t b, __m512 (&acc)[Na]) {
    prefetch_part<sizeof(X8), 1, Na == 1 ? kGemvAhead : kX8BatchAhead>(&w, 0);
    // vpdpbusd wants one unsigned side: q + 128, with -128 x sum in the activation's offset.
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
    __m512i q[4];
    INFERCAST_UNROLL
    for (int p = 0; p < 4; ++p) q[p] = _mm512_xor_si512(load_pair(w.qs[2 * p]), flip);
    multiply_block(q, w.d, x, b, acc);
  }

  template <bool Prefetch>
  INFERCAST_INLINE static void duplicated(const X8& w, __m512i (&q)[8]) {
    if constexpr (Prefetch) prefetch_part<sizeof(X8), 1, kX8BatchAhead>(&w, 0);
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
    INFERCAST_UNROLL
    for (int p = 0; p < 4; ++p) {
      const __m512i v = _mm512_xor_si512(_mm512_loadu_si512(w.qs[2 * p]), flip);
      q[2 * p] = first_step_twice(v);
      q[2 * p + 1] = second_step_twice(v);
    }
  }

  static float tail(const GemmCall& c, std::size_t r, const std::uint8_t* act) { return legacy_tail<BlockQ8_0>(c, r, act); }
};

// --- Q4_K and Q5_K ---------------------------------------------------------------------------

// The 6-bit scales and mins of an interleaved block (kernels/interleave.h), [sub-block][row]: the
// scales as int32, sub-blocks 2i and 2i+1 in sc[i]; the mins as int16, sub-blocks 0-3 in mn[0]
// and 4-7 in mn[1]. They stay in registers. Decoded through the stack (as the AVX2 kernel does)
// and reloaded a row's byte at a time, they held a Q4_K GEMV on one hot Zen 4 core to 28-30
// GB/s, against 39-41 with constant scales; this way, 33-35 (vpermw for the scales, 31-32).
struct K4x8Scales {
  __m512i sc[4];
  __m512i mn[2];
};

INFERCAST_INLINE K4x8Scales decode_k4x8_scales(const std::uint8_t* scales) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i top = _mm512_set1_epi8(0x30);
  const __m512i low = _mm512_loadu_si512(scales);
  const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales + 64));
  const __m512i high = _mm512_inserti64x4(_mm512_castsi256_si512(hb), hb, 1);
  // Top bits to bits 4-5: the scales' from bits 0-1 (sub-blocks 0-3) or 4-5 (4-7), the mins'
  // from bits 2-3 or 6-7. A 16-bit shift is exact here as the mask keeps each byte's own bits.
  const __m512i scale_top = _mm512_mask_mov_epi64(high, 0x0F, _mm512_slli_epi16(high, 4));
  const __m512i min_top = _mm512_mask_mov_epi64(_mm512_srli_epi16(high, 2), 0x0F, _mm512_slli_epi16(high, 2));
  // (a & c) | b with a = low bits, b = top bits masked, c = 0x0F: ternary-logic table 0xEC.
  const __m512i sc8 = _mm512_ternarylogic_epi32(low, _mm512_and_si512(scale_top, top), m4, 0xEC);
  const __m512i mn8 = _mm512_ternarylogic_epi32(_mm512_srli_epi16(low, 4), _mm512_and_si512(min_top, top), m4, 0xEC);
  K4x8Scales out;
  out.sc[0] = _mm512_cvtepu8_epi32(_mm512_castsi512_si128(sc8));
  out.sc[1] = _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(sc8, 1));
  out.sc[2] = _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(sc8, 2));
  out.sc[3] = _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(sc8, 3));
  out.mn[0] = _mm512_cvtepu8_epi16(_mm512_castsi512_si256(mn8));
  out.mn[1] = _mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(mn8, 1));
  return out;
}

// Sub-block k's scale of row r as int32 in lanes 2r and 2r+1. `k` is a constant once the
// callers' loops are unrolled, and so is the index vector.
INFERCAST_INLINE __m512i sub_block_scales(const K4x8Scales& s, int k) {
  const int f = 8 * (k % 2);
  const __m512i idx = _mm512_setr_epi32(f, f, f + 1, f + 1, f + 2, f + 2, f + 3, f + 3, f + 4, f + 4, f + 5, f + 5, f + 6,
                                        f + 6, f + 7, f + 7);
  return _mm512_permutexvar_epi32(idx, s.sc[k / 2]);
}

// Row r's scales of sub-blocks 2j and 2j+1 as an int16 pair, in lanes 2r and 2r+1 alike: in
// sc[j] as int16 elements, sub-block 2j's is element 2r and 2j+1's element 16 + 2r.
INFERCAST_INLINE __m512i sub_block_scale_pairs(const K4x8Scales& s, int j) {
  const __m512i idx = _mm512_set_epi16(30, 14, 30, 14, 28, 12, 28, 12, 26, 10, 26, 10, 24, 8, 24, 8, 22, 6, 22, 6, 20, 4,
                                       20, 4, 18, 2, 18, 2, 16, 0, 16, 0);
  return _mm512_permutexvar_epi16(idx, s.sc[j]);
}

// Row r's mins of sub-blocks 2j and 2j+1 as an int16 pair in lane 2r, lane 2r+1 zero.
INFERCAST_INLINE __m512i sub_block_min_pairs(const K4x8Scales& s, int j) {
  const auto kA = static_cast<short>(8 * (2 * j % 4));
  const auto kB = static_cast<short>(kA + 8);
  const __m512i idx = _mm512_set_epi16(0, 0, kB + 7, kA + 7, 0, 0, kB + 6, kA + 6, 0, 0, kB + 5, kA + 5, 0, 0, kB + 4, kA + 4,
                                       0, 0, kB + 3, kA + 3, 0, 0, kB + 2, kA + 2, 0, 0, kB + 1, kA + 1, 0, 0, kB, kA);
  return _mm512_maskz_permutexvar_epi16(0x33333333, idx, s.mn[j / 2]);
}

// Q5_K is Q4_K with a fifth bit per quant (its qh, laid out by step as the nibbles are), so one
// kernel serves both; without the bit, the Q4_K one.
//
// The fifth bit of the quants of sub-block k, bit k of a qh byte, moved to bit 4: within each
// byte, since bit 4 is reached from bit k by a shift of |4 - k| that stays inside the byte, and a
// 16-bit shift then a byte mask is exact. `k` is a constant once the sub-block loop is unrolled.
INFERCAST_INLINE __m512i shift_bit_to_4(__m512i qh, int k) {
  return k <= 4 ? _mm512_slli_epi16(qh, static_cast<unsigned>(4 - k)) : _mm512_srli_epi16(qh, static_cast<unsigned>(k - 4));
}

// q | (fifth & 0x10) in one instruction.
INFERCAST_INLINE __m512i with_fifth_bit(__m512i q, __m512i fifth) {
  return _mm512_ternarylogic_epi32(q, fifth, _mm512_set1_epi8(0x10), 0xF8);
}

// The dots of sub-blocks 2j (lo) and 2j+1 (hi) with an activation row's 64 quants from xq.
INFERCAST_INLINE void sub_block_dots(const __m512i (&lo)[4], const __m512i (&hi)[4], const std::int8_t* xq, __m512i& d0,
                                     __m512i& d1) {
  d0 = _mm512_setzero_si512();
  d1 = _mm512_setzero_si512();
  INFERCAST_UNROLL
  for (int p = 0; p < 4; ++p) {
    d0 = _mm512_dpbusd_epi32(d0, lo[p], broadcast8(xq + 8 * p));
    d1 = _mm512_dpbusd_epi32(d1, hi[p], broadcast8(xq + 32 + 8 * p));
  }
}

// Sub-blocks 2j and 2j+1 of a Q4_K block against Na activation rows, their scales `sc_pair`
// (sub_block_scale_pairs): isum += dot(2j) x scale(2j) + dot(2j+1) x scale(2j+1). A lane's dot
// is 16 products of a 4-bit quant and an activation in [-128, 127], so |dot| <= 16 x 15 x 128
// = 30720 fits int16: the two dots go side by side into one vector of int16 pairs, which one
// vpdpwssd multiplies by the scales and adds to the sum, where two 32-bit multiplies (vpmulld)
// and two adds did it, for one more shift per weight vector (sub-block 2j+1 brought down from
// its high nibble). Batches of four and more only; GEMV keeps the path it was tuned on.
template <int Na>
INFERCAST_INLINE void multiply_sub_block_pair(const __m512i (&lo)[4], const __m512i (&hi)[4], __m512i sc_pair,
                                              const BlockQ8_K* const (&x)[Na], std::size_t s, int j, __m512i (&isum)[Na]) {
  INFERCAST_UNROLL
  for (int a = 0; a < Na; ++a) {
    __m512i d0;
    __m512i d1;
    sub_block_dots(lo, hi, x[a][s].qs + 64 * j, d0, d1);
    const __m512i both = _mm512_mask_blend_epi16(0xAAAAAAAA, d0, _mm512_slli_epi32(d1, 16));
    isum[a] = _mm512_dpwssd_epi32(isum[a], both, sc_pair);
  }
}

template <class Block>
struct Kx8 {
  static constexpr bool kFifthBit = std::is_same_v<Block, BlockQ5_Kx8>;
  using X8 = Block;
  using Act = BlockQ8_K;
  static constexpr std::size_t kElems = kQkK;
  // Two sub-blocks' eight weight vectors and an integer sum per activation row stay in registers.
  // Q4_K takes eight activation rows at a time, which spreads a block's weight decoding over twice
  // the products (batch 64 in cache on a Zen 5 core pair, with the vpdpwssd scales: 830-840
  // GOPS, against 660-680 for four rows and vpmulld). Q5_K, whose fifth bits take four more
  // registers, stays at four: eight gained 5-8% from batch 16 and lost 2-4% at batch 8.
  static constexpr int kMaxNa = kFifthBit ? 4 : 8;
  // From four activation rows on, Q4_K multiplies its sub-block scales with vpdpwssd (see block).
  template <int Na>
  static constexpr bool kScalePairs = !kFifthBit && Na >= 4;
  // Two groups at once, two streams of DRAM requests in flight as in a GEMV, up to three rows:
  // batches 2 and 3 ran 12-25% faster than with one stream (4096-wide, weights from DRAM, two
  // threads on the Zen 5 guest, builds alternated). From four rows on, two groups spill these
  // registers: 0.77x at batch 4 (docs/PERFORMANCE.md, twenty-ninth session).
  static constexpr int kTwoStreamBatch = 3;
  static constexpr int kGemvStreams = 3;
  static std::size_t act_row(std::size_t cols) { return act_q8_k_row(cols); }

  template <int Na>
  INFERCAST_INLINE static void block(const X8& w, const Act* const (&x)[Na], std::size_t s, __m512 (&acc)[Na]) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const K4x8Scales scales = decode_k4x8_scales(w.scales);
    __m512i isum[Na];
    for (auto& v : isum) v = _mm512_setzero_si512();
    // Steps 2p, 2p+1 of the fifth bits, paired as the nibbles are (the same [step][row][byte]
    // order): bit k of a byte belongs to sub-block k.
    [[maybe_unused]] __m512i qh[4];
    if constexpr (kFifthBit) {
      INFERCAST_UNROLL
      for (int p = 0; p < 4; ++p) qh[p] = load_pair(w.qh[2 * p]);
    }
    INFERCAST_UNROLL
    for (int j = 0; j < 4; ++j) {
      prefetch_part<sizeof(X8), 4, kX8Ahead<Na>>(&w, j);
      __m512i lo[4];
      __m512i hi[4];
      INFERCAST_UNROLL
      for (int p = 0; p < 4; ++p) {
        const __m512i v = load_pair(w.qs[j][2 * p]);
        lo[p] = _mm512_and_si512(v, m4);  // sub-block 2j
        if constexpr (kFifthBit) {
          hi[p] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);  // sub-block 2j+1
          lo[p] = with_fifth_bit(lo[p], shift_bit_to_4(qh[p], 2 * j));
          hi[p] = with_fifth_bit(hi[p], shift_bit_to_4(qh[p], 2 * j + 1));
        } else if constexpr (kScalePairs<Na>) {
          hi[p] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);  // sub-block 2j+1
        } else {
          // Sub-block 2j+1 left in the high nibble: 16 x its quants, one instruction fewer.
          hi[p] = _mm512_andnot_si512(m4, v);
        }
      }
      // Below four activation rows, without the fifth bit, both sub-blocks' sums come out 16 x too
      // large (the low one by its scale). A lane holds 16 of a sub-block's 32 products, so it stays below
      // 8 sub-blocks x 16 x 63 x 15 x 128 x 16 < 2^28 (tested), and the 1/16 is exact in the float scale.
      if constexpr (kScalePairs<Na>) {
        multiply_sub_block_pair<Na>(lo, hi, sub_block_scale_pairs(scales, j), x, s, j, isum);
        continue;
      }
      const __m512i sc_lo = kFifthBit ? sub_block_scales(scales, 2 * j) : _mm512_slli_epi32(sub_block_scales(scales, 2 * j), 4);
      const __m512i sc_hi = sub_block_scales(scales, 2 * j + 1);
      INFERCAST_UNROLL
      for (int a = 0; a < Na; ++a) {
        const std::int8_t* xq = x[a][s].qs + 64 * j;
        // Hidden from the optimiser: in a GEMV's two groups GCC shared these broadcasts, held all
        // 32 of a block at once and spilled them to the stack. Loaded again per group, each is
        // one load: Q4_K GEMV hot in cache 52 -> 59 GB/s on one core, 4096x4096 76-79 -> 88-98.
        asm volatile("" : "+r"(xq));
        __m512i d0;
        __m512i d1;
        sub_block_dots(lo, hi, xq, d0, d1);
        isum[a] = _mm512_add_epi32(isum[a], _mm512_add_epi32(_mm512_mullo_epi32(d0, sc_lo), _mm512_mullo_epi32(d1, sc_hi)));
      }
    }
    // Mins against the activations' (sum 2j, sum 2j+1).
    const __m512i mins[4] = {sub_block_min_pairs(scales, 0), sub_block_min_pairs(scales, 1),
                             sub_block_min_pairs(scales, 2), sub_block_min_pairs(scales, 3)};
    const __m512 dw = kFifthBit || kScalePairs<Na> ? row_scales(w.d) : _mm512_mul_ps(row_scales(w.d), _mm512_set1_ps(1.0F / 16));
    const __m512 dmw = row_scales(w.dmin);
    INFERCAST_UNROLL
    for (int a = 0; a < Na; ++a) {
      const Act& xa = x[a][s];
      alignas(16) std::int32_t sums[4];
      _mm_store_si128(reinterpret_cast<__m128i*>(sums),
                      _mm_hadd_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xa.bsums)),
                                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(xa.bsums + 8))));
      __m512i msum = _mm512_madd_epi16(mins[0], _mm512_set1_epi32(sums[0]));
      INFERCAST_UNROLL
      for (int j = 1; j < 4; ++j) msum = _mm512_dpwssd_epi32(msum, mins[j], _mm512_set1_epi32(sums[j]));
      const __m512 da = _mm512_set1_ps(xa.d);
      acc[a] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[a]), _mm512_mul_ps(dw, da), acc[a]);
      acc[a] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum), _mm512_mul_ps(dmw, da), acc[a]);
    }
  }

  static float tail(const GemmCall& c, std::size_t r, const std::uint8_t* act) {
    return format_info(kFifthBit ? GgmlType::q5_k : GgmlType::q4_k).dot(c.w + r * c.row_bytes, act, c.cols);
  }
};
using Q4_Kx8 = Kx8<BlockQ4_Kx8>;
using Q5_Kx8 = Kx8<BlockQ5_Kx8>;

// --- Q6_K -------------------------------------------------------------------------------------

struct Q6_Kx8 {
  using X8 = BlockQ6_Kx8;
  using Act = BlockQ8_K;
  static constexpr std::size_t kElems = kQkK;
  // Eight activation rows share each decoded 16-quant group: batches 8 to 64 in cache on a Zen 5
  // core pair ran 11-16% faster than with four (batch 8 504-563 -> 585-658 GOPS).
  static constexpr int kMaxNa = 8;
  static constexpr int kTwoStreamBatch = 4;
  static constexpr int kGemvStreams = 3;
  static std::size_t act_row(std::size_t cols) { return act_q8_k_row(cols); }

  template <int Na>
  INFERCAST_INLINE static void block(const X8& w, const Act* const (&x)[Na], std::size_t s, __m512 (&acc)[Na]) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i top = _mm512_set1_epi8(0x30);
    // Bits 2p, 2p+1 of a qh byte to bits 4, 5: even lanes hold step p = 0 (or 2), odd p = 1 (3).
    const __m512i left01 = _mm512_setr_epi32(4, 2, 4, 2, 4, 2, 4, 2, 4, 2, 4, 2, 4, 2, 4, 2);
    const __m512i right23 = _mm512_setr_epi32(0, 2, 0, 2, 0, 2, 0, 2, 0, 2, 0, 2, 0, 2, 0, 2);
    const __m512i dup = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    // -32 x each 16-quant sum: the six-bit quants are q + 32.
    alignas(64) std::int32_t offsets[Na][16];
    INFERCAST_UNROLL
    for (int a = 0; a < Na; ++a) {
      const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[a][s].bsums));
      _mm512_store_si512(offsets[a], _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(_mm512_cvtepi16_epi32(bs), 5)));
    }
    __m512i isum[Na];
    for (auto& v : isum) v = _mm512_setzero_si512();
    for (int u = 0; u < 8; ++u) {
      prefetch_part_at<sizeof(X8), 8, kX8Ahead<Na>>(&w, u);
      const __m512i l01 = load_pair(w.ql[u][0]);
      const __m512i l23 = load_pair(w.ql[u][2]);
      INFERCAST_UNROLL
      for (int h = 0; h < 2; ++h) {
        const __m512i qh = _mm512_permutexvar_epi32(
            dup, _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.qh[u][h]))));
        const __m512i low01 = h == 0 ? l01 : _mm512_srli_epi16(l01, 4);
        const __m512i low23 = h == 0 ? l23 : _mm512_srli_epi16(l23, 4);
        const __m512i q01 = _mm512_or_si512(_mm512_and_si512(low01, m4), _mm512_and_si512(_mm512_sllv_epi32(qh, left01), top));
        const __m512i q23 = _mm512_or_si512(_mm512_and_si512(low23, m4), _mm512_and_si512(_mm512_srlv_epi32(qh, right23), top));
        const int g = 2 * u + h;
        const __m512i scale = row_bytes8<true>(w.scales[g]);
        INFERCAST_UNROLL
        for (int a = 0; a < Na; ++a) {
          const std::int8_t* xq = x[a][s].qs + 16 * g;
          __m512i dot = once_per_row(offsets[a][g]);
          dot = _mm512_dpbusd_epi32(dot, q01, broadcast8(xq));
          dot = _mm512_dpbusd_epi32(dot, q23, broadcast8(xq + 8));
          isum[a] = _mm512_add_epi32(isum[a], _mm512_mullo_epi32(dot, scale));
        }
      }
    }
    const __m512 dw = row_scales(w.d);
    INFERCAST_UNROLL
    for (int a = 0; a < Na; ++a)
      acc[a] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[a]), _mm512_mul_ps(dw, _mm512_set1_ps(x[a][s].d)), acc[a]);
  }

  static float tail(const GemmCall& c, std::size_t r, const std::uint8_t* act) {
    return format_info(GgmlType::q6_k).dot(c.w + r * c.row_bytes, act, c.cols);
  }
};

// Ng groups of eight rows against Na activation rows: one pass over the blocks, each group its
// own sequential stream.
template <class K, int Ng, int Na>
void groups(const GemmCall& c, std::size_t r0, std::size_t stride, std::size_t b0) {
  const typename K::X8* w[Ng];
  for (int g = 0; g < Ng; ++g) w[g] = reinterpret_cast<const typename K::X8*>(c.w + (r0 + g * stride) * c.row_bytes);
  const typename K::Act* x[Na];
  for (int a = 0; a < Na; ++a) x[a] = reinterpret_cast<const typename K::Act*>(c.packed + (b0 + a) * K::act_row(c.cols));
  __m512 acc[Ng][Na];
  zero_all(acc);
  for (std::size_t b = 0; b < c.cols / K::kElems; ++b) {
    INFERCAST_UNROLL
    for (int g = 0; g < Ng; ++g) K::template block<Na>(w[g][b], x, b, acc[g]);
  }
  INFERCAST_UNROLL
  for (int g = 0; g < Ng; ++g) {
    INFERCAST_UNROLL
    for (int a = 0; a < Na; ++a) _mm256_storeu_ps(c.y + (b0 + a) * c.ldy + r0 + g * stride, fold_pairs(in_register(acc[g][a])));
  }
}

constexpr const char* kX8KernelName = "avx512_x8";
#include "kernels/x8_rows.inc"

// --- Activation pairs -------------------------------------------------------------------------
//
// The Q4_0 and Q8_0 batch kernels: lane 2r holds weight row r against activation row a, lane
// 2r+1 the same row against a+1, so every lane is one output. The single-row kernel above gives
// a row two lanes (two steps of four quants) and pays a block's float work (convert, scale, FMA)
// and its offset for both; at batch 8 that work cost it 30-40% of its time. Here it is paid once
// per lane, that is once per two activation rows, for a second permute per weight load that the
// whole batch shares. On Zen 4 that gained 4-14% at batches 4 to 64 with the weights in cache,
// and nothing measurable with them in DRAM (docs/PERFORMANCE.md, fifteenth session).

// Each pair's eight vpdpbusd run as two dependent chains of four: with one chain of eight, even
// eight pairs in flight left the VNNI units waiting on latency (Zen 5, alternated rounds: two
// chains 2-7% faster at batches 8-64, equal at 4; four chains slower; docs/PERFORMANCE.md,
// twentieth session).
template <class K, int Ng, int Np>
INFERCAST_INLINE void pair_block(const typename K::X8& w, const ActPairQ8_0* const (&x)[Np], std::size_t b,
                                 __m512 (&acc)[Np]) {
  // From three pairs on, the block's prefetches are spread over the pairs (see kX8SpreadAhead).
  constexpr bool kSpread = Np >= 3;
  constexpr int kLines = static_cast<int>((sizeof(typename K::X8) + 63) / 64);
  constexpr int kParts = std::min(Np, kLines);
  __m512i q[8];
  K::template duplicated<!kSpread>(w, q);
  const __m512 dw = row_scales(w.d);
  INFERCAST_UNROLL
  for (int p = 0; p < Np; ++p) {
    if constexpr (kSpread) {
      if (p < kParts) prefetch_part<sizeof(typename K::X8), kParts, kX8SpreadAhead>(&w, p);
    }
    const ActPairQ8_0* xp = &x[p][b];
    // Hidden from the optimiser when two groups share the pairs, as in Kx8::block: GCC held
    // both groups' broadcasts at once and spilled them (Q8_0 batch 8 on two streams 0.92x of one
    // stream, against 1.10x with this).
    if constexpr (Ng == 2) asm volatile("" : "+r"(xp));
    const ActPairQ8_0& xa = *xp;
    __m512i dot[2] = {broadcast8(reinterpret_cast<const std::int8_t*>(xa.offset)), _mm512_setzero_si512()};
    INFERCAST_UNROLL
    for (int k = 0; k < 8; ++k) dot[k % 2] = _mm512_dpbusd_epi32(dot[k % 2], q[k], broadcast8(xa.qs[k][0]));
    dot[0] = _mm512_add_epi32(dot[0], dot[1]);
    const __m512 da = _mm512_castsi512_ps(broadcast8(reinterpret_cast<const std::int8_t*>(xa.d)));
    acc[p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[0]), _mm512_mul_ps(dw, da), acc[p]);
  }
}

// Ng groups of eight rows against Np pairs of activation rows from pair p0.
template <class K, int Ng, int Np>
void pair_groups(const GemmCall& c, std::size_t r0, std::size_t stride, std::size_t p0) {
  const typename K::X8* w[Ng];
  for (int g = 0; g < Ng; ++g) w[g] = reinterpret_cast<const typename K::X8*>(c.w + (r0 + g * stride) * c.row_bytes);
  const ActPairQ8_0* x[Np];
  for (int p = 0; p < Np; ++p) x[p] = reinterpret_cast<const ActPairQ8_0*>(c.packed + (p0 + p) * act_pair_row(c.cols));
  __m512 acc[Ng][Np];
  zero_all(acc);
  for (std::size_t b = 0; b < c.cols / kQk; ++b) {
    INFERCAST_UNROLL
    for (int g = 0; g < Ng; ++g) pair_block<K, Ng, Np>(w[g][b], x, b, acc[g]);
  }
  const __m512i split = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  INFERCAST_UNROLL
  for (int g = 0; g < Ng; ++g) {
    INFERCAST_UNROLL
    for (int p = 0; p < Np; ++p) {
      const __m512 v = _mm512_permutexvar_ps(split, in_register(acc[g][p]));
      const std::size_t a = 2 * (p0 + p);
      float* y = c.y + a * c.ldy + r0 + g * stride;
      _mm256_storeu_ps(y, _mm512_castps512_ps256(v));
      if (a + 1 < c.batch) _mm256_storeu_ps(y + c.ldy, _mm512_extractf32x8_ps(v, 1));
    }
  }
}

// Row r against activation row j of a pair, in the GGUF layout (the rows past the last group).
template <class K>
float pair_tail(const GemmCall& c, std::size_t r, const ActPairQ8_0* x, std::size_t j) {
  const auto* w = reinterpret_cast<const typename K::Block*>(c.w + r * c.row_bytes);
  float sum = 0;
  for (std::size_t b = 0; b < c.cols / kQk; ++b) {
    int isum = x[b].offset[j];
    for (int e = 0; e < kQk; ++e) isum += unsigned_quant(w[b], e) * x[b].qs[e / 4][j][e % 4];
    sum += static_cast<float>(isum) * (_cvtsh_ss(w[b].d) * x[b].d[j]);
  }
  return sum;
}

// As rows_x8: up to K::kTwoStreamPairs pairs take two groups at once from the two halves of the
// thread's rows; more go through in chunks that stay in L2, kMaxPairs at a time and the rest in
// one pass.
template <class K>
void rows_pairs(const GemmCall& c, std::size_t begin, std::size_t end, std::uint8_t*) {
  constexpr std::size_t kMaxPairs = 8;
  constexpr int kTwoStreamPairs = K::kTwoStreamPairs;
  static_assert(kTwoStreamPairs >= 1 && kTwoStreamPairs <= 4);
  const std::size_t pairs = (c.batch + 1) / 2;
  const std::size_t row = act_pair_row(c.cols);
  const std::size_t full = std::min(end, c.rows / kR * kR);
  if (pairs <= kTwoStreamPairs) {
    with_count<kTwoStreamPairs>(pairs, [&](auto np) {
      constexpr int kNp = decltype(np)::value;
      constexpr std::size_t kHead = kNp >= 3 ? kX8SpreadAhead : kX8BatchAhead;  // as far as the blocks reach
      in_two_streams(
          c, begin, full, kHead, [&](std::size_t r, std::size_t stride) { pair_groups<K, 2, kNp>(c, r, stride, 0); },
          [&](std::size_t r) { pair_groups<K, 1, kNp>(c, r, 0, 0); });
    });
  } else {
    const std::size_t chunk = std::max(kMaxPairs, (std::size_t{256} << 10) / row / kMaxPairs * kMaxPairs);
    for (std::size_t p0 = 0; p0 < pairs; p0 += chunk) {
      const std::size_t p1 = std::min(pairs, p0 + chunk);
      for (std::size_t r = begin; r < full; r += kR) {
        in_passes<kMaxPairs>(p0, p1, [&](auto np, std::size_t p) { pair_groups<K, 1, decltype(np)::value>(c, r, 0, p); });
      }
    }
  }
  for (std::size_t r = std::max(begin, full); r < end; ++r) {
    for (std::size_t a = 0; a < c.batch; ++a) {
      c.y[a * c.ldy + r] = pair_tail<K>(c, r, reinterpret_cast<const ActPairQ8_0*>(c.packed + a / 2 * row), a % 2);
    }
  }
}

// --- Sixteen rows -----------------------------------------------------------------------------
//
// Q4_0's small batches (kSixteenMinBatch to kSixteenMaxBatch rows): two groups of eight rows
// side by side, row r of the first group in lane r and of the second in lane 8 + r, one step
// (four quants) of each. Every lane is one output against one activation row, so the row's four
// activation quants of a step are a 32-bit broadcast that vpdpbusd reads from memory itself,
// where the pairs kernel spends a separate 64-bit broadcast per step and activation pair (about
// a third of its instructions). Each weight permute serves sixteen rows, not eight, and the two
// groups come from the two halves of the thread's rows: two streams of DRAM requests, which
// the pairs kernel could not afford from three pairs on (see Q4_0x8::kTwoStreamPairs).
//
// Weights from DRAM, two threads, Zen 5, against the kernels it replaced (medians of alternated
// runs): batches 3, 4 and 12 1.03-1.43x in every run and shape; batch 8 0.89-1.19x over four
// runs, no steady gain; in the engine (TinyLlama Q4_0) 1.06x at C=4 and nothing measurable at
// C=8. Q8_0 gained nothing (0.95-1.07x at batches 4-16) and keeps its pairs.

// A block of two groups against Na activation rows: q[k] (K::sixteen) multiplies activation
// quants 4k..4k+3, the offset goes into every lane, and the dots run as two chains for the
// reason pair_block gives.
template <class K, int Na>
INFERCAST_INLINE void sixteen_block(const typename K::X8& wa, const typename K::X8& wb, const ActQ8_0* const (&x)[Na],
                                    std::size_t b, __m512 (&acc)[Na]) {
  // From six activation rows on, a line of the groups' three each before each of the first six
  // rows (see kX8SpreadAhead).
  constexpr bool kSpread = Na >= 6;
  static_assert(sizeof(typename K::X8) <= 3 * 64);
  if constexpr (!kSpread) {
    prefetch_part<sizeof(typename K::X8), 1, kX8BatchAhead>(&wa, 0);
    prefetch_part<sizeof(typename K::X8), 1, kX8BatchAhead>(&wb, 0);
  }
  __m512i q[8];
  K::sixteen(wa, wb, q);
  const __m512 dw = row_scales16(wa.d, wb.d);
  INFERCAST_UNROLL
  for (int a = 0; a < Na; ++a) {
    if constexpr (kSpread) {
      if (a < 3) prefetch_part<sizeof(typename K::X8), 3, kX8SpreadAhead>(&wa, a);
      if (a >= 3 && a < 6) prefetch_part<sizeof(typename K::X8), 3, kX8SpreadAhead>(&wb, a - 3);
    }
    const ActQ8_0& xa = x[a][b];
    __m512i dot[2] = {_mm512_set1_epi32(xa.offset), _mm512_setzero_si512()};
    INFERCAST_UNROLL
    for (int k = 0; k < 8; ++k) dot[k % 2] = dpbusd_broadcast4(dot[k % 2], q[k], xa.qs + 4 * k);
    acc[a] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(dot[0], dot[1])), _mm512_mul_ps(dw, _mm512_set1_ps(xa.d)),
                             acc[a]);
  }
}

// Groups r0 and r0 + stride against activation rows b0..b0+Na-1.
template <class K, int Na>
void sixteen_groups(const GemmCall& c, std::size_t r0, std::size_t stride, std::size_t b0) {
  using X8 = typename K::X8;
  const auto* wa = reinterpret_cast<const X8*>(c.w + r0 * c.row_bytes);
  const auto* wb = reinterpret_cast<const X8*>(c.w + (r0 + stride) * c.row_bytes);
  const ActQ8_0* x[Na];
  for (int a = 0; a < Na; ++a) x[a] = reinterpret_cast<const ActQ8_0*>(c.packed + (b0 + a) * act_q8_0_row(c.cols));
  __m512 acc[1][Na];
  zero_all(acc);
  for (std::size_t b = 0; b < c.cols / kQk; ++b) sixteen_block<K, Na>(wa[b], wb[b], x, b, acc[0]);
  INFERCAST_UNROLL
  for (int a = 0; a < Na; ++a) {
    const __m512 v = in_register(acc[0][a]);
    float* y = c.y + (b0 + a) * c.ldy;
    _mm256_storeu_ps(y + r0, _mm512_castps512_ps256(v));
    _mm256_storeu_ps(y + r0 + stride, _mm512_extractf32x8_ps(v, 1));
  }
}

// The thread's groups two at a time from its two halves (in_two_streams), each pair against
// every activation row in passes of eight. An odd last group goes beside itself: both halves of
// each vector compute its rows alike and store the same values, so an output does not depend on
// how the rows were split. At most fifteen activation rows stay in L2 without chunking.
template <class K>
void rows_sixteen(const GemmCall& c, std::size_t begin, std::size_t end, std::uint8_t*) {
  constexpr std::size_t kNa = 8;
  const auto all_rows = [&](std::size_t r, std::size_t stride) {
    in_passes<kNa>(0, c.batch, [&](auto na, std::size_t b) { sixteen_groups<K, decltype(na)::value>(c, r, stride, b); });
  };
  const std::size_t full = std::min(end, c.rows / kR * kR);
  // The head a stream's blocks do not prefetch: as far ahead as its first pass's blocks reach.
  const std::size_t head = std::min<std::size_t>(c.batch, kNa) >= 6 ? kX8SpreadAhead : kX8BatchAhead;
  in_two_streams(c, begin, full, head, all_rows, [&](std::size_t r) { all_rows(r, 0); });
  const std::size_t row = act_q8_0_row(c.cols);
  for (std::size_t r = std::max(begin, full); r < end; ++r) {
    for (std::size_t b = 0; b < c.batch; ++b) c.y[b * c.ldy + r] = K::tail(c, r, c.packed + b * row);
  }
}

// --- Thirty-two rows -------------------------------------------------------------------------
//
// Q4_0's batches of kThirtyTwoMinBatch to kSixteenMaxBatch rows take four groups at a time,
// two sixteen-row vectors as above, so that each activation broadcast serves two vpdpbusd. On
// Zen 5 the sixteen-row kernel's loads cost as much as its multiplies: each of its vpdpbusd
// takes its broadcast from memory, and the core issues two vector loads per cycle, as many as
// vpdpbusd; vmulps, vfmadd and vpermt2d share vpdpbusd's two pipes, while the integer and convert
// work of a block runs beside them (`infercast_bench_kernels --benchmark_filter=vnni_company`;
// docs/PERFORMANCE.md, forty-second session). Here a broadcast is loaded into a register once
// for the two vectors: half the loads per vpdpbusd.
//
// The quants are decoded one step at a time in the order the activation quants are taken (step
// outermost, activation rows innermost), so the two vectors' eight steps are never live at once
// and the sixteen dot chains (two per activation row) keep their registers; with eight
// activation rows the float accumulators live in memory, touched once per block. Taking the
// activation rows outermost instead, all sixteen steps decoded up front, ran 0.92x the
// sixteen-row kernel in a standalone copy of the block loop (weights in L2, one core), this
// order 1.08-1.20x; in the kernel itself, 1.12x on one core in cache (`gemm_hot`).
//
// The four groups are one from each quarter of the thread's rows: four DRAM streams, each
// running on into its next group as the prefetches expect (the sixteen-row kernel's two halves,
// halved), each half as far ahead as the sixteen-row kernel's two, so the same bytes are in
// flight. TinyLlama Q4_0 at eight users, alternated (docs/PERFORMANCE.md, forty-second session):
// 1.03x the decode of 3 KiB ahead, 1 and 2 KiB no better than 1.5. The heads of four streams
// hold each call at its start, prefetchnta waiting for miss buffers: 3% of a decode's samples
// with heads of 3 KiB, 2% with 1.5 KiB.
constexpr std::size_t kX32Ahead = kX8SpreadAhead / 2;

template <int Na>
void thirty_two_groups(const GemmCall& c, std::size_t r0, std::size_t quarter, std::size_t b0) {
  using X8 = BlockQ4_0x8;
  const X8* w[4];
  for (int g = 0; g < 4; ++g) w[g] = reinterpret_cast<const X8*>(c.w + (r0 + g * quarter) * c.row_bytes);
  const ActQ8_0* x[Na];
  for (int a = 0; a < Na; ++a) x[a] = reinterpret_cast<const ActQ8_0*>(c.packed + (b0 + a) * act_q8_0_row(c.cols));
  __m512 acc[2][Na];
  zero_all(acc);
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  for (std::size_t b = 0; b < c.cols / kQk; ++b) {
    __m512i dot[2][Na];  // [vector][activation row]: groups 0 and 1 in the first vector, 2 and 3 in the second
    INFERCAST_UNROLL
    for (int a = 0; a < Na; ++a) dot[0][a] = dot[1][a] = _mm512_set1_epi32(x[a][b].offset);
    INFERCAST_UNROLL
    for (int h = 0; h < 2; ++h) {
      __m512i steps[2][2];  // steps 2h and 2h+1 of each vector (sixteen_nibbles before the nibbles are split)
      INFERCAST_UNROLL
      for (int v = 0; v < 2; ++v) {
        const __m512i first = _mm512_loadu_si512(w[2 * v][b].qs[2 * h]);
        const __m512i second = _mm512_loadu_si512(w[2 * v + 1][b].qs[2 * h]);
        steps[v][0] = first_steps(first, second);
        steps[v][1] = second_steps(first, second);
      }
      INFERCAST_UNROLL
      for (int j = 0; j < 2; ++j) {
        const int t = 2 * h + j;
        prefetch_part<sizeof(X8), 1, kX32Ahead>(&w[t][b], 0);  // group t's lines, once per block
        INFERCAST_UNROLL
        for (int high = 0; high < 2; ++high) {
          const int k = t + 4 * high;  // activation quants 4k..4k+3
          __m512i q[2];
          INFERCAST_UNROLL
          for (int v = 0; v < 2; ++v) q[v] = _mm512_and_si512(high ? _mm512_srli_epi16(steps[v][j], 4) : steps[v][j], m4);
          INFERCAST_UNROLL
          for (int a = 0; a < Na; ++a) {
            std::int32_t quad = 0;
            std::memcpy(&quad, x[a][b].qs + 4 * k, 4);
            const __m512i broadcast = _mm512_set1_epi32(quad);
            dot[0][a] = _mm512_dpbusd_epi32(dot[0][a], q[0], broadcast);
            dot[1][a] = _mm512_dpbusd_epi32(dot[1][a], q[1], broadcast);
          }
        }
      }
    }
    const __m512 dw[2] = {row_scales16(w[0][b].d, w[1][b].d), row_scales16(w[2][b].d, w[3][b].d)};
    INFERCAST_UNROLL
    for (int a = 0; a < Na; ++a) {
      const __m512 da = _mm512_set1_ps(x[a][b].d);
      INFERCAST_UNROLL
      for (int v = 0; v < 2; ++v) acc[v][a] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[v][a]), _mm512_mul_ps(dw[v], da), acc[v][a]);
    }
  }
  INFERCAST_UNROLL
  for (int a = 0; a < Na; ++a) {
    float* y = c.y + (b0 + a) * c.ldy + r0;
    INFERCAST_UNROLL
    for (int v = 0; v < 2; ++v) {
      const __m512 out = in_register(acc[v][a]);
      _mm256_storeu_ps(y + 2 * v * quarter, _mm512_castps512_ps256(out));
      _mm256_storeu_ps(y + (2 * v + 1) * quarter, _mm512_extractf32x8_ps(out, 1));
    }
  }
}

// The thread's whole quarters four groups at a time, each against every activation row in
// passes of eight; the rest (fewer than four groups, and the rows past the last group) as
// rows_sixteen takes them. The kernel's row step is four groups, so that only a matrix's last
// run has groups left over: with a step of one group, the runs of the guided schedule left
// a tenth of a TinyLlama decode's kernel time to the sixteen-row kernel.
void rows_thirty_two(const GemmCall& c, std::size_t begin, std::size_t end, std::uint8_t* scratch) {
  constexpr std::size_t kNa = 8;
  const std::size_t full = std::min(end, c.rows / kR * kR);
  const std::size_t quarter = (full > begin ? (full - begin) / kR : 0) / 4 * kR;
  if (quarter > 0) {
    for (int g = 0; g < 4; ++g) prefetch_head(c.w + (begin + g * quarter) * c.row_bytes, quarter * c.row_bytes, kX32Ahead);
    for (std::size_t r = begin; r < begin + quarter; r += kR) {
      in_passes<kNa>(0, c.batch, [&](auto na, std::size_t b) { thirty_two_groups<decltype(na)::value>(c, r, quarter, b); });
    }
  }
  rows_sixteen<Q4_0x8>(c, begin + 4 * quarter, end, scratch);
}

const GemmKernel kThirtyTwoKernel{"avx512_x32", GgmlType::q4_0, packed_q8_0, pack_q8_0<Q4_0x8::kOffset>, 1, rows_thirty_two, 4 * kR, nullptr};

const std::array kSixteenKernels = {
    GemmKernel{"avx512_x16", GgmlType::q4_0, packed_q8_0, pack_q8_0<Q4_0x8::kOffset>, 1, rows_sixteen<Q4_0x8>, kR, nullptr},
    GemmKernel{"avx512_x16", GgmlType::q5_0, packed_q8_0, pack_q8_0<Q5_0x8::kOffset>, 1, rows_sixteen<Q5_0x8>, kR, nullptr},
};

const std::array kPairKernels = {
    GemmKernel{"avx512_x8_pairs", GgmlType::q4_0, packed_pairs, pack_pairs<Q4_0x8::kOffset>, 2, rows_pairs<Q4_0x8>, kR, nullptr},
    GemmKernel{"avx512_x8_pairs", GgmlType::q8_0, packed_pairs, pack_pairs<Q8_0x8::kOffset>, 2, rows_pairs<Q8_0x8>, kR, nullptr},
    GemmKernel{"avx512_x8_pairs", GgmlType::q5_0, packed_pairs, pack_pairs<Q5_0x8::kOffset>, 2, rows_pairs<Q5_0x8>, kR, nullptr},
};

const std::array kKernels = {
    x8_kernel<Q4_0x8>(GgmlType::q4_0, packed_q8_0, pack_q8_0<Q4_0x8::kOffset>),
    x8_kernel<Q8_0x8>(GgmlType::q8_0, packed_q8_0, pack_q8_0<Q8_0x8::kOffset>),
    x8_kernel<Q5_0x8>(GgmlType::q5_0, packed_q8_0, pack_q8_0<Q5_0x8::kOffset>),
    x8_kernel<Q4_Kx8>(GgmlType::q4_k, packed_q8_k, pack_q8_k),
    x8_kernel<Q5_Kx8>(GgmlType::q5_k, packed_q8_k, pack_q8_k),
    x8_kernel<Q6_Kx8>(GgmlType::q6_k, packed_q8_k, pack_q8_k),
};

}  // namespace

const GemmKernel* avx512_x8_gemm_kernel(GgmlType type, std::size_t batch) {
  const bool q5_0 = type == GgmlType::q5_0;
  if (type == GgmlType::q4_0 && batch >= kThirtyTwoMinBatch && batch <= kSixteenMaxBatch) return &kThirtyTwoKernel;
  const bool sixteen_rows = batch >= kSixteenMinBatch && batch <= (q5_0 ? kQ5_0PairMinBatch - 1 : kSixteenMaxBatch);
  const GemmKernel* sixteen = sixteen_rows ? find_x8_kernel(kSixteenKernels, type) : nullptr;
  if (sixteen != nullptr) return sixteen;
  const GemmKernel* pairs = batch >= (q5_0 ? kQ5_0PairMinBatch : kPairMinBatch) ? find_x8_kernel(kPairKernels, type) : nullptr;
  return pairs != nullptr ? pairs : find_x8_kernel(kKernels, type);
}

}  // namespace infercast
