// AVX2 + FMA kernels, with AVX-VNNI (vpdpbusd/vpdpwssd on ymm) where the CPU has it. One block
// or sub-block of 32 quants per vector; activations keep the reference Q8_0/Q8_K layout.
#include <immintrin.h>

#include <array>
#include <bit>
#include <cstring>
#include <vector>

#include "kernels/gemm_kernels.h"
#include "kernels/half.h"
#include "kernels/q8_0_avx2.h"
#include "kernels/simd_quantize.h"
#include "kernels/stream_prefetch.h"
#include "kernels/with_count.h"

namespace infercast {
namespace {

constexpr int kMaxNa = 4;
// Weight rows per activation load in the float kernels' batches: 2 x 4 accumulators leave
// room in 16 registers for the loaded vectors.
constexpr int kFloatBatchRows = 2;
constexpr int kFloatMaxLast = 4;  // sixteen registers: no room for more accumulators

#include "kernels/k_scales.inc"

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline int hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
  return _mm_cvtsi128_si32(s);
}

inline float hmax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline __m256 abs_ps(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0F), v); }

// Packs eight int32 lanes (each in [-128, 127]) to eight bytes.
inline std::uint64_t pack_bytes(__m256i q) {
  const __m256i w = _mm256_packs_epi32(q, q);            // int16, per 128-bit lane
  const __m256i b = _mm256_packs_epi16(w, w);            // int8, per 128-bit lane
  const auto lo = static_cast<std::uint32_t>(_mm256_extract_epi32(b, 0));
  const auto hi = static_cast<std::uint32_t>(_mm256_extract_epi32(b, 4));
  return lo | (static_cast<std::uint64_t>(hi) << 32);
}

void quantize_q8_0_avx2(const float* x, BlockQ8_0* y, std::size_t count) {
  quantize_q8_0_blocks(x, count / kQk, [&](std::size_t k, float, std::uint16_t d, __m256i q) {
    y[k].d = d;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[k].qs), q);
  });
}

void quantize_q8_k_avx2(const float* x, BlockQ8_K* y, std::size_t count) {
  for (std::size_t b = 0; b < count / kQkK; ++b, x += kQkK) {
    __m256 m = _mm256_setzero_ps();
    for (int i = 0; i < kQkK; i += 8) m = _mm256_max_ps(m, abs_ps(_mm256_loadu_ps(x + i)));
    const float amax = hmax(m);
    if (amax == 0) {
      std::memset(&y[b], 0, sizeof(BlockQ8_K));
      continue;
    }
    // The reference keeps the sign of the first element of largest magnitude.
    float max = 0;
    for (int i = 0; i < kQkK; i += 8) {
      const int at = _mm256_movemask_ps(_mm256_cmp_ps(abs_ps(_mm256_loadu_ps(x + i)), _mm256_set1_ps(amax), _CMP_EQ_OQ));
      if (at != 0) {
        max = x[i + std::countr_zero(static_cast<unsigned>(at))];
        break;
      }
    }
    const float iscale = -127.F / max;
    for (int i = 0; i < kQkK; i += 16) {
      const __m256i q0 = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i), _mm256_set1_ps(iscale))),
                                          _mm256_set1_epi32(127));
      const __m256i q1 = _mm256_min_epi32(
          _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 8), _mm256_set1_ps(iscale))), _mm256_set1_epi32(127));
      const std::uint64_t b0 = pack_bytes(q0);
      const std::uint64_t b1 = pack_bytes(q1);
      std::memcpy(y[b].qs + i, &b0, 8);
      std::memcpy(y[b].qs + i + 8, &b1, 8);
      y[b].bsums[i / 16] = static_cast<std::int16_t>(hsum_epi32(_mm256_add_epi32(q0, q1)));
    }
    y[b].d = 1 / iscale;
  }
}

template <bool Vnni>
inline __m256i dot_u8s8(__m256i acc, __m256i u, __m256i s) {
  if constexpr (Vnni) {
    return _mm256_dpbusd_avx_epi32(acc, u, s);
  } else {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
  }
}

template <bool Vnni>
inline __m256i dot_s16(__m256i acc, __m256i a, __m256i b) {
  if constexpr (Vnni) {
    return _mm256_dpwssd_avx_epi32(acc, a, b);
  } else {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
  }
}

