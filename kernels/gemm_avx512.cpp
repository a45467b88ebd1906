// AVX-512 kernels (F, BW, VL, DQ; VNNI and BF16 used when the CPU has them, chosen per call).
// Weight rows stream from memory once per call; up to four activation rows share each decoded
// weight vector. Integer formats multiply unsigned weight bytes by signed activation bytes
// (vpdpbusd, or vpmaddubsw + vpmaddwd without VNNI), so 4-bit values never need sign handling.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <vector>

#include "kernels/gemm_kernels.h"
#include "kernels/half.h"
#include "kernels/q8_0_avx512.h"
#include "kernels/simd_quantize.h"
#include "kernels/stream_prefetch.h"
#include "kernels/with_count.h"

namespace infercast {
namespace {

constexpr std::size_t kMaxNa = 4;  // activation rows per weight pass
// Weight rows per activation load in the float kernels' batches: 4 x 4 accumulators and the
// loaded vectors fit in 32 registers.
constexpr int kFloatBatchRows = 4;
// Four rows by six activations: 24 accumulators, six activation vectors and the weights.
constexpr int kFloatMaxLast = 6;

// ---------------------------------------------------------------------------------------------
// Activation quantizers, bit-identical to reference::quantize_q8_0 / quantize_q8_k.

void quantize_q8_0_avx512(const float* x, BlockQ8_0* y, std::size_t count) {
  quantize_q8_0_blocks(x, count / kQk, [&](std::size_t k, float, std::uint16_t d, __m512i q0, __m512i q1) {
    y[k].d = d;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y[k].qs), _mm512_cvtepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y[k].qs + 16), _mm512_cvtepi32_epi8(q1));
  });
}

void quantize_q8_k_avx512(const float* x, BlockQ8_K* y, std::size_t count) {
  for (std::size_t b = 0; b < count / kQkK; ++b, x += kQkK) {
    __m512 m = _mm512_setzero_ps();
    for (int i = 0; i < kQkK; i += 16) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(x + i)));
    const float amax = _mm512_reduce_max_ps(m);
    if (amax == 0) {
      std::memset(&y[b], 0, sizeof(BlockQ8_K));
      continue;
    }
    // The reference keeps the sign of the first element of largest magnitude.
    float max = 0;
    for (int i = 0; i < kQkK; i += 16) {
      const __mmask16 at = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(x + i)), _mm512_set1_ps(amax), _CMP_EQ_OQ);
      if (at != 0) {
        max = x[i + std::countr_zero(static_cast<unsigned>(at))];
        break;
      }
    }
    const float iscale = -127.F / max;
    const __m512 s = _mm512_set1_ps(iscale);
    for (int i = 0; i < kQkK; i += 16) {
      // cvtps rounds to nearest even, as the reference's magic-number rounding does.
      __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + i), s));
      q = _mm512_min_epi32(q, _mm512_set1_epi32(127));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(y[b].qs + i), _mm512_cvtepi32_epi8(q));
      y[b].bsums[i / 16] = static_cast<std::int16_t>(_mm512_reduce_add_epi32(q));
    }
    y[b].d = 1 / iscale;
  }
}

// Accumulators: Nr weight rows x Na activation rows, one vector of partial sums each.
// Sized exactly, and store_sums inlined: otherwise GCC kept the array in memory and stored every
// partial sum back each iteration (F16 GEMV hot in cache: 53 -> 62 GB/s on one core).
template <int Nr, int Na>
using Accumulators = __m512[Nr][Na];

template <int Nr, int Na>
INFERCAST_INLINE void zero(Accumulators<Nr, Na>& acc) {
  INFERCAST_UNROLL
  for (int i = 0; i < Nr; ++i) {
    INFERCAST_UNROLL
    for (int a = 0; a < Na; ++a) acc[i][a] = _mm512_setzero_ps();
  }
}

template <int Nr, int Na>
INFERCAST_INLINE void store_sums(const GemmCall& c, std::size_t r, std::size_t b0, const Accumulators<Nr, Na>& acc) {
  INFERCAST_UNROLL
  for (int i = 0; i < Nr; ++i) {
    INFERCAST_UNROLL
    for (int a = 0; a < Na; ++a) c.y[(b0 + a) * c.ldy + r + i] = _mm512_reduce_add_ps(acc[i][a]);
  }
}

// ---------------------------------------------------------------------------------------------
// Integer dot helpers.

template <bool Vnni>
inline __m512i dot_u8s8(__m512i acc, __m512i u, __m512i s) {
  if constexpr (Vnni) {
    return _mm512_dpbusd_epi32(acc, u, s);
  } else {
    return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1)));
  }
}

template <bool Vnni>
inline __m512i dot_s16(__m512i acc, __m512i a, __m512i b) {
  if constexpr (Vnni) {
    return _mm512_dpwssd_epi32(acc, a, b);
  } else {
    return _mm512_add_epi32(acc, _mm512_madd_epi16(a, b));
  }
}

inline __m512i load_2x256(const void* lo, const void* hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(static_cast<const __m256i*>(lo))),
                            _mm256_loadu_si256(static_cast<const __m256i*>(hi)), 1);
}

// ---------------------------------------------------------------------------------------------
// Q8_0, Q4_0 and Q5_0 weights with Q8_0 activations. Q8_0 takes two blocks per vector; Q4_0 and
// Q5_0 four (one per 128-bit lane: low nibbles in one vector, high nibbles in another, Q5_0's
// fifth bits added from two 64-bit masks), and the four fp16 scales come out of one permute of
// the bytes already loaded (of two loads for Q5_0's 88-byte group, with its fifth bits).
//
// Packed activations per group (Q8_0: 2 blocks in 192 bytes, Q4_0 and Q5_0: 4 blocks in 256
// bytes): the quants in the order the weight vectors hold them, 16 per-lane activation scales,
// and per-lane corrections that turn unsigned weight products into signed ones: -8 * sum(x) for
// Q4_0's nibbles, -16 * sum(x) for Q5_0's five bits, -128 * sum(x over the lane's four bytes)
// for Q8_0 weights taken as w + 128.

template <GgmlType W>
constexpr std::size_t group_blocks() {
  return W == GgmlType::q8_0 ? 2 : 4;
}
template <GgmlType W>
constexpr std::size_t group_bytes() {
  return W == GgmlType::q8_0 ? 192 : 256;
}
template <GgmlType W>
std::size_t q8_0_packed_row(std::size_t cols) {
  const std::size_t groups = (cols / kQk + group_blocks<W>() - 1) / group_blocks<W>();
  return groups * group_bytes<W>();
}
template <GgmlType W>
std::size_t q8_0_packed_bytes(std::size_t batch, std::size_t cols) {
  return batch * q8_0_packed_row<W>(cols);
}

