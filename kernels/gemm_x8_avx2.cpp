// AVX2 kernels for the interleaved layout (kernels/interleave.h): eight weight rows per 256-bit
// vector, row r in lane r, multiplied against one broadcast group of four activation quants.
// Products of unsigned quants and signed activations (vpmaddubsw) are summed in 16 bits as far
// as the largest possible sum allows, then once per sub-block in 32 bits; scales and offsets
// are applied to eight rows at a time, and a block's eight outputs leave in one vector.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>

#include "kernels/formats.h"
#include "kernels/gemm_kernels.h"
#include "kernels/interleave.h"
#include "kernels/q8_0_avx2.h"
#include "kernels/simd_quantize.h"
#include "kernels/with_count.h"
#include "kernels/x8_prefetch.h"

namespace infercast {
namespace {

constexpr std::size_t kR = kInterleave;

// Activations of the Q4_0/Q5_0/Q8_0 kernels: Q8_0's quants with the scale already a float, and
// 8 x the block's sum, the offset of Q4_0's unsigned nibbles (twice it is Q5_0's).
struct ActQ8_0 {
  float d;
  std::int32_t sum8;
  std::int8_t qs[kQk];
};
static_assert(sizeof(ActQ8_0) == 40);

std::size_t act_q8_0_row(std::size_t cols) {
  return round_up(cols / kQk * sizeof(ActQ8_0), 64);
}
std::size_t act_q8_k_row(std::size_t cols) {
  return round_up(cols / kQkK * sizeof(BlockQ8_K), 64);
}
std::size_t packed_q8_0(std::size_t batch, std::size_t cols) {
  return batch * act_q8_0_row(cols);
}
std::size_t packed_q8_k(std::size_t batch, std::size_t cols) {
  return batch * act_q8_k_row(cols);
}

void pack_q8_0(const GemmCall& c, std::size_t begin, std::size_t end) {
  for (std::size_t b = begin; b < end; ++b) {
    auto* out = reinterpret_cast<ActQ8_0*>(c.packed + b * act_q8_0_row(c.cols));
    quantize_q8_0_blocks(c.x + b * c.ldx, c.cols / kQk, [&](std::size_t k, float d, std::uint16_t, __m256i q) {
      out[k].d = d;
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[k].qs), q);
      const __m256i pairs = _mm256_maddubs_epi16(_mm256_set1_epi8(1), q);
      const __m256i s = _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
      __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
      h = _mm_add_epi32(h, _mm_unpackhi_epi64(h, h));
      h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 1));
      out[k].sum8 = 8 * _mm_cvtsi128_si32(h);
    });
  }
}

void pack_q8_k(const GemmCall& c, std::size_t begin, std::size_t end) {
  const auto quantize = avx2_activation_quantizers().q8_k;
  for (std::size_t b = begin; b < end; ++b) {
    quantize(c.x + b * c.ldx, reinterpret_cast<BlockQ8_K*>(c.packed + b * act_q8_k_row(c.cols)),
             c.cols);
  }
}

// Four activation quants as one 32-bit lane, in all eight lanes.
INFERCAST_INLINE __m256i broadcast4(const std::int8_t* p) {
  std::int32_t v = 0;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// What the Q4_0 and Q8_0 kernels share: their activations, block size and tuning.
struct Q8ActivationKernel {
  using Act = ActQ8_0;
  static constexpr std::size_t kElems = kQk;
  static constexpr int kMaxNa = 4;
  // Batch 2 in two streams, as the GEMV: Q8_0 1.22-1.40x and Q4_0 0.98-1.09x (4096x4096, from
  // DRAM, two threads, Zen 5 guest at --isa avx2, builds alternated). The K-quants and Q6_K,
  // with more registers per group in 16 ymm, lost 13% that way and keep one stream.
  static constexpr int kTwoStreamBatch = 2;
  static std::size_t act_row(std::size_t cols) { return act_q8_0_row(cols); }
};

// acc += dot x (the eight rows' fp16 scales x each activation row's float scale), per row lane.
template <class Act, int Na>
INFERCAST_INLINE void add_scaled(const __m256i (&dot)[Na], const std::uint16_t* d,
                                 const Act* const (&x)[Na], std::size_t b, __m256 (&acc)[Na]) {
  const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(d)));
  INFERCAST_UNROLL
  for (int a = 0; a < Na; ++a) {
    acc[a] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[a]),
                             _mm256_mul_ps(dw, _mm256_set1_ps(x[a][b].d)), acc[a]);
  }
}