// Activations: reference Q8_0 or Q8_K rows, each padded to 64 bytes.
template <class Act>
std::size_t act_row(std::size_t cols) {
  return round_up(cols / (sizeof(Act) == sizeof(BlockQ8_0) ? kQk : kQkK) * sizeof(Act), 64);
}
template <class Act>
std::size_t packed_bytes(std::size_t batch, std::size_t cols) {
  return batch * act_row<Act>(cols);
}
void pack_q8_0(const GemmCall& c, std::size_t begin, std::size_t end) {
  for (std::size_t b = begin; b < end; ++b) {
    quantize_q8_0_avx2(c.x + b * c.ldx, reinterpret_cast<BlockQ8_0*>(c.packed + b * act_row<BlockQ8_0>(c.cols)), c.cols);
  }
}
void pack_q8_k(const GemmCall& c, std::size_t begin, std::size_t end) {
  for (std::size_t b = begin; b < end; ++b) {
    quantize_q8_k_avx2(c.x + b * c.ldx, reinterpret_cast<BlockQ8_K*>(c.packed + b * act_row<BlockQ8_K>(c.cols)), c.cols);
  }
}

template <class Act, int Na>
struct Activations {
  const Act* row[kMaxNa];
  Activations(const GemmCall& c, std::size_t b0) {
    INFERCAST_UNROLL
    for (int a = 0; a < Na; ++a) row[a] = reinterpret_cast<const Act*>(c.packed + (b0 + a) * act_row<Act>(c.cols));
  }
};

template <class Block, int Nr>
struct WeightRows {
  const Block* row[Nr];
  WeightRows(const GemmCall& c, std::size_t r) {
    INFERCAST_UNROLL
    for (int i = 0; i < Nr; ++i) row[i] = reinterpret_cast<const Block*>(c.w + (r + i) * c.row_bytes);
  }
};

// Accumulators sized exactly [Nr][Na] and this inlined, as in gemm_avx512.cpp, where the padded
// array kept the sums in memory; the AVX2 kernels measured the same either way.
template <int Nr, int Na>
INFERCAST_INLINE void store_sums(const GemmCall& c, std::size_t r, std::size_t b0, const __m256 (&acc)[Nr][Na]) {
  INFERCAST_UNROLL
  for (int i = 0; i < Nr; ++i) {
    INFERCAST_UNROLL
    for (int a = 0; a < Na; ++a) c.y[(b0 + a) * c.ldy + r + i] = hsum(acc[i][a]);
  }
}

// Q5_0's fifth bits as bytes: 0xFF at byte j where bit j of the block's qh is set. Byte j takes
// byte j / 8 of qh, and keeps bit j % 8 alone.
INFERCAST_INLINE __m256i q5_0_high_bytes(const BlockQ5_0& blk) {
  std::uint32_t qh = 0;
  std::memcpy(&qh, blk.qh, 4);
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(qh)),
      _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ULL));
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
}

// Q8_0, Q4_0 and Q5_0: signed weights, the sign moved onto the activations (vpsignb) so the
// product is unsigned x signed.
template <GgmlType W, bool Vnni, int Nr, int Na>
void row_q8_0(const GemmCall& c, std::size_t r, std::size_t b0) {
  using Block = LegacyBlock<W>;
  const WeightRows<Block, Nr> w(c, r);
  const Activations<BlockQ8_0, Na> act(c, b0);
  __m256 acc[Nr][Na];
  for (auto& row : acc) {
    for (auto& v : row) v = _mm256_setzero_ps();
  }
  const StreamPrefetch<Nr> ahead(c, r);
  for (std::size_t b = 0; b < c.cols / kQk; ++b) {
    ahead.fetch(b * sizeof(Block), sizeof(Block));
    INFERCAST_UNROLL
    for (int i = 0; i < Nr; ++i) {
      const Block& blk = w.row[i][b];
      __m256i v;
      if constexpr (W == GgmlType::q8_0) {
        v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs));
      } else {
        const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.qs));
        v = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0F));
        if constexpr (W == GgmlType::q5_0) {
          v = _mm256_or_si256(v, _mm256_and_si256(q5_0_high_bytes(blk), _mm256_set1_epi8(0x10)));
          v = _mm256_sub_epi8(v, _mm256_set1_epi8(16));
        } else {
          v = _mm256_sub_epi8(v, _mm256_set1_epi8(8));
        }
      }
      const __m256i u = _mm256_sign_epi8(v, v);
      const float dw = _cvtsh_ss(blk.d);
      INFERCAST_UNROLL
      for (int a = 0; a < Na; ++a) {
        const BlockQ8_0& x = act.row[a][b];
        const __m256i s = _mm256_sign_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs)), v);
        const __m256i dot = dot_u8s8<Vnni>(_mm256_setzero_si256(), u, s);
        acc[i][a] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(dw * _cvtsh_ss(x.d)), acc[i][a]);
      }
    }
  }
  store_sums<Nr, Na>(c, r, b0, acc);
}