template <GgmlType W>
void pack_q8_0(const GemmCall& c, std::size_t begin, std::size_t end) {
  constexpr std::size_t G = group_blocks<W>();
  const std::size_t nb = c.cols / kQk;
  const std::size_t groups = (nb + G - 1) / G;
  std::vector<BlockQ8_0> blocks(groups * G);
  for (std::size_t b = begin; b < end; ++b) {
    std::fill(blocks.begin(), blocks.end(), BlockQ8_0{});  // a partial last group pairs with zeros
    quantize_q8_0_avx512(c.x + b * c.ldx, blocks.data(), c.cols);
    std::uint8_t* out = c.packed + b * q8_0_packed_row<W>(c.cols);
    for (std::size_t g = 0; g < groups; ++g, out += group_bytes<W>()) {
      const BlockQ8_0* x = &blocks[g * G];
      auto* q = reinterpret_cast<std::int8_t*>(out);
      if constexpr (W == GgmlType::q8_0) {
        auto* scale = reinterpret_cast<float*>(out + 64);
        std::memcpy(q, x[0].qs, 32);
        std::memcpy(q + 32, x[1].qs, 32);
        auto* corr = reinterpret_cast<std::int32_t*>(out + 128);
        for (int i = 0; i < 16; ++i) {
          scale[i] = _cvtsh_ss(x[i / 8].d);
          int sum = 0;
          for (int k = 0; k < 4; ++k) sum += q[4 * i + k];
          corr[i] = -128 * sum;
        }
      } else {
        auto* scale = reinterpret_cast<float*>(out + 128);
        auto* corr = reinterpret_cast<std::int32_t*>(out + 192);
        std::memset(corr, 0, 64);
        for (int k = 0; k < 4; ++k) {
          std::memcpy(q + 16 * k, x[k].qs, 16);            // elements 0..15 of block k
          std::memcpy(q + 64 + 16 * k, x[k].qs + 16, 16);  // elements 16..31
          int sum = 0;
          for (int i = 0; i < 32; ++i) sum += x[k].qs[i];
          corr[4 * k] = -(W == GgmlType::q5_0 ? 16 : 8) * sum;
          for (int i = 0; i < 4; ++i) scale[4 * k + i] = _cvtsh_ss(x[k].d);
        }
      }
    }
  }
}

// Word-index tables for vpermw, filled at compile time so no kernel call builds them.
using WordIndex = std::array<std::int16_t, 32>;
template <class F>
constexpr WordIndex word_index(F f) {
  WordIndex idx{};
  for (int i = 0; i < 32; ++i) idx[static_cast<std::size_t>(i)] = static_cast<std::int16_t>(f(i));
  return idx;
}
inline __m512i load_index(const WordIndex& idx) { return _mm512_loadu_si512(idx.data()); }

// fp16 word indices of the block scales in a 64-byte window starting at a group's first block:
// Q8_0 blocks at bytes 0 and 34, Q4_0 blocks at bytes 0, 18, 36, 54.
constexpr WordIndex kScaleIndexQ8_0 = word_index([](int i) { return i < 16 ? (i < 8 ? 0 : 17) : 0; });
constexpr WordIndex kScaleIndexQ4_0 = word_index([](int i) { return i < 16 ? 9 * (i / 4) : 0; });
// Q5_0's blocks at bytes 0, 22, 44 and 66: the last from a second window at byte 24 (words
// 32 + n in a two-source permute), which keeps both loads inside the 88-byte group. Words 0-15
// take the scales; words 16-19 the low halves of the four blocks' fifth bits and 20-23 the high
// halves, so that 128-bit lane 2 holds them as two 64-bit byte masks of the nibble vectors (bit
// 16k + j: element j of block k, or element 16 + j).
constexpr std::size_t kQ5_0SecondWindow = 24;
constexpr WordIndex kScaleIndexQ5_0 = word_index([](int i) {
  constexpr int kWord[4] = {0, 11, 22, 32 + 21};  // block k's scale; its qh follows in two words
  if (i < 16) return kWord[i / 4];
  if (i < 24) return kWord[(i - 16) % 4] + 1 + (i - 16) / 4;
  return 0;
});

// One group of blocks of Nr weight rows against Na activation rows.
template <GgmlType W, bool Vnni, int Nr, int Na>
INFERCAST_INLINE void q8_0_group(const std::uint8_t* const* blocks, const std::uint8_t* const* act,
                                 Accumulators<Nr, Na>& acc) {
  using Block = LegacyBlock<W>;
  const __m512i scale_index =
      load_index(W == GgmlType::q8_0 ? kScaleIndexQ8_0 : W == GgmlType::q4_0 ? kScaleIndexQ4_0 : kScaleIndexQ5_0);
  INFERCAST_UNROLL
  for (int i = 0; i < Nr; ++i) {
    const auto* blk = reinterpret_cast<const Block*>(blocks[i]);
    // Every group spans at least 64 bytes, so this window never leaves it.
    const __m512i window = _mm512_loadu_si512(blk);
    __m512i scale_words;
    if constexpr (W == GgmlType::q5_0) {
      const __m512i second = _mm512_loadu_si512(blocks[i] + kQ5_0SecondWindow);
      scale_words = _mm512_permutex2var_epi16(window, scale_index, second);
    } else {
      scale_words = _mm512_permutexvar_epi16(scale_index, window);
    }
    const __m512 dw = _mm512_cvtph_ps(_mm512_castsi512_si256(scale_words));
    if constexpr (W == GgmlType::q8_0) {
      const __m512i v = load_2x256(blk[0].qs, blk[1].qs);
      if constexpr (Vnni) {
        // w + 128 is unsigned; the packed correction -128 * sum(x) per lane restores the sign.
        const __m512i u = _mm512_xor_si512(v, _mm512_set1_epi8(static_cast<char>(0x80)));
        INFERCAST_UNROLL
        for (int a = 0; a < Na; ++a) {
          const std::uint8_t* px = act[a];
          const __m512i dot = _mm512_dpbusd_epi32(_mm512_load_si512(px + 128), u, _mm512_load_si512(px));
          const __m512 scale = _mm512_mul_ps(dw, _mm512_load_ps(reinterpret_cast<const float*>(px + 64)));
          acc[i][a] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc[i][a]);
        }
      } else {
        // Without VNNI the u8 x s8 pairs saturate at int16, so w + 128 would overflow: move the
        // weight's sign onto the activation instead.
        const __m512i u = _mm512_abs_epi8(v);
        const __mmask64 negative = _mm512_movepi8_mask(v);
        INFERCAST_UNROLL
        for (int a = 0; a < Na; ++a) {
          const std::uint8_t* px = act[a];
          const __m512i x = _mm512_load_si512(px);
          const __m512i xs = _mm512_mask_sub_epi8(x, negative, _mm512_setzero_si512(), x);
          const __m512i dot = dot_u8s8<Vnni>(_mm512_setzero_si512(), u, xs);
          const __m512 scale = _mm512_mul_ps(dw, _mm512_load_ps(reinterpret_cast<const float*>(px + 64)));
          acc[i][a] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc[i][a]);
        }
      }
    } else {
      const __m512i nibble = _mm512_set1_epi8(0x0F);
      __m512i q = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk[0].qs)));
      q = _mm512_inserti32x4(q, _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk[1].qs)), 1);
      q = _mm512_inserti32x4(q, _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk[2].qs)), 2);
      q = _mm512_inserti32x4(q, _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk[3].qs)), 3);
      __m512i lo = _mm512_and_si512(q, nibble);
      __m512i hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), nibble);
      if constexpr (W == GgmlType::q5_0) {
        const __m128i fifth = _mm512_extracti32x4_epi32(scale_words, 2);
        const __mmask64 low_bits = _cvtu64_mask64(static_cast<std::uint64_t>(_mm_cvtsi128_si64(fifth)));
        const __mmask64 high_bits = _cvtu64_mask64(static_cast<std::uint64_t>(_mm_extract_epi64(fifth, 1)));
        const __m512i bit = _mm512_set1_epi8(0x10);
        lo = _mm512_mask_add_epi8(lo, low_bits, lo, bit);
        hi = _mm512_mask_add_epi8(hi, high_bits, hi, bit);
      }
      INFERCAST_UNROLL
      for (int a = 0; a < Na; ++a) {
        const std::uint8_t* px = act[a];
        __m512i dot = dot_u8s8<Vnni>(_mm512_load_si512(px + 192), lo, _mm512_load_si512(px));
        dot = dot_u8s8<Vnni>(dot, hi, _mm512_load_si512(px + 64));
        const __m512 scale = _mm512_mul_ps(dw, _mm512_load_ps(reinterpret_cast<const float*>(px + 128)));
        acc[i][a] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc[i][a]);
      }
    }
  }
}