// --- Q4_0 and Q5_0 -----------------------------------------------------------------------------

// Q5_0's fifth bits of two steps as 0x10 bytes: qh8 is byte p of the eight rows' qh (elements
// 8p..8p+7 of each row, kernels/interleave.h); step 2(p % 2) takes its bits 0-3, the next step
// bits 4-7, lane r of either from row r's byte.
INFERCAST_INLINE void q5_0_fifth_bits(const std::uint8_t* qh8, __m256i& first, __m256i& second) {
  std::int64_t bits = 0;
  std::memcpy(&bits, qh8, sizeof bits);
  const __m256i row_byte = _mm256_setr_epi8(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3,  //
                                            4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7);
  const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi64x(bits), row_byte);
  const __m256i bit4 = _mm256_set1_epi8(0x10);
  const auto select = [&](__m256i sel) { return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, sel), sel), bit4); };
  first = select(_mm256_set1_epi32(0x08040201));
  second = select(_mm256_set1_epi32(static_cast<int>(0x80402010U)));
}

// Q4_0, and Q5_0 with its fifth bits: unsigned quants (q + 8, q + 16) against the activations,
// less 8 or 16 x the activations' sum.
template <class Interleaved>
struct Legacy4x8 : Q8ActivationKernel {
  using X8 = Interleaved;
  static constexpr bool kFifthBit = std::is_same_v<X8, BlockQ5_0x8>;
  using Block = std::conditional_t<kFifthBit, BlockQ5_0, BlockQ4_0>;
  static constexpr int kGemvStreams = 3;  // see gemv_streams in x8_rows.inc

  template <int Na>
  INFERCAST_INLINE static void block(const X8& w, const Act* const (&x)[Na], std::size_t b,
                                     __m256 (&acc)[Na]) {
    prefetch_part<sizeof(X8), 1, kX8Ahead<Na>>(&w, 0);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.d)));
    // Step t: elements 4t..4t+3 of row r (low nibbles) in lane r of lo[t], 16+4t.. in hi[t].
    __m256i lo[4];
    __m256i hi[4];
    INFERCAST_UNROLL
    for (int t = 0; t < 4; ++t) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.qs[t]));
      lo[t] = _mm256_and_si256(v, m4);
      hi[t] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    }
    if constexpr (kFifthBit) {
      INFERCAST_UNROLL
      for (int p = 0; p < 4; ++p) {
        __m256i first;
        __m256i second;
        q5_0_fifth_bits(w.qh[p], first, second);
        __m256i(&q)[4] = p < 2 ? lo : hi;
        const int t = 2 * (p % 2);
        q[t] = _mm256_or_si256(q[t], first);
        q[t + 1] = _mm256_or_si256(q[t + 1], second);
      }
    }
    INFERCAST_UNROLL
    for (int a = 0; a < Na; ++a) {
      const Act& xa = x[a][b];
      __m256i s0 = _mm256_maddubs_epi16(lo[0], broadcast4(xa.qs));
      __m256i s1 = _mm256_maddubs_epi16(hi[0], broadcast4(xa.qs + 16));
      INFERCAST_UNROLL
      for (int t = 1; t < 4; ++t) {
        s0 = _mm256_add_epi16(s0, _mm256_maddubs_epi16(lo[t], broadcast4(xa.qs + 4 * t)));
        s1 = _mm256_add_epi16(s1, _mm256_maddubs_epi16(hi[t], broadcast4(xa.qs + 16 + 4 * t)));
      }
      // Eight products of at most 2 x 15 x 127 each fit one 16-bit sum; of five-bit quants,
      // four (2 x 31 x 127 x 4 = 31496), so each half is widened on its own.
      const __m256i sums = kFifthBit ? _mm256_add_epi32(_mm256_madd_epi16(s0, ones), _mm256_madd_epi16(s1, ones))
                                     : _mm256_madd_epi16(_mm256_add_epi16(s0, s1), ones);
      const __m256i dot = _mm256_sub_epi32(sums, _mm256_set1_epi32(kFifthBit ? 2 * xa.sum8 : xa.sum8));
      acc[a] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(dw, _mm256_set1_ps(xa.d)), acc[a]);
    }
  }

  static float tail(const GemmCall& c, std::size_t r, const std::uint8_t* act) {
    const auto* w = reinterpret_cast<const Block*>(c.w + r * c.row_bytes);
    const auto* x = reinterpret_cast<const Act*>(act);
    float sum = 0;
    for (std::size_t b = 0; b < c.cols / kQk; ++b) {
      int isum = kFifthBit ? -2 * x[b].sum8 : -x[b].sum8;
      for (int j = 0; j < kQk; ++j) isum += unsigned_quant(w[b], j) * x[b].qs[j];
      sum += static_cast<float>(isum) * (_cvtsh_ss(w[b].d) * x[b].d);
    }
    return sum;
  }
};
using Q4_0x8 = Legacy4x8<BlockQ4_0x8>;
using Q5_0x8 = Legacy4x8<BlockQ5_0x8>;