template <GgmlType W, bool Vnni, int Nr, int Na>
void row_k4(const GemmCall& c, std::size_t r, std::size_t b0) {
  using Block = std::conditional_t<W == GgmlType::q4_k, BlockQ4_K, BlockQ5_K>;
  const WeightRows<Block, Nr> w(c, r);
  const Activations<BlockQ8_K, Na> act(c, b0);
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  __m256 acc[Nr][Na];
  __m128 mins_acc[Nr][Na];
  INFERCAST_UNROLL
  for (int i = 0; i < Nr; ++i) {
    INFERCAST_UNROLL
    for (int a = 0; a < Na; ++a) {
      acc[i][a] = _mm256_setzero_ps();
      mins_acc[i][a] = _mm_setzero_ps();
    }
  }
  const StreamPrefetch<Nr> ahead(c, r);
  for (std::size_t s = 0; s < c.cols / kQkK; ++s) {
    ahead.fetch(s * sizeof(Block), sizeof(Block));
    INFERCAST_UNROLL
    for (int i = 0; i < Nr; ++i) {
      const Block& blk = w.row[i][s];
      alignas(16) std::uint8_t sm[16];
      unpack_k4_scales(blk.scales, sm);
      const __m128i m16 = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sm + 8)));
      __m256i u[8];
      for (int j = 0; j < 4; ++j) {
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs + 32 * j));
        u[2 * j] = _mm256_and_si256(q, nibble);
        u[2 * j + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 4), nibble);
      }
      if constexpr (W == GgmlType::q5_k) {
        const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qh));
        for (int j = 0; j < 8; ++j) {
          const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << j));
          const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(qh, bit), bit);
          u[j] = _mm256_or_si256(u[j], _mm256_and_si256(set, _mm256_set1_epi8(16)));
        }
      }
      const float d = _cvtsh_ss(blk.d);
      const float dmin = _cvtsh_ss(blk.dmin);
      INFERCAST_UNROLL
      for (int a = 0; a < Na; ++a) {
        const BlockQ8_K& x = act.row[a][s];
        __m256i isum = _mm256_setzero_si256();
        for (int j = 0; j < 8; ++j) {
          const __m256i pairs =
              _mm256_maddubs_epi16(u[j], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + 32 * j)));
          isum = dot_s16<Vnni>(isum, pairs, _mm256_set1_epi16(sm[j]));
        }
        acc[i][a] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(d * x.d), acc[i][a]);
        const __m128i sums = _mm_hadd_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x.bsums)),
                                            _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.bsums + 8)));
        mins_acc[i][a] =
            _mm_fmadd_ps(_mm_cvtepi32_ps(_mm_madd_epi16(m16, sums)), _mm_set1_ps(dmin * x.d), mins_acc[i][a]);
      }
    }
  }
  INFERCAST_UNROLL
  for (int i = 0; i < Nr; ++i) {
    INFERCAST_UNROLL
    for (int a = 0; a < Na; ++a) {
      __m128 m = _mm_add_ps(mins_acc[i][a], _mm_movehl_ps(mins_acc[i][a], mins_acc[i][a]));
      m = _mm_add_ss(m, _mm_movehdup_ps(m));
      c.y[(b0 + a) * c.ldy + r + i] = hsum(acc[i][a]) - _mm_cvtss_f32(m);
    }
  }
}