template <GgmlType W, bool Vnni, int Nr, int Na>
void row_q8_0(const GemmCall& c, std::size_t r, std::size_t b0) {
  using Block = LegacyBlock<W>;
  constexpr std::size_t G = group_blocks<W>();
  constexpr std::size_t kGroupWeightBytes = G * sizeof(Block);
  const std::size_t nb = c.cols / kQk;
  const std::size_t full = nb / G;
  const std::size_t row_stride = q8_0_packed_row<W>(c.cols);
  const std::uint8_t* rows[Nr];
  const std::uint8_t* act[kMaxNa];
  Accumulators<Nr, Na> acc;
  INFERCAST_UNROLL
  for (int i = 0; i < Nr; ++i) rows[i] = c.w + (r + i) * c.row_bytes;
  INFERCAST_UNROLL
  for (int a = 0; a < Na; ++a) act[a] = c.packed + (b0 + a) * row_stride;
  zero<Nr, Na>(acc);
  const StreamPrefetch<Nr> ahead(c, r);
  for (std::size_t g = 0; g < full; ++g) {
    ahead.fetch(g * kGroupWeightBytes, kGroupWeightBytes);
    q8_0_group<W, Vnni, Nr, Na>(rows, act, acc);
    INFERCAST_UNROLL
    for (int i = 0; i < Nr; ++i) rows[i] += kGroupWeightBytes;
    INFERCAST_UNROLL
    for (int a = 0; a < Na; ++a) act[a] += group_bytes<W>();
  }
  if (full * G < nb) {
    // The last, partial group: copy each row's remaining blocks into zero padding.
    alignas(64) Block tail[Nr][G] = {};
    const std::uint8_t* padded[Nr];
    for (int i = 0; i < Nr; ++i) {
      std::memcpy(tail[i], rows[i], (nb - full * G) * sizeof(Block));
      padded[i] = reinterpret_cast<const std::uint8_t*>(tail[i]);
    }
    q8_0_group<W, Vnni, Nr, Na>(padded, act, acc);
  }
  store_sums<Nr, Na>(c, r, b0, acc);
}

// ---------------------------------------------------------------------------------------------
// K-quants with Q8_K activations. Packed activations per super-block (320 bytes): 256 quants,
// then the float scale and 16 int16 sums. For Q4_K/Q5_K the quants are reordered so that each
// 64-byte vector matches one nibble plane of two 32-byte weight chunks, and the sums are per
// sub-block of 32; for Q6_K quants keep their order and the sums are per 16.

constexpr std::size_t kSuperBytes = 320;

std::size_t q8_k_packed_row(std::size_t cols) { return cols / kQkK * kSuperBytes; }
std::size_t q8_k_packed_bytes(std::size_t batch, std::size_t cols) { return batch * q8_k_packed_row(cols); }

template <GgmlType W>
void pack_q8_k(const GemmCall& c, std::size_t begin, std::size_t end) {
  const std::size_t nb = c.cols / kQkK;
  std::vector<BlockQ8_K> blocks(nb);
  for (std::size_t b = begin; b < end; ++b) {
    quantize_q8_k_avx512(c.x + b * c.ldx, blocks.data(), c.cols);
    std::uint8_t* out = c.packed + b * q8_k_packed_row(c.cols);
    for (std::size_t s = 0; s < nb; ++s, out += kSuperBytes) {
      const BlockQ8_K& x = blocks[s];
      auto* meta_d = reinterpret_cast<float*>(out + 256);
      auto* sums = reinterpret_cast<std::int16_t*>(out + 256 + 32);
      *meta_d = x.d;
      if constexpr (W == GgmlType::q6_k) {
        std::memcpy(out, x.qs, 256);
        std::memcpy(sums, x.bsums, 32);
      } else {
        // Vector v (0..3) holds the quants of sub-blocks (v/2)*4 + v%2 and that plus two.
        for (int v = 0; v < 4; ++v) {
          const int first = (v / 2) * 4 + v % 2;
          std::memcpy(out + 64 * v, x.qs + 32 * first, 32);
          std::memcpy(out + 64 * v + 32, x.qs + 32 * (first + 2), 32);
        }
        for (int j = 0; j < 8; ++j) sums[j] = static_cast<std::int16_t>(x.bsums[2 * j] + x.bsums[2 * j + 1]);
        for (int j = 8; j < 16; ++j) sums[j] = 0;
      }
    }
  }
}

#include "kernels/k_scales.inc"

// vpermw indices: for Q4_K/Q5_K, int16 lanes 0..15 take scale a and 16..31 scale b.
constexpr WordIndex pick2(int a, int b) {
  return word_index([=](int i) { return i < 16 ? a : b; });
}
constexpr std::array<WordIndex, 4> kPickK4 = {pick2(0, 2), pick2(1, 3), pick2(4, 6), pick2(5, 7)};

// Sum over a super-block's four 64-byte vectors of scale x (unsigned weights . activations):
// pairs of byte products to int16, then int16 products with the sub-block scales to int32.
template <bool Vnni>
INFERCAST_INLINE __m512i scaled_dot(const __m512i (&u)[4], const __m512i (&scales)[4], const std::uint8_t* px) {
  __m512i isum = _mm512_setzero_si512();
  INFERCAST_UNROLL
  for (int v = 0; v < 4; ++v) {
    const __m512i pairs = _mm512_maddubs_epi16(u[v], _mm512_load_si512(px + 64 * v));
    isum = dot_s16<Vnni>(isum, pairs, scales[v]);
  }
  return isum;
}

// Q5_K: adds 16 to each nibble whose fifth bit is set. Vector v holds sub-blocks first and
// first + 2; their fifth bits are qh bits first and first + 2.
INFERCAST_INLINE void add_fifth_bits(const BlockQ5_K& blk, __m512i (&u)[4]) {
  const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qh)));
  const __m512i sixteen = _mm512_set1_epi8(16);
  INFERCAST_UNROLL
  for (int v = 0; v < 4; ++v) {
    const int first = (v / 2) * 4 + v % 2;
    const __m512i bits = _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(1 << first)),
                                            _mm256_set1_epi8(static_cast<char>(1 << (first + 2))), 1);
    u[v] = _mm512_mask_add_epi8(u[v], _mm512_test_epi8_mask(qh, bits), u[v], sixteen);
  }
}

// GEMV (one activation row) of four weight rows at a time. Per super-block, the bookkeeping
// that does not scale with the weights (the 6-bit scales, d and dmin, the mins against the
// activation sums) is done once for the four rows in one vector, one row per 128-bit lane; per
// row only the nibble products remain. Done row by row, that bookkeeping was more than half of
// the instructions and kept the decode, not DRAM, the bound.
//
// The first 16 bytes of each block (d, dmin, the twelve packed scale bytes) land in one lane.
inline __m512i k4_heads(const std::uint8_t* const (&blocks)[4]) {
  const auto lane = [](const std::uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); };
  __m512i h = _mm512_castsi128_si512(lane(blocks[0]));
  h = _mm512_inserti32x4(h, lane(blocks[1]), 1);
  h = _mm512_inserti32x4(h, lane(blocks[2]), 2);
  return _mm512_inserti32x4(h, lane(blocks[3]), 3);
}