// --- Q8_0 -------------------------------------------------------------------------------------

struct Q8_0x8 : Q8ActivationKernel {
  using X8 = BlockQ8_0x8;
  static constexpr int kGemvStreams = 2;  // three ran at 0.98x

  template <int Na>
  INFERCAST_INLINE static void block(const X8& w, const Act* const (&x)[Na], std::size_t b,
                                     __m256 (&acc)[Na]) {
    prefetch_part<sizeof(X8), 1, kX8Ahead<Na>>(&w, 0);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i dot[Na];
    for (auto& v : dot) v = _mm256_setzero_si256();
    INFERCAST_UNROLL
    for (int t = 0; t < 8; ++t) {
      // Signed x signed as |w| x (x with w's sign): vpmaddubsw wants one unsigned side.
      // Two products reach 2 x 128 x 127, so every one is widened to 32 bits at once.
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.qs[t]));
      const __m256i u = _mm256_abs_epi8(v);
      INFERCAST_UNROLL
      for (int a = 0; a < Na; ++a) {
        const __m256i s = _mm256_sign_epi8(broadcast4(x[a][b].qs + 4 * t), v);
        dot[a] = _mm256_add_epi32(dot[a], _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), ones));
      }
    }
    add_scaled(dot, w.d, x, b, acc);
  }

  static float tail(const GemmCall& c, std::size_t r, const std::uint8_t* act) {
    const auto* w = reinterpret_cast<const BlockQ8_0*>(c.w + r * c.row_bytes);
    const auto* x = reinterpret_cast<const Act*>(act);
    float sum = 0;
    for (std::size_t b = 0; b < c.cols / kQk; ++b) {
      int isum = 0;
      for (int j = 0; j < kQk; ++j) isum += w[b].qs[j] * x[b].qs[j];
      sum += static_cast<float>(isum) * (_cvtsh_ss(w[b].d) * x[b].d);
    }
    return sum;
  }
};

// --- Q4_K and Q5_K ----------------------------------------------------------------------------

// The 6-bit scales and mins of an interleaved Q4_K/Q5_K block (kernels/interleave.h) for 8
// sub-blocks x 8 rows, as bytes [sub-block][row].
INFERCAST_INLINE void decode_k4x8_scales(const std::uint8_t* scales, std::uint8_t* sc,
                                         std::uint8_t* mn) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales));
  const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales + 32));
  const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales + 64));
  _mm256_store_si256(
      reinterpret_cast<__m256i*>(sc),
      _mm256_or_si256(_mm256_and_si256(l0, m4),
                      _mm256_slli_epi16(_mm256_and_si256(hb, _mm256_set1_epi8(0x03)), 4)));
  _mm256_store_si256(
      reinterpret_cast<__m256i*>(sc + 32),
      _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(hb, _mm256_set1_epi8(0x30))));
  _mm256_store_si256(
      reinterpret_cast<__m256i*>(mn),
      _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                      _mm256_slli_epi16(_mm256_and_si256(hb, _mm256_set1_epi8(0x0C)), 2)));
  _mm256_store_si256(
      reinterpret_cast<__m256i*>(mn + 32),
      _mm256_or_si256(
          _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
          _mm256_srli_epi16(_mm256_and_si256(hb, _mm256_set1_epi8(static_cast<char>(0xC0))), 2)));
}