template <bool Vnni, int Nr, int Na>
void row_q6_k(const GemmCall& c, std::size_t r, std::size_t b0) {
  const WeightRows<BlockQ6_K, Nr> w(c, r);
  const Activations<BlockQ8_K, Na> act(c, b0);
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  const __m256i two_bits = _mm256_set1_epi8(0x03);
  __m256 acc[Nr][Na];
  for (auto& row : acc) {
    for (auto& v : row) v = _mm256_setzero_ps();
  }
  const StreamPrefetch<Nr> ahead(c, r);
  for (std::size_t s = 0; s < c.cols / kQkK; ++s) {
    ahead.fetch(s * sizeof(BlockQ6_K), sizeof(BlockQ6_K));
    INFERCAST_UNROLL
    for (int i = 0; i < Nr; ++i) {
      const BlockQ6_K& blk = w.row[i][s];
      __m256i u[8];
      __m256i scales[8];
      for (int h = 0; h < 2; ++h) {
        const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.ql + 64 * h));
        const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.ql + 64 * h + 32));
        const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qh + 32 * h));
        const auto high = [&](int shift) {
          return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, shift), two_bits), 4);
        };
        u[4 * h + 0] = _mm256_or_si256(_mm256_and_si256(ql0, nibble), high(0));
        u[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(ql1, nibble), high(2));
        u[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), nibble), high(4));
        u[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), nibble), high(6));
        for (int k = 0; k < 4; ++k) {
          const int g = 8 * h + 2 * k;
          scales[4 * h + k] = _mm256_set_m128i(_mm_set1_epi16(blk.scales[g + 1]), _mm_set1_epi16(blk.scales[g]));
        }
      }
      const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.scales)));
      const float d = _cvtsh_ss(blk.d);
      INFERCAST_UNROLL
      for (int a = 0; a < Na; ++a) {
        const BlockQ8_K& x = act.row[a][s];
        __m256i isum = _mm256_setzero_si256();
        for (int v = 0; v < 8; ++v) {
          const __m256i pairs =
              _mm256_maddubs_epi16(u[v], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + 32 * v)));
          isum = dot_s16<Vnni>(isum, pairs, scales[v]);
        }
        const __m256i offset = _mm256_madd_epi16(sc16, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.bsums)));
        isum = _mm256_sub_epi32(isum, _mm256_slli_epi32(offset, 5));
        acc[i][a] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(d * x.d), acc[i][a]);
      }
    }
  }
  store_sums<Nr, Na>(c, r, b0, acc);
}

template <GgmlType W>
inline __m256 load_weights8(const std::uint8_t* row, std::size_t k) {
  if constexpr (W == GgmlType::f32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + k);
  } else if constexpr (W == GgmlType::f16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * k)));
  } else {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * k));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
}

template <GgmlType W>
inline float weight_at(const std::uint8_t* row, std::size_t k) {
  if constexpr (W == GgmlType::f32) {
    return reinterpret_cast<const float*>(row)[k];
  } else {
    std::uint16_t h = 0;
    std::memcpy(&h, row + 2 * k, 2);
    return W == GgmlType::f16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
  }
}

template <GgmlType W, int Nr, int Na>
void row_float(const GemmCall& c, std::size_t r, std::size_t b0) {
  const std::uint8_t* rows[Nr];
  INFERCAST_UNROLL
  for (int i = 0; i < Nr; ++i) rows[i] = c.w + (r + i) * c.row_bytes;
  __m256 acc[Nr][Na];
  for (auto& row : acc) {
    for (auto& v : row) v = _mm256_setzero_ps();
  }
  const StreamPrefetch<Nr> ahead(c, r);
  constexpr std::size_t kElementBytes = W == GgmlType::f32 ? 4 : 2;
  std::size_t k = 0;
  for (; k + 8 <= c.cols; k += 8) {
    if (k % 32 == 0) ahead.fetch(k * kElementBytes, 32 * kElementBytes);
    __m256 x[Na];
    INFERCAST_UNROLL
    for (int a = 0; a < Na; ++a) x[a] = _mm256_loadu_ps(c.x + (b0 + a) * c.ldx + k);
    INFERCAST_UNROLL
    for (int i = 0; i < Nr; ++i) {
      const __m256 wv = load_weights8<W>(rows[i], k);
      INFERCAST_UNROLL
      for (int a = 0; a < Na; ++a) acc[i][a] = _mm256_fmadd_ps(wv, x[a], acc[i][a]);
    }
  }
  INFERCAST_UNROLL
  for (int i = 0; i < Nr; ++i) {
    INFERCAST_UNROLL
    for (int a = 0; a < Na; ++a) {
      float sum = hsum(acc[i][a]);
      for (std::size_t t = k; t < c.cols; ++t) sum += weight_at<W>(rows[i], t) * c.x[(b0 + a) * c.ldx + t];
      c.y[(b0 + a) * c.ldy + r + i] = sum;
    }
  }
}

#include "kernels/gemm_simd_common.inc"