// unpack_k4_scales for four blocks at once: per lane, bytes 0..7 the scales, 8..15 the mins.
inline __m512i unpack_k4_scales_x4(__m512i heads) {
  const auto lanes = [](__m128i v) { return _mm512_broadcast_i32x4(v); };
  // The packed bytes start at byte 4 of each lane, after d and dmin.
  const __m512i low = _mm512_shuffle_epi8(heads, lanes(_mm_setr_epi8(4, 5, 6, 7, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15)));
  const __m512i low_bits =
      _mm512_and_si512(low, lanes(_mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 0, 0, 0, 0)));
  const __m512i high_nibbles = _mm512_and_si512(
      _mm512_srli_epi16(low, 4), lanes(_mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 15, 15)));
  const __m512i top = _mm512_shuffle_epi8(heads, lanes(_mm_setr_epi8(-1, -1, -1, -1, 4, 5, 6, 7, -1, -1, -1, -1, 8, 9, 10, 11)));
  const __m512i top_bits = _mm512_and_si512(_mm512_srli_epi16(top, 2), _mm512_set1_epi8(0x30));
  return _mm512_ternarylogic_epi64(low_bits, high_nibbles, top_bits, 0xFE);  // a | b | c
}

// vpshufb patterns turning a row's eight scale words (in every lane) into the scale vector of
// weight vector v: words first[v] in lanes 0-1, first[v] + 2 in lanes 2-3. In-lane byte
// shuffles after one lane broadcast cost a third of what a vpermw (two uops) per vector did.
constexpr std::array<std::array<std::int8_t, 64>, 4> kScaleShuffle = [] {
  std::array<std::array<std::int8_t, 64>, 4> t{};
  constexpr int first[4] = {0, 1, 4, 5};
  for (int v = 0; v < 4; ++v) {
    for (int b = 0; b < 64; ++b) {
      const int word = b < 32 ? first[v] : first[v] + 2;
      t[static_cast<std::size_t>(v)][static_cast<std::size_t>(b)] = static_cast<std::int8_t>(2 * word + b % 2);
    }
  }
  return t;
}();
// Lane i of v in all four lanes (the switch keeps the shuffle's immediate a constant at -O0).
inline __m512i broadcast_lane(__m512i v, int i) {
  switch (i) {
    case 0: return _mm512_shuffle_i32x4(v, v, 0x00);
    case 1: return _mm512_shuffle_i32x4(v, v, 0x55);
    case 2: return _mm512_shuffle_i32x4(v, v, 0xAA);
    default: return _mm512_shuffle_i32x4(v, v, 0xFF);
  }
}
inline __m512i load_shuffle(int v) { return _mm512_loadu_si512(kScaleShuffle[static_cast<std::size_t>(v)].data()); }

// d and dmin of the four rows (words 0 and 1 of each lane) into the low eight words.
constexpr WordIndex kHeadScales = word_index([](int i) { return i < 8 ? 8 * (i / 2) + i % 2 : 0; });

template <GgmlType W, bool Vnni>
void row_k4_x4(const GemmCall& c, std::size_t r) {
  using Block = std::conditional_t<W == GgmlType::q4_k, BlockQ4_K, BlockQ5_K>;
  const std::size_t nb = c.cols / kQkK;
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  const __m512i head_scales = load_index(kHeadScales);
  const Block* rows[4];
  INFERCAST_UNROLL
  for (int i = 0; i < 4; ++i) rows[i] = reinterpret_cast<const Block*>(c.w + (r + i) * c.row_bytes);
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  __m512 mins_acc = _mm512_setzero_ps();
  const StreamPrefetch<4> ahead(c, r);
  const std::uint8_t* px = c.packed;
  for (std::size_t s = 0; s < nb; ++s, px += kSuperBytes) {
    const std::uint8_t* const blocks[4] = {reinterpret_cast<const std::uint8_t*>(&rows[0][s]),
                                           reinterpret_cast<const std::uint8_t*>(&rows[1][s]),
                                           reinterpret_cast<const std::uint8_t*>(&rows[2][s]),
                                           reinterpret_cast<const std::uint8_t*>(&rows[3][s])};
    ahead.fetch(s * sizeof(Block), sizeof(Block));
    const __m512i heads = k4_heads(blocks);
    const __m512i sm = unpack_k4_scales_x4(heads);
    const __m512i scales = _mm512_unpacklo_epi8(sm, _mm512_setzero_si512());  // lane i: row i's 8 scales
    const __m512i mins = _mm512_unpackhi_epi8(sm, _mm512_setzero_si512());    // lane i: row i's 8 mins
    const float dx = *reinterpret_cast<const float*>(px + 256);
    // d0 dmin0 d1 dmin1 ... d3 dmin3, times the activation scale.
    const __m256 ddx = _mm256_mul_ps(
        _mm256_cvtph_ps(_mm512_castsi512_si128(_mm512_permutexvar_epi16(head_scales, heads))), _mm256_set1_ps(dx));
    const __m512 ddx512 = _mm512_zextps256_ps512(ddx);
    alignas(32) float ddx_row[8];  // read back as broadcasts: loads, not shuffles
    _mm256_store_ps(ddx_row, ddx);
    // The mins against the activation sums, all four rows in one product (lane i: row i).
    const __m512i msum = _mm512_madd_epi16(
        mins, _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(px + 288))));
    const __m512 dmin = _mm512_permutexvar_ps(_mm512_setr_epi32(1, 1, 1, 1, 3, 3, 3, 3, 5, 5, 5, 5, 7, 7, 7, 7), ddx512);
    mins_acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(msum), dmin, mins_acc);
    const __m512i x[4] = {_mm512_load_si512(px), _mm512_load_si512(px + 64), _mm512_load_si512(px + 128),
                          _mm512_load_si512(px + 192)};
    INFERCAST_UNROLL
    for (int i = 0; i < 4; ++i) {
      const Block& blk = rows[i][s];
      const __m512i q01 = _mm512_loadu_si512(blk.qs);
      const __m512i q23 = _mm512_loadu_si512(blk.qs + 64);
      __m512i u[4] = {_mm512_and_si512(q01, nibble), _mm512_and_si512(_mm512_srli_epi16(q01, 4), nibble),
                      _mm512_and_si512(q23, nibble), _mm512_and_si512(_mm512_srli_epi16(q23, 4), nibble)};
      if constexpr (W == GgmlType::q5_k) add_fifth_bits(blk, u);
      const __m512i row_scales = broadcast_lane(scales, i);
      __m512i isum = _mm512_setzero_si512();
      INFERCAST_UNROLL
      for (int v = 0; v < 4; ++v) {
        const __m512i sc = _mm512_shuffle_epi8(row_scales, load_shuffle(v));
        isum = dot_s16<Vnni>(isum, _mm512_maddubs_epi16(u[v], x[v]), sc);
      }
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(ddx_row[2 * i]), acc[i]);
    }
  }
  alignas(64) float mins_lanes[16];
  _mm512_store_ps(mins_lanes, mins_acc);
  INFERCAST_UNROLL
  for (int i = 0; i < 4; ++i) {
    const float* m = mins_lanes + 4 * i;
    c.y[r + i] = _mm512_reduce_add_ps(acc[i]) - ((m[0] + m[1]) + (m[2] + m[3]));
  }
}