// Bit B of every byte moved to bit 4 (the fifth bit of a Q5_K quant), other bits cleared.
template <int B>
INFERCAST_INLINE __m256i bit_to_fifth(__m256i v) {
  const __m256i bit4 = _mm256_set1_epi8(0x10);
  if constexpr (B <= 4) {
    return _mm256_and_si256(_mm256_slli_epi16(v, 4 - B), bit4);
  } else {
    return _mm256_and_si256(_mm256_srli_epi16(v, B - 4), bit4);
  }
}

template <class Interleaved>
struct K4x8 {
  using X8 = Interleaved;
  static constexpr bool kFive = std::is_same_v<X8, BlockQ5_Kx8>;
  using Act = BlockQ8_K;
  static constexpr std::size_t kElems = kQkK;
  static constexpr int kMaxNa = 4;
  static constexpr int kTwoStreamBatch = 1;
  static constexpr int kGemvStreams = kFive ? 2 : 3;  // Q5_K on three ran at 0.97x
  static std::size_t act_row(std::size_t cols) { return act_q8_k_row(cols); }

  // Sub-block 2J+H of every row (the low nibbles of qs[J] for H = 0, the high ones for 1):
  // isum += scale x dot, in 32-bit lanes. One sub-block at a time keeps Na x 2 accumulators
  // in registers where a pair of sub-blocks spilled them.
  template <int J, int H, int Na>
  INFERCAST_INLINE static void sub_block(const X8& w, const Act* const (&x)[Na], std::size_t s,
                                         const std::uint8_t* scales, __m256i (&isum)[Na]) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    // Four-bit quants: eight vpmaddubsw results of 2 x 15 x 128 fit 16 bits; five-bit ones
    // only four. Each 16-bit sum is multiplied by its row's scale as it is folded into 32 bits
    // (vpmaddwd against the scale in both halves of a lane): one instruction where a fold by
    // ones, a vpmulld and an add did it.
    constexpr int kFold = kFive ? 4 : 8;
    const __m128i sc8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales + 8 * (2 * J + H)));
    const __m256i sc = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(sc8, sc8));
    __m256i sum16[Na];
    INFERCAST_UNROLL
    for (int a = 0; a < Na; ++a) sum16[a] = _mm256_setzero_si256();
    INFERCAST_UNROLL
    for (int t = 0; t < 8; ++t) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.qs[J][t]));
      __m256i q = H == 0 ? _mm256_and_si256(v, m4) : _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
      if constexpr (kFive) {
        q = _mm256_or_si256(q, bit_to_fifth<2 * J + H>(
                                   _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.qh[t]))));
      }
      INFERCAST_UNROLL
      for (int a = 0; a < Na; ++a) {
        sum16[a] = _mm256_add_epi16(
            sum16[a], _mm256_maddubs_epi16(q, broadcast4(x[a][s].qs + 64 * J + 32 * H + 4 * t)));
        if (t % kFold == kFold - 1) {
          isum[a] = _mm256_add_epi32(isum[a], _mm256_madd_epi16(sum16[a], sc));
          sum16[a] = _mm256_setzero_si256();
        }
      }
    }
  }

  template <int Na>
  INFERCAST_INLINE static void block(const X8& w, const Act* const (&x)[Na], std::size_t s,
                                     __m256 (&acc)[Na]) {
    alignas(32) std::uint8_t sc[64];
    alignas(32) std::uint8_t mn[64];
    decode_k4x8_scales(w.scales, sc, mn);
    __m256i isum[Na];
    for (auto& v : isum) v = _mm256_setzero_si256();
    prefetch_part<sizeof(X8), 8, kX8Ahead<Na>>(&w, 0);
    sub_block<0, 0, Na>(w, x, s, sc, isum);
    prefetch_part<sizeof(X8), 8, kX8Ahead<Na>>(&w, 1);
    sub_block<0, 1, Na>(w, x, s, sc, isum);
    prefetch_part<sizeof(X8), 8, kX8Ahead<Na>>(&w, 2);
    sub_block<1, 0, Na>(w, x, s, sc, isum);
    prefetch_part<sizeof(X8), 8, kX8Ahead<Na>>(&w, 3);
    sub_block<1, 1, Na>(w, x, s, sc, isum);
    prefetch_part<sizeof(X8), 8, kX8Ahead<Na>>(&w, 4);
    sub_block<2, 0, Na>(w, x, s, sc, isum);
    prefetch_part<sizeof(X8), 8, kX8Ahead<Na>>(&w, 5);
    sub_block<2, 1, Na>(w, x, s, sc, isum);
    prefetch_part<sizeof(X8), 8, kX8Ahead<Na>>(&w, 6);
    sub_block<3, 0, Na>(w, x, s, sc, isum);
    prefetch_part<sizeof(X8), 8, kX8Ahead<Na>>(&w, 7);
    sub_block<3, 1, Na>(w, x, s, sc, isum);
    // Mins: sum over sub-blocks of min x (sum of the sub-block's activations), two sub-blocks
    // per vpmaddwd: rows' (min 2j, min 2j+1) against (sum 2j, sum 2j+1).
    __m256i mins[4];
    INFERCAST_UNROLL
    for (int j = 0; j < 4; ++j) {
      const __m128i a = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(mn + 16 * j));
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(mn + 16 * j + 8));
      mins[j] = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(a, b));
    }
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.d)));
    const __m256 dmw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.dmin)));
    INFERCAST_UNROLL
    for (int a = 0; a < Na; ++a) {
      const Act& xa = x[a][s];
      alignas(16) std::int32_t sums[4];  // (sum 2j, sum 2j+1) as two int16 per int32
      _mm_store_si128(
          reinterpret_cast<__m128i*>(sums),
          _mm_hadd_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xa.bsums)),
                         _mm_loadu_si128(reinterpret_cast<const __m128i*>(xa.bsums + 8))));
      __m256i msum = _mm256_madd_epi16(mins[0], _mm256_set1_epi32(sums[0]));
      INFERCAST_UNROLL
      for (int j = 1; j < 4; ++j)
        msum = _mm256_add_epi32(msum, _mm256_madd_epi16(mins[j], _mm256_set1_epi32(sums[j])));
      const __m256 da = _mm256_set1_ps(xa.d);
      acc[a] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[a]), _mm256_mul_ps(dw, da), acc[a]);
      acc[a] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_mul_ps(dmw, da), acc[a]);
    }
  }

  static float tail(const GemmCall& c, std::size_t r, const std::uint8_t* act) {
    return format_info(kFive ? GgmlType::q5_k : GgmlType::q4_k)
        .dot(c.w + r * c.row_bytes, act, c.cols);
  }
};