// The panels' vocabulary (kernels/float_panel.inc): eight activation rows per vector, and six
// weight rows against two blocks of them in 12 of the 16 registers.
using PanelVec = __m256;
constexpr std::size_t kPanelLanes = 8;
constexpr int kPanelRows = 6;

INFERCAST_INLINE __m256 panel_zero() { return _mm256_setzero_ps(); }
INFERCAST_INLINE __m256 panel_set1(float v) { return _mm256_set1_ps(v); }
INFERCAST_INLINE __m256 panel_fma(__m256 a, __m256 b, __m256 acc) { return _mm256_fmadd_ps(a, b, acc); }
INFERCAST_INLINE __m256 panel_load(const float* p) { return _mm256_load_ps(p); }
INFERCAST_INLINE void panel_store(float* p, __m256 v) { _mm256_store_ps(p, v); }
INFERCAST_INLINE __m256 panel_columns(const float* x, std::size_t k, std::size_t cols) {
  if (k + 8 <= cols) return _mm256_loadu_ps(x + k);
  alignas(32) float part[8] = {};
  for (std::size_t t = k; t < cols; ++t) part[t - k] = x[t];
  return _mm256_load_ps(part);
}
template <GgmlType W>
INFERCAST_INLINE __m256 widen_weights(const std::uint8_t* row, std::size_t k, std::size_t cols) {
  if (k + 8 <= cols) return load_weights8<W>(row, k);
  alignas(32) float part[8] = {};
  for (std::size_t t = k; t < cols; ++t) part[t - k] = weight_at<W>(row, t);
  return _mm256_load_ps(part);
}

// Eight vectors of eight floats, transposed in place: element k of vector l goes to element l of
// vector k, in 24 shuffles.
INFERCAST_INLINE void transpose_panel(__m256 (&v)[8]) {
  __m256 t[8];
  // Within each 128-bit lane L: rows 2m and 2m+1 interleaved, then rows 4i..4i+3 at column 4L+c
  // in v[4i + c].
  INFERCAST_UNROLL
  for (int m = 0; m < 4; ++m) {
    t[2 * m] = _mm256_unpacklo_ps(v[2 * m], v[2 * m + 1]);
    t[2 * m + 1] = _mm256_unpackhi_ps(v[2 * m], v[2 * m + 1]);
  }
  INFERCAST_UNROLL
  for (int i = 0; i < 2; ++i) {
    v[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    v[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    v[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    v[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  // Column c is the low lanes of v[c] and v[4 + c], column 4 + c their high lanes.
  INFERCAST_UNROLL
  for (int c = 0; c < 4; ++c) {
    t[c] = _mm256_permute2f128_ps(v[c], v[4 + c], 0x20);
    t[4 + c] = _mm256_permute2f128_ps(v[c], v[4 + c], 0x31);
  }
  INFERCAST_UNROLL
  for (int k = 0; k < 8; ++k) v[k] = t[k];
}

#include "kernels/float_panel.inc"

const PackFns kPack{packed_bytes<BlockQ8_0>, pack_q8_0, packed_bytes<BlockQ8_0>, pack_q8_0, packed_bytes<BlockQ8_0>,
                    pack_q8_0,                 packed_bytes<BlockQ8_K>, pack_q8_k, pack_q8_k};
const KernelTable kPlain = make_kernels<false>("avx2", kPack);
const KernelTable kVnni = make_kernels<true>("avx2_vnni", kPack);
const ActivationQuantizers kQuantizers{quantize_q8_0_avx2, quantize_q8_k_avx2};
const std::array<GemmKernel, 3> kPanels{float_panel_kernel<GgmlType::f32>("avx2_panel"),
                                        float_panel_kernel<GgmlType::f16>("avx2_panel"),
                                        float_panel_kernel<GgmlType::bf16>("avx2_panel")};

}  // namespace

const GemmKernel* avx2_gemm_kernel(GgmlType type, const CpuFeatures& cpu, std::size_t batch) {
  const std::size_t panel_from = type == GgmlType::f32 ? kFloatPanelMinBatch : kWidenedPanelMinBatch;
  if (batch >= panel_from) {
    for (const auto& k : kPanels) {
      if (k.type == type) return &k;
    }
  }
  return find_in(cpu.avx_vnni ? kVnni : kPlain, type);
}

const ActivationQuantizers& avx2_activation_quantizers() { return kQuantizers; }

}  // namespace infercast