template <GgmlType W, bool Vnni, int Nr, int Na>
void row_k4(const GemmCall& c, std::size_t r, std::size_t b0) {
  if constexpr (Nr == 4 && Na == 1) {
    row_k4_x4<W, Vnni>(c, r);  // only the GEMV driver takes four rows, with b0 == 0
    return;
  }
  using Block = std::conditional_t<W == GgmlType::q4_k, BlockQ4_K, BlockQ5_K>;
  const std::size_t nb = c.cols / kQkK;
  const std::size_t row_stride = q8_k_packed_row(c.cols);
  const __m512i pick[4] = {load_index(kPickK4[0]), load_index(kPickK4[1]), load_index(kPickK4[2]),
                           load_index(kPickK4[3])};
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  const Block* rows[Nr];
  INFERCAST_UNROLL
  for (int i = 0; i < Nr; ++i) rows[i] = reinterpret_cast<const Block*>(c.w + (r + i) * c.row_bytes);
  const std::uint8_t* act[kMaxNa];
  Accumulators<Nr, Na> acc;
  __m128 mins_acc[Nr][Na];
  INFERCAST_UNROLL
  for (int a = 0; a < Na; ++a) act[a] = c.packed + (b0 + a) * row_stride;
  INFERCAST_UNROLL
  for (int i = 0; i < Nr; ++i) {
    INFERCAST_UNROLL
    for (int a = 0; a < Na; ++a) {
      acc[i][a] = _mm512_setzero_ps();
      mins_acc[i][a] = _mm_setzero_ps();
    }
  }
  const StreamPrefetch<Nr> ahead(c, r);
  for (std::size_t s = 0; s < nb; ++s) {
    ahead.fetch(s * sizeof(Block), sizeof(Block));
    INFERCAST_UNROLL
    for (int i = 0; i < Nr; ++i) {
      const Block& blk = rows[i][s];
      const __m128i sm = unpack_k4_scales(blk.scales);
      const __m512i sc16 = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(sm));
      const __m128i m16 = _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8));
      const __m512i q01 = _mm512_loadu_si512(blk.qs);
      const __m512i q23 = _mm512_loadu_si512(blk.qs + 64);
      __m512i u[4] = {_mm512_and_si512(q01, nibble), _mm512_and_si512(_mm512_srli_epi16(q01, 4), nibble),
                      _mm512_and_si512(q23, nibble), _mm512_and_si512(_mm512_srli_epi16(q23, 4), nibble)};
      if constexpr (W == GgmlType::q5_k) add_fifth_bits(blk, u);
      __m512i scales[4];
      INFERCAST_UNROLL
      for (int v = 0; v < 4; ++v) scales[v] = _mm512_permutexvar_epi16(pick[v], sc16);
      const float d = _cvtsh_ss(blk.d);
      const float dmin = _cvtsh_ss(blk.dmin);
      INFERCAST_UNROLL
      for (int a = 0; a < Na; ++a) {
        const std::uint8_t* px = act[a] + s * kSuperBytes;
        __m512i isum = scaled_dot<Vnni>(u, scales, px);
        const float dx = *reinterpret_cast<const float*>(px + 256);
        acc[i][a] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(d * dx), acc[i][a]);
        const __m128i msum = _mm_madd_epi16(m16, _mm_load_si128(reinterpret_cast<const __m128i*>(px + 288)));
        mins_acc[i][a] = _mm_fmadd_ps(_mm_cvtepi32_ps(msum), _mm_set1_ps(dmin * dx), mins_acc[i][a]);
      }
    }
  }
  INFERCAST_UNROLL
  for (int i = 0; i < Nr; ++i) {
    INFERCAST_UNROLL
    for (int a = 0; a < Na; ++a) {
      __m128 m = _mm_add_ps(mins_acc[i][a], _mm_movehl_ps(mins_acc[i][a], mins_acc[i][a]));
      m = _mm_add_ss(m, _mm_movehdup_ps(m));
      c.y[(b0 + a) * c.ldy + r + i] = _mm512_reduce_add_ps(acc[i][a]) - _mm_cvtss_f32(m);
    }
  }
}

// Q6_K's sixteen int8 scales, arranged so that lane k holds scales k, 4 + k, 8 + k and 12 + k
// as words: weight vector v needs scale 4v + k in lane k, which one in-lane byte shuffle then
// broadcasts. (Four vpermw, two uops each, did it before.)
constexpr std::array<std::int8_t, 32> kQ6ScaleOrder = {0, 4, 8, 12, -1, -1, -1, -1, 1, 5, 9, 13, -1, -1, -1, -1,
                                                       2, 6, 10, 14, -1, -1, -1, -1, 3, 7, 11, 15, -1, -1, -1, -1};
constexpr std::array<std::array<std::int8_t, 64>, 4> kQ6ScaleWord = [] {
  std::array<std::array<std::int8_t, 64>, 4> t{};
  for (std::size_t v = 0; v < 4; ++v) {
    for (std::size_t b = 0; b < 64; ++b) t[v][b] = static_cast<std::int8_t>(2 * v + b % 2);
  }
  return t;
}();

template <bool Vnni, int Nr, int Na>
void row_q6_k(const GemmCall& c, std::size_t r, std::size_t b0) {
  const std::size_t nb = c.cols / kQkK;
  const std::size_t row_stride = q8_k_packed_row(c.cols);
  const __m256i scale_order = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kQ6ScaleOrder.data()));
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  const __m512i high_bits = _mm512_set1_epi8(0x30);
  // Per 16-bit lane shift counts moving qh bit pairs 0,2 (low plane) and 4,6 (high plane) to bits 4-5.
  const __m512i shl_lo = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
  const __m512i shr_hi = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1);
  const BlockQ6_K* rows[Nr];
  INFERCAST_UNROLL
  for (int i = 0; i < Nr; ++i) rows[i] = reinterpret_cast<const BlockQ6_K*>(c.w + (r + i) * c.row_bytes);
  const std::uint8_t* act[kMaxNa];
  Accumulators<Nr, Na> acc;
  INFERCAST_UNROLL
  for (int a = 0; a < Na; ++a) act[a] = c.packed + (b0 + a) * row_stride;
  zero<Nr, Na>(acc);
  const StreamPrefetch<Nr> ahead(c, r);
  for (std::size_t s = 0; s < nb; ++s) {
    ahead.fetch(s * sizeof(BlockQ6_K), sizeof(BlockQ6_K));
    INFERCAST_UNROLL
    for (int i = 0; i < Nr; ++i) {
      const BlockQ6_K& blk = rows[i][s];
      const __m128i s8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.scales));
      const __m256i sc16 = _mm256_cvtepi8_epi16(s8);
      const __m512i by_lane = _mm512_cvtepi8_epi16(_mm256_shuffle_epi8(_mm256_broadcastsi128_si256(s8), scale_order));
      __m512i u[4];
      __m512i scales[4];
      INFERCAST_UNROLL
      for (int h = 0; h < 2; ++h) {
        const __m512i ql = _mm512_loadu_si512(blk.ql + 64 * h);
        const __m512i qh =
            _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qh + 32 * h)));
        const __m512i hlo = _mm512_and_si512(_mm512_sllv_epi16(qh, shl_lo), high_bits);
        const __m512i hhi = _mm512_and_si512(_mm512_srlv_epi16(qh, shr_hi), high_bits);
        // (a & b) | c in one instruction.
        u[2 * h] = _mm512_ternarylogic_epi64(ql, nibble, hlo, 0xEA);
        u[2 * h + 1] = _mm512_ternarylogic_epi64(_mm512_srli_epi16(ql, 4), nibble, hhi, 0xEA);
      }
      INFERCAST_UNROLL
      for (int v = 0; v < 4; ++v) {
        scales[v] = _mm512_shuffle_epi8(by_lane, _mm512_loadu_si512(kQ6ScaleWord[static_cast<std::size_t>(v)].data()));
      }
      const float d = _cvtsh_ss(blk.d);
      INFERCAST_UNROLL
      for (int a = 0; a < Na; ++a) {
        const std::uint8_t* px = act[a] + s * kSuperBytes;
        __m512i isum = scaled_dot<Vnni>(u, scales, px);
        // Quants were taken unsigned (0..63); subtract 32 * sum_g scale_g * sum(x in group g).
        const __m256i offset =
            _mm256_madd_epi16(sc16, _mm256_load_si256(reinterpret_cast<const __m256i*>(px + 288)));
        isum = _mm512_sub_epi32(isum, _mm512_zextsi256_si512(_mm256_slli_epi32(offset, 5)));
        const float dx = *reinterpret_cast<const float*>(px + 256);
        acc[i][a] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(d * dx), acc[i][a]);
      }
    }
  }
  store_sums<Nr, Na>(c, r, b0, acc);
}