// --- Q6_K -------------------------------------------------------------------------------------

struct Q6_Kx8 {
  using X8 = BlockQ6_Kx8;
  using Act = BlockQ8_K;
  static constexpr std::size_t kElems = kQkK;
  static constexpr int kMaxNa = 4;
  static constexpr int kTwoStreamBatch = 1;
  static constexpr int kGemvStreams = 3;
  static std::size_t act_row(std::size_t cols) { return act_q8_k_row(cols); }

  // Bits 2P, 2P+1 of every byte moved to bits 4, 5 (the top of a six-bit quant).
  template <int P>
  INFERCAST_INLINE static __m256i top_bits(__m256i v) {
    const __m256i mask = _mm256_set1_epi8(0x30);
    if constexpr (P < 2) {
      return _mm256_and_si256(_mm256_slli_epi16(v, 4 - 2 * P), mask);
    } else if constexpr (P == 2) {
      return _mm256_and_si256(v, mask);
    } else {
      return _mm256_and_si256(_mm256_srli_epi16(v, 2), mask);
    }
  }

  // Sub-block 2U+H (elements 32U+16H .. +15) of every row: isum += scale x (dot - 32 x sum).
  template <int H, int Na>
  INFERCAST_INLINE static void sub_block(const X8& w, int u, const Act* const (&x)[Na],
                                         std::size_t s, const std::int32_t (*offsets)[16],
                                         __m256i (&isum)[Na]) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.qh[u][H]));
    const auto low = [&](int p) {
      const __m256i ql = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.ql[u][p]));
      return H == 0 ? _mm256_and_si256(ql, m4) : _mm256_and_si256(_mm256_srli_epi16(ql, 4), m4);
    };
    const __m256i q[4] = {
        _mm256_or_si256(low(0), top_bits<0>(qh)), _mm256_or_si256(low(1), top_bits<1>(qh)),
        _mm256_or_si256(low(2), top_bits<2>(qh)), _mm256_or_si256(low(3), top_bits<3>(qh))};
    const int g = 2 * u + H;
    const __m256i sc =
        _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w.scales[g])));
    INFERCAST_UNROLL
    for (int a = 0; a < Na; ++a) {
      const std::int8_t* xq = x[a][s].qs + 16 * g;
      // Two products of 2 x 63 x 127 each fit 16 bits; four would not.
      const __m256i s01 = _mm256_add_epi16(_mm256_maddubs_epi16(q[0], broadcast4(xq)),
                                           _mm256_maddubs_epi16(q[1], broadcast4(xq + 4)));
      const __m256i s23 = _mm256_add_epi16(_mm256_maddubs_epi16(q[2], broadcast4(xq + 8)),
                                           _mm256_maddubs_epi16(q[3], broadcast4(xq + 12)));
      __m256i dot = _mm256_add_epi32(_mm256_madd_epi16(s01, ones), _mm256_madd_epi16(s23, ones));
      dot = _mm256_sub_epi32(dot, _mm256_set1_epi32(offsets[a][g]));
      isum[a] = _mm256_add_epi32(isum[a], _mm256_mullo_epi32(dot, sc));
    }
  }

  template <int Na>
  INFERCAST_INLINE static void block(const X8& w, const Act* const (&x)[Na], std::size_t s,
                                     __m256 (&acc)[Na]) {
    alignas(32) std::int32_t offsets[Na][16];  // 32 x the sum of each sub-block's activations
    INFERCAST_UNROLL
    for (int a = 0; a < Na; ++a) {
      const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[a][s].bsums));
      _mm256_store_si256(reinterpret_cast<__m256i*>(offsets[a]),
                         _mm256_slli_epi32(_mm256_cvtepi16_epi32(_mm256_castsi256_si128(bs)), 5));
      _mm256_store_si256(
          reinterpret_cast<__m256i*>(offsets[a] + 8),
          _mm256_slli_epi32(_mm256_cvtepi16_epi32(_mm256_extracti128_si256(bs, 1)), 5));
    }
    __m256i isum[Na];
    for (auto& v : isum) v = _mm256_setzero_si256();
    for (int u = 0; u < 8; ++u) {
      prefetch_part_at<sizeof(X8), 8, kX8Ahead<Na>>(&w, u);
      sub_block<0, Na>(w, u, x, s, offsets, isum);
      sub_block<1, Na>(w, u, x, s, offsets, isum);
    }
    add_scaled(isum, w.d, x, s, acc);
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
  for (int g = 0; g < Ng; ++g)
    w[g] = reinterpret_cast<const typename K::X8*>(c.w + (r0 + g * stride) * c.row_bytes);
  const typename K::Act* x[Na];
  for (int a = 0; a < Na; ++a)
    x[a] = reinterpret_cast<const typename K::Act*>(c.packed + (b0 + a) * K::act_row(c.cols));
  __m256 acc[Ng][Na];
  for (auto& row : acc) {
    for (auto& v : row) v = _mm256_setzero_ps();
  }
  for (std::size_t b = 0; b < c.cols / K::kElems; ++b) {
    INFERCAST_UNROLL
    for (int g = 0; g < Ng; ++g) {
      K::template block<Na>(w[g][b], x, b, acc[g]);
    }
  }
  for (int g = 0; g < Ng; ++g) {
    for (int a = 0; a < Na; ++a)
      _mm256_storeu_ps(c.y + (b0 + a) * c.ldy + r0 + g * stride, acc[g][a]);
  }
}

constexpr const char* kX8KernelName = "avx2_x8";
#include "kernels/x8_rows.inc"

const std::array kKernels = {
    x8_kernel<Q4_0x8>(GgmlType::q4_0, packed_q8_0, pack_q8_0),
    x8_kernel<Q8_0x8>(GgmlType::q8_0, packed_q8_0, pack_q8_0),
    x8_kernel<Q5_0x8>(GgmlType::q5_0, packed_q8_0, pack_q8_0),
    x8_kernel<K4x8<BlockQ4_Kx8>>(GgmlType::q4_k, packed_q8_k, pack_q8_k),
    x8_kernel<K4x8<BlockQ5_Kx8>>(GgmlType::q5_k, packed_q8_k, pack_q8_k),
    x8_kernel<Q6_Kx8>(GgmlType::q6_k, packed_q8_k, pack_q8_k),
};

}  // namespace

const GemmKernel* avx2_x8_gemm_kernel(GgmlType type) { return find_x8_kernel(kKernels, type); }

}  // namespace infercast