// ---------------------------------------------------------------------------------------------
// Float formats: F32 and F16 weights against F32 activations; BF16 either by widening to F32 or,
// with AVX512-BF16, by vdpbf16ps against the activations split into bf16 high and low parts
// (x = hi + lo to 16 bits of mantissa, so the product stays at F32-like accuracy).

// The lanes of sixteen columns from k that a row of `cols` has.
INFERCAST_INLINE __mmask16 columns_from(std::size_t k, std::size_t cols) {
  if (k >= cols) return 0;
  return static_cast<__mmask16>(cols - k >= 16 ? 0xFFFF : (1U << (cols - k)) - 1);
}

template <GgmlType W>
inline __m512 load_weights16(const std::uint8_t* row, std::size_t k, __mmask16 mask) {
  if constexpr (W == GgmlType::f32) {
    return _mm512_maskz_loadu_ps(mask, reinterpret_cast<const float*>(row) + k);
  } else if constexpr (W == GgmlType::f16) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, reinterpret_cast<const std::uint16_t*>(row) + k));
  } else {
    const __m256i h = _mm256_maskz_loadu_epi16(mask, reinterpret_cast<const std::uint16_t*>(row) + k);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

// Sixteen columns of Nr rows against Na activation rows; `mask` selects the columns that exist.
// In a batch every vector loaded feeds several FMAs and is pinned to a register. A GEMV's
// activation vector feeds its four rows too, but pinned there it ran 1.18x as fast in cache and
// 0.94-0.97x from DRAM, where decode reads its weights (docs/PERFORMANCE.md, thirty-ninth
// session): the GEMV keeps the folded loads.
template <GgmlType W, int Nr, int Na>
INFERCAST_INLINE void float_step(const std::uint8_t* const (&rows)[Nr], const float* const (&x)[Na], std::size_t k,
                                 __mmask16 mask, Accumulators<Nr, Na>& acc) {
  __m512 xv[Na];
  INFERCAST_UNROLL
  for (int a = 0; a < Na; ++a) {
    xv[a] = _mm512_maskz_loadu_ps(mask, x[a] + k);
    if constexpr (Na > 1) INFERCAST_IN_REGISTER(xv[a]);
  }
  INFERCAST_UNROLL
  for (int i = 0; i < Nr; ++i) {
    __m512 wv = load_weights16<W>(rows[i], k, mask);
    if constexpr (Na > 1) INFERCAST_IN_REGISTER(wv);
    INFERCAST_UNROLL
    for (int a = 0; a < Na; ++a) acc[i][a] = _mm512_fmadd_ps(wv, xv[a], acc[i][a]);
  }
}

template <GgmlType W, int Nr, int Na>
void row_float(const GemmCall& c, std::size_t r, std::size_t b0) {
  const std::uint8_t* rows[Nr];
  for (int i = 0; i < Nr; ++i) rows[i] = c.w + (r + i) * c.row_bytes;
  const float* x[Na];
  for (int a = 0; a < Na; ++a) x[a] = c.x + (b0 + a) * c.ldx;
  Accumulators<Nr, Na> acc;
  zero<Nr, Na>(acc);
  const StreamPrefetch<Nr> ahead(c, r);
  constexpr std::size_t kElementBytes = W == GgmlType::f32 ? 4 : 2;
  // Whole 32-column steps with every lane on (one prefetch line per row each), then the rest
  // masked.
  std::size_t k = 0;
  for (; k + 32 <= c.cols; k += 32) {
    ahead.fetch(k * kElementBytes, 32 * kElementBytes);
    float_step<W, Nr, Na>(rows, x, k, 0xFFFF, acc);
    float_step<W, Nr, Na>(rows, x, k + 16, 0xFFFF, acc);
  }
  for (; k < c.cols; k += 16) float_step<W, Nr, Na>(rows, x, k, columns_from(k, c.cols), acc);
  store_sums<Nr, Na>(c, r, b0, acc);
}

std::size_t bf16_packed_row(std::size_t cols) { return round_up(cols, 32) * 4; }
std::size_t bf16_packed_bytes(std::size_t batch, std::size_t cols) { return batch * bf16_packed_row(cols); }

void pack_bf16_split(const GemmCall& c, std::size_t begin, std::size_t end) {
  const std::size_t padded = round_up(c.cols, 32);
  for (std::size_t b = begin; b < end; ++b) {
    auto* hi = reinterpret_cast<std::uint16_t*>(c.packed + b * bf16_packed_row(c.cols));
    std::uint16_t* lo = hi + padded;
    const float* x = c.x + b * c.ldx;
    for (std::size_t k = 0; k < padded; ++k) {
      const float v = k < c.cols ? x[k] : 0.0F;
      hi[k] = fp32_to_bf16(v);
      lo[k] = fp32_to_bf16(v - bf16_to_fp32(hi[k]));
    }
  }
}

// From kBf16RoundMinBatch activation rows on, the activations are rounded to bf16, as the AMX
// BF16 tiles round them at these batches: one vdpbf16ps per product instead of two, and half
// the activation bytes. Batched BF16 is compute-bound there, and the high/low split held it to
// half the BF16 dot peak.
std::size_t bf16_round_packed_row(std::size_t cols) { return round_up(cols, 32) * 2; }
std::size_t bf16_round_packed_bytes(std::size_t batch, std::size_t cols) { return batch * bf16_round_packed_row(cols); }

void pack_bf16_round(const GemmCall& c, std::size_t begin, std::size_t end) {
  const std::size_t padded = round_up(c.cols, 32);
  for (std::size_t b = begin; b < end; ++b) {
    auto* out = reinterpret_cast<std::uint16_t*>(c.packed + b * bf16_round_packed_row(c.cols));
    const float* x = c.x + b * c.ldx;
    std::size_t k = 0;
    for (; k + 32 <= c.cols; k += 32) {
      const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + k + 16), _mm512_loadu_ps(x + k));
      _mm512_store_si512(out + k, reinterpret_cast<__m512i>(v));
    }
    for (; k < padded; ++k) out[k] = k < c.cols ? fp32_to_bf16(x[k]) : 0;
  }
}

// With the low parts (`Low`), they get accumulators of their own, so the two vdpbf16ps of a
// step do not wait on each other, for one or two activation rows (GEMV: 57 -> 75 GB/s in
// cache); with three or four, a block of four weight rows has twelve or more independent chains
// already and no registers for a second set. Decided by the activation rows alone, which every
// block of weight rows shares, so a row's sums do not depend on the block it fell in.
template <bool Low, int Na>
inline constexpr bool kSplitBf16Sums = Low && Na <= 2;

// Thirty-two columns of Nr rows against Na activation rows: their bf16 (high) parts, and with
// `Low` their low parts too.
template <bool Low, int Nr, int Na>
INFERCAST_INLINE void bf16_step(const GemmCall& c, const std::uint16_t* const (&rows)[Nr], std::size_t b0, std::size_t k,
                                __mmask32 mask, Accumulators<Nr, Na>& hi_acc, Accumulators<Nr, Na>& split_lo_acc) {
  Accumulators<Nr, Na>& lo_acc = kSplitBf16Sums<Low, Na> ? split_lo_acc : hi_acc;
  const std::size_t padded = round_up(c.cols, 32);
  const std::size_t stride = (Low ? bf16_packed_row(c.cols) : bf16_round_packed_row(c.cols)) / 2;
  // In a batch each weight and activation vector is loaded once, into a register
  // (INFERCAST_IN_REGISTER), and every product between them taken from there.
  __m512i wv[Nr];
  INFERCAST_UNROLL
  for (int i = 0; i < Nr; ++i) {
    wv[i] = _mm512_maskz_loadu_epi16(mask, rows[i] + k);
    if constexpr (Na > 1) INFERCAST_IN_REGISTER(wv[i]);
  }
  INFERCAST_UNROLL
  for (int a = 0; a < Na; ++a) {
    const std::uint16_t* hi = reinterpret_cast<const std::uint16_t*>(c.packed) + (b0 + a) * stride + k;
    __m512i xh = _mm512_load_si512(hi);
    if constexpr (Nr > 1 && Na > 1) INFERCAST_IN_REGISTER(xh);  // a GEMV keeps its folded loads (float_step)
    __m512i xl = xh;
    if constexpr (Low) {
      xl = _mm512_load_si512(hi + padded);
      if constexpr (Nr > 1 && Na > 1) INFERCAST_IN_REGISTER(xl);
    }
    INFERCAST_UNROLL
    for (int i = 0; i < Nr; ++i) {
      hi_acc[i][a] = _mm512_dpbf16_ps(hi_acc[i][a], reinterpret_cast<__m512bh>(wv[i]), reinterpret_cast<__m512bh>(xh));
      if constexpr (Low) {
        lo_acc[i][a] = _mm512_dpbf16_ps(lo_acc[i][a], reinterpret_cast<__m512bh>(wv[i]), reinterpret_cast<__m512bh>(xl));
      }
    }
  }
}

template <bool Low, int Nr, int Na>
void row_bf16_dot(const GemmCall& c, std::size_t r, std::size_t b0) {
  const std::uint16_t* rows[Nr];
  for (int i = 0; i < Nr; ++i) rows[i] = reinterpret_cast<const std::uint16_t*>(c.w + (r + i) * c.row_bytes);
  Accumulators<Nr, Na> acc;
  Accumulators<Nr, Na> lo_acc;  // unused (and dropped by the compiler) unless kSplitBf16Sums
  zero<Nr, Na>(acc);
  if constexpr (kSplitBf16Sums<Low, Na>) zero<Nr, Na>(lo_acc);
  // Every row is its own stream, prefetched ahead as the other row kernels' are; whole steps
  // unmasked, the rest masked.
  const StreamPrefetch<Nr> ahead(c, r);
  std::size_t k = 0;
  for (; k + 32 <= c.cols; k += 32) {
    ahead.fetch(k * 2, 64);
    bf16_step<Low, Nr, Na>(c, rows, b0, k, 0xFFFFFFFFU, acc, lo_acc);
  }
  if (k < c.cols) bf16_step<Low, Nr, Na>(c, rows, b0, k, static_cast<__mmask32>((1U << (c.cols - k)) - 1), acc, lo_acc);
  if constexpr (kSplitBf16Sums<Low, Na>) {
    INFERCAST_UNROLL
    for (int i = 0; i < Nr; ++i) {
      INFERCAST_UNROLL
      for (int a = 0; a < Na; ++a) acc[i][a] = _mm512_add_ps(acc[i][a], lo_acc[i][a]);
    }
  }
  store_sums<Nr, Na>(c, r, b0, acc);
}

template <bool Low>
struct RowBf16Dot {
  template <int Nr, int Na>
  struct Row {
    static void run(const GemmCall& c, std::size_t r, std::size_t b) { row_bf16_dot<Low, Nr, Na>(c, r, b); }
  };
};

#include "kernels/gemm_simd_common.inc"

// The panels' vocabulary (kernels/float_panel.inc): sixteen activation rows per vector, and
// twelve weight rows against two blocks of them in 24 of the 32 registers.
using PanelVec = __m512;
constexpr std::size_t kPanelLanes = 16;
constexpr int kPanelRows = 12;

INFERCAST_INLINE __m512 panel_zero() { return _mm512_setzero_ps(); }
INFERCAST_INLINE __m512 panel_set1(float v) { return _mm512_set1_ps(v); }
INFERCAST_INLINE __m512 panel_fma(__m512 a, __m512 b, __m512 acc) { return _mm512_fmadd_ps(a, b, acc); }
INFERCAST_INLINE __m512 panel_load(const float* p) { return _mm512_load_ps(p); }
INFERCAST_INLINE void panel_store(float* p, __m512 v) { _mm512_store_ps(p, v); }
INFERCAST_INLINE __m512 panel_columns(const float* x, std::size_t k, std::size_t cols) {
  return _mm512_maskz_loadu_ps(columns_from(k, cols), x + k);
}
template <GgmlType W>
INFERCAST_INLINE __m512 widen_weights(const std::uint8_t* row, std::size_t k, std::size_t cols) {
  return load_weights16<W>(row, k, columns_from(k, cols));
}

// Sixteen vectors of sixteen 32-bit elements, transposed in place: element k of vector l goes to
// element l of vector k, in 64 shuffles.
INFERCAST_INLINE void transpose_panel(__m512 (&v)[16]) {
  __m512 t[16];
  // Within each 128-bit lane L: rows 2m and 2m+1 interleaved, then rows 4i..4i+3 at column 4L+c
  // in v[4i + c].
  INFERCAST_UNROLL
  for (int m = 0; m < 8; ++m) {
    t[2 * m] = _mm512_unpacklo_ps(v[2 * m], v[2 * m + 1]);
    t[2 * m + 1] = _mm512_unpackhi_ps(v[2 * m], v[2 * m + 1]);
  }
  INFERCAST_UNROLL
  for (int i = 0; i < 4; ++i) {
    v[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    v[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    v[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    v[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  // Column 4L + c is lane L of v[c], v[4 + c], v[8 + c], v[12 + c]: a 4 x 4 transpose of lanes.
  INFERCAST_UNROLL
  for (int c = 0; c < 4; ++c) {
    const __m512 s0 = _mm512_shuffle_f32x4(v[c], v[4 + c], 0x44);
    const __m512 s1 = _mm512_shuffle_f32x4(v[c], v[4 + c], 0xEE);
    const __m512 s2 = _mm512_shuffle_f32x4(v[8 + c], v[12 + c], 0x44);
    const __m512 s3 = _mm512_shuffle_f32x4(v[8 + c], v[12 + c], 0xEE);
    t[c] = _mm512_shuffle_f32x4(s0, s2, 0x88);
    t[4 + c] = _mm512_shuffle_f32x4(s0, s2, 0xDD);
    t[8 + c] = _mm512_shuffle_f32x4(s1, s3, 0x88);
    t[12 + c] = _mm512_shuffle_f32x4(s1, s3, 0xDD);
  }
  INFERCAST_UNROLL
  for (int k = 0; k < 16; ++k) v[k] = t[k];
}

#include "kernels/float_panel.inc"

// BF16 with AVX512-BF16, from kBf16PanelMinBatch activation rows on: a panel whose element is a
// pair of columns. Each activation row is rounded to bf16 (as avx512_bf16_round rounds them) and
// lane l of vector j holds row l's columns 2j and 2j+1, so a weight row's pair is one 32-bit
// broadcast and one vdpbf16ps adds it into sixteen outputs. At batch 64 the row kernel, an
// activation vector loaded from L2 for every four products, held avx512_bf16_round to 38% of
// the BF16 dot peak (Zen 5).
std::size_t bf16_panel_pairs(std::size_t cols) { return round_up(cols, 32) / 2; }
std::size_t bf16_panel_block(std::size_t cols) { return bf16_panel_pairs(cols) * 64; }
std::size_t bf16_panel_bytes(std::size_t batch, std::size_t cols) {
  return round_up(batch, kPanelLanes) / kPanelLanes * bf16_panel_block(cols);
}

void pack_bf16_panel(const GemmCall& c, std::size_t begin, std::size_t end) {
  pack_transposed(c, begin, end, bf16_panel_block(c.cols), bf16_panel_pairs(c.cols), [&](const float* x, std::size_t j) {
    const __m512bh v = _mm512_cvtne2ps_pbh(panel_columns(x, 2 * j + 16, c.cols), panel_columns(x, 2 * j, c.cols));
    return _mm512_castsi512_ps(reinterpret_cast<__m512i>(v));
  });
}

// Pair j of Nr weight rows (a pair is two columns: 32 bits) against Nv activation blocks.
// `Odd`: the pair is a row's last column alone, its second weight zero.
template <bool Odd, int Nr, int Nv>
INFERCAST_INLINE void bf16_panel_step(const std::uint16_t* const (&rows)[Nr], const __m512i* const (&x)[Nv], std::size_t j,
                                      PanelAccumulators<Nr, Nv>& acc) {
  __m512bh xv[Nv];
  INFERCAST_UNROLL
  for (int v = 0; v < Nv; ++v) xv[v] = reinterpret_cast<__m512bh>(_mm512_load_si512(x[v] + j));
  INFERCAST_UNROLL
  for (int i = 0; i < Nr; ++i) {
    std::uint32_t pair = rows[i][2 * j];
    if constexpr (!Odd) std::memcpy(&pair, rows[i] + 2 * j, 4);
    const auto wp = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(pair)));
    INFERCAST_UNROLL
    for (int v = 0; v < Nv; ++v) acc[i][v] = _mm512_dpbf16_ps(acc[i][v], xv[v], wp);
  }
}

// Nr weight rows from r against Nv blocks of sixteen activation rows from block a0.
template <int Nr, int Nv>
void panel_bf16(const GemmCall& c, std::size_t r, std::size_t a0) {
  const std::uint16_t* rows[Nr];
  for (int i = 0; i < Nr; ++i) rows[i] = reinterpret_cast<const std::uint16_t*>(c.w + (r + i) * c.row_bytes);
  const __m512i* x[Nv];
  for (int v = 0; v < Nv; ++v) x[v] = reinterpret_cast<const __m512i*>(c.packed + (a0 + v) * bf16_panel_block(c.cols));
  PanelAccumulators<Nr, Nv> acc;
  zero<Nr, Nv>(acc);
  const StreamPrefetch<Nr> ahead(c, r);
  const std::size_t pairs = c.cols / 2;
  std::size_t j = 0;
  // Sixteen pairs (a line of each row) per prefetch.
  for (; j + 16 <= pairs; j += 16) {
    ahead.fetch(j * 4, 64);
    for (std::size_t t = j; t < j + 16; ++t) bf16_panel_step<false, Nr, Nv>(rows, x, t, acc);
  }
  for (; j < pairs; ++j) bf16_panel_step<false, Nr, Nv>(rows, x, j, acc);
  if (c.cols % 2 == 1) bf16_panel_step<true, Nr, Nv>(rows, x, pairs, acc);
  store_panel<Nr, Nv>(c, r, a0, acc);
}

void rows_bf16_panel(const GemmCall& c, std::size_t begin, std::size_t end, std::uint8_t*) {
  panel_row_blocks(begin, end, [&](auto nr, std::size_t r) {
    panel_block_pairs(c, [&](auto nv, std::size_t a) { panel_bf16<decltype(nr)::value, decltype(nv)::value>(c, r, a); });
  });
}

const PackFns kPack{q8_0_packed_bytes<GgmlType::q8_0>, pack_q8_0<GgmlType::q8_0>,
                    q8_0_packed_bytes<GgmlType::q4_0>, pack_q8_0<GgmlType::q4_0>,
                    q8_0_packed_bytes<GgmlType::q5_0>, pack_q8_0<GgmlType::q5_0>,
                    q8_k_packed_bytes,                 pack_q8_k<GgmlType::q4_k>,
                    pack_q8_k<GgmlType::q6_k>};
const KernelTable kPlain = make_kernels<false>("avx512", kPack);
const KernelTable kVnni = make_kernels<true>("avx512_vnni", kPack);
const GemmKernel kBf16Dot{"avx512_bf16", GgmlType::bf16, bf16_packed_bytes, pack_bf16_split, 1,
                          rows_driver<RowBf16Dot<true>::Row, kFloatBatchRows, kFloatMaxLast>, 1, nullptr};
const GemmKernel kBf16Round{"avx512_bf16_round", GgmlType::bf16, bf16_round_packed_bytes, pack_bf16_round, 1,
                            rows_driver<RowBf16Dot<false>::Row, kFloatBatchRows, kFloatMaxLast>, 1, nullptr};
const GemmKernel kBf16Panel{"avx512_bf16_panel", GgmlType::bf16, bf16_panel_bytes, pack_bf16_panel, kPanelLanes,
                            rows_bf16_panel, 1, nullptr};
const GemmKernel kF32Panel = float_panel_kernel<GgmlType::f32>("avx512_panel");
const GemmKernel kF16Panel = float_panel_kernel<GgmlType::f16>("avx512_panel");
const GemmKernel kBf16WidenedPanel = float_panel_kernel<GgmlType::bf16>("avx512_panel");

const ActivationQuantizers kQuantizers{quantize_q8_0_avx512, quantize_q8_k_avx512};

}  // namespace

const GemmKernel* avx512_gemm_kernel(GgmlType type, const CpuFeatures& cpu, std::size_t batch) {
  if (type == GgmlType::bf16 && cpu.avx512_bf16) {
    if (batch >= kBf16PanelMinBatch) return &kBf16Panel;
    return batch >= kBf16RoundMinBatch ? &kBf16Round : &kBf16Dot;
  }
  if (type == GgmlType::f32 && batch >= kFloatPanelMinBatch) return &kF32Panel;
  // BF16 without its dot instructions is widened as F16 is.
  if (type == GgmlType::f16 && batch >= kWidenedPanelMinBatch) return &kF16Panel;
  if (type == GgmlType::bf16 && batch >= kWidenedPanelMinBatch) return &kBf16WidenedPanel;
  return find_in(cpu.avx512_vnni ? kVnni : kPlain, type);
}

const ActivationQuantizers& avx512_activation_quantizers() { return kQuantizers; }

}  // namespace infercast
