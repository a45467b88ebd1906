// AMX kernels for batched work (compiled with -mamx-tile -mamx-int8 -mamx-bf16; selected only
// when the CPU has AMX and the kernel granted tile permission).
//
// Quantized formats use INT8 tiles. A row group of 16 weight rows is decoded once into signed
// bytes plus a float scale (and, for Q4_K/Q5_K, a float offset) per sub-block of 32 (Q6_K: 16),
// from either layout (amx_decode.h): a GGUF row at a time, or eight interleaved rows at a time.
// For every 16 activation rows, each sub-block is one tdpbssd of weights x packed activations;
// its int32 tile is scaled into 16 float accumulators with AVX-512 while the next tile multiply
// runs. Scales vary per sub-block on both sides, so that scaling is the price of block formats.
//
// BF16 tiles serve F16/BF16 weights, and the block formats at large batches
// (amx_bf16_min_batch): 32 weight rows are copied, converted or decoded (scales applied) to bf16
// scratch, and a 2x2 block of float accumulator tiles runs over K with no per-block work at all.
// Activations are packed to bf16 once per call and taken in blocks of up to 16 tiles that stay
// in L2 (rows longer than 2048 columns in column segments, so that a block keeps its 16 tiles);
// a block format's rows are decoded again for each block.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "kernels/aligned_buffer.h"
#include "kernels/amx_decode.h"
#include "kernels/formats.h"
#include "kernels/gemm.h"
#include "kernels/gemm_kernels.h"
#include "kernels/interleave.h"
#include "kernels/simd_quantize.h"
#include "probes/amx_tile_config.h"

namespace infercast {
namespace {


class TileSession {
 public:
  explicit TileSession(const TileConfig& cfg) { _tile_loadconfig(&cfg); }
  ~TileSession() { _tile_release(); }
  TileSession(const TileSession&) = delete;
  TileSession& operator=(const TileSession&) = delete;
};

constexpr std::size_t kTile = 16;

// Pulls the next row group into L2 a few lines at a time while the current one is multiplied,
// so the decode of each group reads from L2 instead of waiting on DRAM.
class NextGroupPrefetch {
 public:
  NextGroupPrefetch(const std::uint8_t* first_row, std::size_t rows, std::size_t row_bytes, std::size_t steps)
      : NextGroupPrefetch(first_row, rows, row_bytes, row_bytes, steps) {}
  // `bytes` from each of `rows` starts `stride` apart (a column segment of the rows).
  NextGroupPrefetch(const std::uint8_t* first, std::size_t rows, std::size_t stride, std::size_t bytes, std::size_t steps)
      : row_(first), row_bytes_(stride), lines_per_row_((bytes + 63) / 64), rows_left_(rows),
        per_step_(steps == 0 ? rows * lines_per_row_ : (rows * lines_per_row_ + steps - 1) / steps) {}
  // The lines not yet asked for, over `steps` calls of step() from now on.
  void spread_over(std::size_t steps) {
    const std::size_t left = rows_left_ * lines_per_row_ - line_;
    per_step_ = steps == 0 ? left : (left + steps - 1) / steps;
  }
  // Walks rows and lines by counting: a division per line, between tile products, showed in
  // profiles as the hottest instruction of the small-batch INT8 kernel.
  void step() {
    for (std::size_t n = 0; n < per_step_ && rows_left_ > 0; ++n) {
      _mm_prefetch(reinterpret_cast<const char*>(row_ + line_ * 64), _MM_HINT_T1);
      if (++line_ == lines_per_row_) {
        line_ = 0;
        row_ += row_bytes_;
        --rows_left_;
      }
    }
  }

 private:
  const std::uint8_t* row_;
  std::size_t row_bytes_;
  std::size_t lines_per_row_;
  std::size_t rows_left_;
  std::size_t per_step_;
  std::size_t line_ = 0;
};

// The F16C instruction: half.h's portable conversion is for the reference paths.
inline float half_to_float(std::uint16_t h) { return _cvtsh_ss(h); }

// ---------------------------------------------------------------------------------------------
// INT8 path.

template <GgmlType W>
constexpr std::size_t sub_block() {
  return W == GgmlType::q6_k ? 16 : 32;
}
template <GgmlType W>
constexpr bool has_offset() {
  return W == GgmlType::q4_k || W == GgmlType::q5_k;
}
template <GgmlType W>
constexpr bool uses_q8_k() {
  return W == GgmlType::q4_k || W == GgmlType::q5_k || W == GgmlType::q6_k;
}

// Packed activations per 16-row tile: for each sub-block j a B tile (S/4 rows of 64 bytes),
// then 16 scales per sub-block, then 16 offset sums per sub-block.
template <GgmlType W>
std::size_t int8_tile_bytes(std::size_t cols) {
  const std::size_t nsub = cols / sub_block<W>();
  return nsub * (sub_block<W>() * kTile + 2 * kTile * sizeof(float));
}

template <GgmlType W>
std::size_t int8_packed_bytes(std::size_t batch, std::size_t cols) {
  return round_up(batch, kTile) / kTile * int8_tile_bytes<W>(cols);
}

template <GgmlType W>
void int8_pack(const GemmCall& c, std::size_t begin, std::size_t end) {
  constexpr std::size_t S = sub_block<W>();
  const std::size_t nsub = c.cols / S;
  const auto& quant = avx512_activation_quantizers();
  std::vector<std::int8_t> q(c.cols);
  std::vector<float> scale(nsub);
  std::vector<float> sums(nsub);
  std::vector<BlockQ8_0> b8(c.cols / kQk);
  std::vector<BlockQ8_K> bk(c.cols / kQkK);
  for (std::size_t tile = begin / kTile; tile < (end + kTile - 1) / kTile; ++tile) {
    std::uint8_t* base = c.packed + tile * int8_tile_bytes<W>(c.cols);
    auto* xd = reinterpret_cast<float*>(base + nsub * S * kTile);
    float* xs = xd + nsub * kTile;
    for (std::size_t m = 0; m < kTile; ++m) {
      const std::size_t row = tile * kTile + m;
      if (row >= c.batch) {
        std::fill(q.begin(), q.end(), std::int8_t{0});
        std::fill(scale.begin(), scale.end(), 0.0F);
        std::fill(sums.begin(), sums.end(), 0.0F);
      } else if constexpr (uses_q8_k<W>()) {
        quant.q8_k(c.x + row * c.ldx, bk.data(), c.cols);
        for (std::size_t s = 0; s < bk.size(); ++s) {
          std::memcpy(q.data() + s * kQkK, bk[s].qs, kQkK);
          for (std::size_t j = 0; j < kQkK / S; ++j) {
            scale[s * (kQkK / S) + j] = bk[s].d;
            if constexpr (has_offset<W>()) {
              sums[s * 8 + j] = bk[s].d * static_cast<float>(bk[s].bsums[2 * j] + bk[s].bsums[2 * j + 1]);
            }
          }
        }
      } else {
        quant.q8_0(c.x + row * c.ldx, b8.data(), c.cols);
        for (std::size_t s = 0; s < b8.size(); ++s) {
          std::memcpy(q.data() + s * kQk, b8[s].qs, kQk);
          scale[s] = half_to_float(b8[s].d);
        }
      }
      // Column m of every B tile: row t holds quants 4t..4t+3 of the sub-block.
      for (std::size_t j = 0; j < nsub; ++j) {
        std::uint8_t* tile_b = base + j * S * kTile;
        for (std::size_t t = 0; t < S / 4; ++t) std::memcpy(tile_b + t * 64 + m * 4, q.data() + j * S + 4 * t, 4);
        xd[j * kTile + m] = scale[j];
        xs[j * kTile + m] = sums[j];
      }
    }
  }
}

// Decoded weights for one row group: bytes [16][ldq], scale and offset [16][nsub].
struct Int8Scratch : DecodedRows {
  float* tile_out;  // two 16x16 int32 tile stores
};

template <GgmlType W>
std::size_t int8_scratch_bytes(std::size_t cols) {
  const std::size_t nsub = cols / sub_block<W>();
  return kTile * (cols + 64) + 2 * nsub * kTile * sizeof(float) + 2 * 1024 + 256;
}

template <GgmlType W>
Int8Scratch int8_scratch(std::uint8_t* base, std::size_t cols) {
  const std::size_t nsub = cols / sub_block<W>();
  Int8Scratch s{};
  s.ldq = cols + 64;
  s.tile_out = reinterpret_cast<float*>(base);
  s.q = reinterpret_cast<std::int8_t*>(base + 2048);
  s.scale = reinterpret_cast<float*>(base + 2048 + round_up(kTile * s.ldq, 64));
  s.offset = s.scale + nsub * kTile;
  s.nsub = nsub;
  return s;
}

// Whether an interleaved group of eight starts at row r (a multiple of eight, as the row steps
// keep it) with at least eight of the `left` rows to decode: past the matrix's last full group
// the rows keep the GGUF layout (kernels/interleave.h), as do all rows of a GGUF-layout matrix.
template <WeightLayout L>
bool whole_group(const GemmCall& c, std::size_t r, std::size_t left) {
  return L == WeightLayout::interleaved8 && left >= kInterleave && r + kInterleave <= c.rows / kInterleave * kInterleave;
}

// Rows [r0, r0 + count) of the weights into rows 0..count-1 of `s`, zeros from there to `fill`;
// whole interleaved groups eight rows at a time, the others a GGUF row at a time.
template <GgmlType W, WeightLayout L>
void decode_rows(const GemmCall& c, std::size_t r0, std::size_t count, std::size_t fill, const DecodedRows& s) {
  std::size_t n = 0;
  while (n < count) {
    if (whole_group<L>(c, r0 + n, count - n)) {
      decode_x8_group(W, c.w + (r0 + n) * c.row_bytes, c.cols, s, n);
      n += kInterleave;
    } else {
      decode_gguf_row(W, c.w + (r0 + n) * c.row_bytes, c.cols, s, n);
      ++n;
    }
  }
  for (; n < fill; ++n) {
    std::memset(s.q + n * s.ldq, 0, c.cols);
    std::fill(s.scale + n * s.nsub, s.scale + (n + 1) * s.nsub, 0.0F);
    std::fill(s.offset + n * s.nsub, s.offset + (n + 1) * s.nsub, 0.0F);
  }
}

template <GgmlType W, WeightLayout L>
void int8_rows(const GemmCall& c, std::size_t begin, std::size_t end, std::uint8_t* scratch) {
  constexpr std::size_t S = sub_block<W>();
  const std::size_t nsub = c.cols / S;
  const Int8Scratch s = int8_scratch<W>(scratch, c.cols);
  TileConfig cfg;
  // Four C tiles (0-3) and two sets of A and B tiles ({4, 6}, {5, 7}): sub-block j multiplies
  // into C tile j % 4 from set j % 2.
  for (int t = 0; t < 4; ++t) {
    cfg.rows[t] = kTile;  // C: 16 weight rows x 16 int32
    cfg.colsb[t] = 64;
  }
  for (int set = 0; set < 2; ++set) {
    cfg.rows[4 + set] = kTile;  // A: 16 weight rows x S bytes
    cfg.colsb[4 + set] = S;
    cfg.rows[6 + set] = S / 4;  // B: S/4 rows x 16 activations x 4 bytes
    cfg.colsb[6 + set] = 64;
  }
  TileSession session(cfg);
  auto* const out = reinterpret_cast<std::int32_t*>(s.tile_out);
  const std::size_t tiles_m = round_up(c.batch, kTile) / kTile;

  for (std::size_t r0 = begin; r0 < end; r0 += kTile) {
    const std::size_t nrows = std::min(kTile, end - r0);
    const std::size_t next_rows = r0 + kTile < end ? std::min(kTile, end - r0 - kTile) : 0;
    NextGroupPrefetch prefetch(c.w + (r0 + kTile) * c.row_bytes, next_rows, c.row_bytes, tiles_m * nsub);
    decode_rows<W, L>(c, r0, nrows, kTile, s);
    for (std::size_t mt = 0; mt < tiles_m; ++mt) {
      const std::uint8_t* base = c.packed + mt * int8_tile_bytes<W>(c.cols);
      const auto* xd = reinterpret_cast<const float*>(base + nsub * S * kTile);
      const float* xs = xd + nsub * kTile;
      __m512 acc[kTile];
      for (auto& a : acc) a = _mm512_setzero_ps();
      // Tile registers are not renamed and a tile product's result arrives tens of cycles after
      // it is issued, so the sub-blocks run as a pipeline: at step j the product of j + 3 is
      // issued, the result of j + 1 (issued two steps before) is stored, and j's stored result
      // (one step before) is scaled on the vector units. No instruction then waits on the one
      // just before it: the product issued at a step reuses the A and B tiles of the product
      // issued two steps before, and a C tile stored two steps before.
      const auto multiply = [&](std::size_t j) {
        const std::int8_t* a = s.q + j * S;
        const std::uint8_t* b = base + j * S * kTile;
        const auto lda = static_cast<long>(s.ldq);
        switch (j % 4) {
          case 0: _tile_zero(0); _tile_loadd(4, a, lda); _tile_loadd(6, b, 64); _tile_dpbssd(0, 4, 6); break;
          case 1: _tile_zero(1); _tile_loadd(5, a, lda); _tile_loadd(7, b, 64); _tile_dpbssd(1, 5, 7); break;
          case 2: _tile_zero(2); _tile_loadd(4, a, lda); _tile_loadd(6, b, 64); _tile_dpbssd(2, 4, 6); break;
          default: _tile_zero(3); _tile_loadd(5, a, lda); _tile_loadd(7, b, 64); _tile_dpbssd(3, 5, 7); break;
        }
      };
      const auto store = [&](std::size_t j) {
        std::int32_t* dst = out + (j % 2) * 256;
        switch (j % 4) {
          case 0: _tile_stored(0, dst, 64); break;
          case 1: _tile_stored(1, dst, 64); break;
          case 2: _tile_stored(2, dst, 64); break;
          default: _tile_stored(3, dst, 64); break;
        }
      };
      for (std::size_t j = 0; j < std::min<std::size_t>(3, nsub); ++j) multiply(j);
      store(0);
      for (std::size_t j = 0; j < nsub; ++j) {
        if (j + 3 < nsub) multiply(j + 3);
        if (j + 1 < nsub) store(j + 1);
        prefetch.step();
        const std::int32_t* tile = out + (j % 2) * 256;
        const __m512 xdv = _mm512_load_ps(xd + j * kTile);
        const float* sw = s.scale + j;
        for (std::size_t n = 0; n < kTile; ++n) {
          const __m512 dot = _mm512_cvtepi32_ps(_mm512_load_si512(tile + n * 16));
          acc[n] = _mm512_fmadd_ps(dot, _mm512_mul_ps(xdv, _mm512_set1_ps(sw[n * nsub])), acc[n]);
        }
        if constexpr (has_offset<W>()) {
          const __m512 xsv = _mm512_load_ps(xs + j * kTile);
          const float* ow = s.offset + j;
          for (std::size_t n = 0; n < kTile; ++n) acc[n] = _mm512_fmadd_ps(xsv, _mm512_set1_ps(ow[n * nsub]), acc[n]);
        }
      }
      alignas(64) float result[kTile][kTile];
      for (std::size_t n = 0; n < kTile; ++n) _mm512_store_ps(result[n], acc[n]);
      const std::size_t mcount = std::min(kTile, c.batch - mt * kTile);
      for (std::size_t m = 0; m < mcount; ++m) {
        float* y = c.y + (mt * kTile + m) * c.ldy + r0;
        for (std::size_t n = 0; n < nrows; ++n) y[n] = result[n][m];
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// BF16 path: F16/BF16 weights at every batch, the block formats from amx_bf16_min_batch on.
// A block format's weights are decoded to bf16 with their scales applied, so the tile products
// accumulate in float over the whole row with no per-sub-block work; the decode is repeated
// once per block of activation rows, which large batches amortize.

constexpr std::size_t kBf16Rows = 32;  // two A tiles per row group

// Per 16 activations: one B tile (16 rows of 16 bf16 pairs) per 32 columns.
std::size_t bf16_tile_bytes(std::size_t cols) { return cols / 32 * 1024; }
std::size_t bf16_packed_bytes(std::size_t batch, std::size_t cols) {
  return round_up(batch, kTile) / kTile * bf16_tile_bytes(cols);
}

// In place: r[i] dword j <-> r[j] dword i.
INFERCAST_INLINE void transpose16x16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  // t[4q + 2s + h]: rows 4q + 2s and 4q + 2s + 1 interleaved, the low (h = 0) or high dwords of each lane.
  __m512i u[16];
  for (int q = 0; q < 4; ++q) {
    const __m512i* a = t + 4 * q;
    u[4 * q + 0] = _mm512_unpacklo_epi64(a[0], a[2]);  // column 4l + 0 of rows 4q..4q+3, lane l
    u[4 * q + 1] = _mm512_unpackhi_epi64(a[0], a[2]);  // column 4l + 1
    u[4 * q + 2] = _mm512_unpacklo_epi64(a[1], a[3]);  // column 4l + 2
    u[4 * q + 3] = _mm512_unpackhi_epi64(a[1], a[3]);  // column 4l + 3
  }
  for (int j = 0; j < 4; ++j) {
    const __m512i a = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x88);   // lanes 0, 2 of quads 0, 1
    const __m512i b = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xDD);   // lanes 1, 3
    const __m512i c = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x88);
    const __m512i d = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xDD);
    r[j] = _mm512_shuffle_i32x4(a, c, 0x88);       // lane 0
    r[8 + j] = _mm512_shuffle_i32x4(a, c, 0xDD);   // lane 2
    r[4 + j] = _mm512_shuffle_i32x4(b, d, 0x88);   // lane 1
    r[12 + j] = _mm512_shuffle_i32x4(b, d, 0xDD);  // lane 3
  }
}

void bf16_pack(const GemmCall& c, std::size_t begin, std::size_t end) {
  const std::size_t chunks = c.cols / 32;
  for (std::size_t tile = begin / kTile; tile < (end + kTile - 1) / kTile; ++tile) {
    std::uint8_t* base = c.packed + tile * bf16_tile_bytes(c.cols);
    for (std::size_t k = 0; k < chunks; ++k) {
      // Row m of v: the 16 column pairs of activation m; transposed, row t holds pair t of all 16.
      __m512i v[16];
      for (std::size_t m = 0; m < kTile; ++m) {
        const std::size_t row = tile * kTile + m;
        if (row < c.batch) {
          const float* x = c.x + row * c.ldx + 32 * k;
          v[m] = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + 16), _mm512_loadu_ps(x)));
        } else {
          v[m] = _mm512_setzero_si512();
        }
      }
      transpose16x16(v);
      for (std::size_t t = 0; t < kTile; ++t) _mm512_store_si512(base + k * 1024 + t * 64, v[t]);
    }
  }
}

template <GgmlType W>
constexpr bool is_float_format() {
  return W == GgmlType::bf16 || W == GgmlType::f16;
}

// Activation tiles per block: as many as keep the block's packed activations (2 bytes a value)
// within about half of a 2 MiB L2, so every row group of the block reads them from L2.
std::size_t bf16_block_tiles(std::size_t cols) {
  const std::size_t budget = (1U << 20) / (2 * cols * kTile);
  return std::clamp<std::size_t>(budget / 2 * 2, 2, 16);
}

// Columns a block format's row group is decoded in at a time (a multiple of every block), so
// the next group's prefetch can advance between slices.
constexpr std::size_t kDecodeSlice = 256;
// Longer rows are multiplied in column segments of this many where the batch needs more than
// one block, their sums carried from segment to segment in memory, so that a block of
// activations keeps 16 tiles in L2 whatever the row length:
// sized by the whole row, a block of 8192 columns held 4 tiles and decoded its weights again every
// 64 tokens (Q4_0 on 2048x8192 stayed at 1221-1246 GOPS from batch 64 to 256, against 1323-2187
// on 8192x2048; docs/PERFORMANCE.md, forty-sixth session).
constexpr std::size_t kSegmentCols = 2048;
std::size_t bf16_segment(std::size_t cols) { return std::min(cols, kSegmentCols); }

std::size_t bf16_ldw(std::size_t cols) { return 2 * cols + 64; }  // the pad keeps tile rows off one set

struct Bf16Scratch {
  float* acc;          // per activation tile pair: four 16x16 float tiles
  std::uint8_t* w;     // kBf16Rows rows of bf16, stride bf16_ldw
  std::uint8_t* int8;  // a block format's decode of one row (Int8Scratch)
};

template <GgmlType W>
std::size_t bf16_scratch_bytes(std::size_t cols) {
  std::size_t bytes = bf16_block_tiles(bf16_segment(cols)) / 2 * 4096 + kBf16Rows * bf16_ldw(cols) + 64;
  if constexpr (!is_float_format<W>()) bytes += int8_scratch_bytes<W>(cols);
  return bytes;
}

template <GgmlType W>
Bf16Scratch bf16_scratch(std::uint8_t* base, std::size_t cols) {
  Bf16Scratch s{};
  s.acc = reinterpret_cast<float*>(base);
  s.w = base + bf16_block_tiles(bf16_segment(cols)) / 2 * 4096;
  s.int8 = s.w + round_up(kBf16Rows * bf16_ldw(cols), 64);
  return s;
}

template <GgmlType W>
void row_to_bf16(const std::uint8_t* src, std::size_t cols, const Bf16Scratch& s, std::uint16_t* dst) {
  if constexpr (W == GgmlType::bf16) {
    std::memcpy(dst, src, 2 * cols);
  } else if constexpr (W == GgmlType::f16) {
    for (std::size_t k = 0; k < cols; k += 32) {
      const __m512 a = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 2 * k)));
      const __m512 b = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 2 * k + 32)));
      _mm512_storeu_si512(dst + k, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(b, a)));
    }
  } else {
    decode_gguf_row_bf16(W, src, cols, dst, int8_scratch<W>(s.int8, cols));
  }
}

// The accumulators of activation tiles [first, last) of the block starting at tile mb, for
// weight rows r0.., into y: each float tile holds [weight row][activation], y is
// [activation][weight row].
void store_transposed(const GemmCall& c, const float* acc_base, std::size_t mb, std::size_t first, std::size_t last,
                      std::size_t r0, std::size_t nrows) {
  for (std::size_t mt = first; mt < last; ++mt) {
    const float* acc = acc_base + (mt - mb) / 2 * 1024 + (mt - mb) % 2 * 256;
    const std::size_t mcount = std::min(kTile, c.batch - mt * kTile);
    for (std::size_t h = 0; h * kTile < nrows; ++h) {
      __m512i v[16];
      for (std::size_t n = 0; n < kTile; ++n) v[n] = _mm512_load_si512(acc + h * 512 + n * 16);
      transpose16x16(v);
      const std::size_t count = std::min(kTile, nrows - h * kTile);
      const __mmask16 mask = static_cast<__mmask16>((1U << count) - 1U);
      for (std::size_t m = 0; m < mcount; ++m) {
        _mm512_mask_storeu_ps(c.y + (mt * kTile + m) * c.ldy + r0 + h * kTile, mask, reinterpret_cast<__m512>(v[m]));
      }
    }
  }
}

template <GgmlType W, WeightLayout L>
void bf16_rows(const GemmCall& c, std::size_t begin, std::size_t end, std::uint8_t* scratch) {
  const std::size_t ldw = bf16_ldw(c.cols);
  const auto lda = static_cast<long>(ldw);
  const Bf16Scratch s = bf16_scratch<W>(scratch, c.cols);
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.rows[t] = kTile;
    cfg.colsb[t] = 64;
  }
  TileSession session(cfg);
  const std::size_t tiles_m = round_up(c.batch, kTile) / kTile;
  // Segments only where the whole row would take more than one block: where it takes one, they
  // carry the sums through memory for nothing (4096 columns at batch 64: BF16 0.88x, Q8_0 0.9x).
  const std::size_t segment = tiles_m <= bf16_block_tiles(c.cols) ? c.cols : bf16_segment(c.cols);
  const std::size_t block_tiles = bf16_block_tiles(segment);
  const std::size_t block_pairs = (block_tiles + 1) / 2;
  const auto& f = format_info(W);
  const auto bytes_of = [&](std::size_t cols) { return cols / static_cast<std::size_t>(f.block_elems) * f.block_bytes; };
  // The sums of every row group and activation pair between segments (4 KiB each).
  thread_local AlignedBuffer carried;
  float* const partial = segment < c.cols
                             ? reinterpret_cast<float*>(carried.reserve((end - begin + kBf16Rows - 1) / kBf16Rows * block_pairs * 4096))
                             : nullptr;
  for (std::size_t mb = 0; mb < tiles_m; mb += block_tiles) {
    const std::size_t mb_end = std::min(tiles_m, mb + block_tiles);
    for (std::size_t seg0 = 0; seg0 < c.cols; seg0 += segment) {
      const std::size_t seg_end = std::min(c.cols, seg0 + segment);
      const bool first = seg0 == 0;
      const bool last = seg_end == c.cols;
      const std::size_t k_begin = seg0 / 32;
      const std::size_t k_end = seg_end / 32;
      const std::size_t transpose_at = k_begin + std::min<std::size_t>(2, k_end - k_begin - 1);
      for (std::size_t r0 = begin; r0 < end; r0 += kBf16Rows) {
        const std::size_t nrows = std::min(kBf16Rows, end - r0);
        // A block format's next row group (this segment of it) is asked for while this one is
        // decoded and multiplied: half of its lines over the decode, in column slices across all
        // rows, the rest over the tile products (Q8_0 at batch 64 1.03-1.15x). A float format's
        // rows are only copied or converted, too quickly to spread anything over (BF16
        // 0.7-0.8x): its next group is asked for over the tile products alone. Interleaved
        // groups hold a segment of eight rows in one run.
        const std::size_t next_rows = r0 + kBf16Rows < end ? std::min(kBf16Rows, end - r0 - kBf16Rows) : 0;
        const std::size_t slice = is_float_format<W>() ? segment : kDecodeSlice;
        const std::size_t decode_steps = (seg_end - seg0 + slice - 1) / slice * (kBf16Rows / kInterleave);
        const std::size_t unit = L == WeightLayout::interleaved8 ? kInterleave : 1;
        NextGroupPrefetch prefetch(c.w + (r0 + kBf16Rows) * c.row_bytes + unit * bytes_of(seg0), (next_rows + unit - 1) / unit,
                                   unit * c.row_bytes, unit * bytes_of(seg_end - seg0), 2 * decode_steps);
        const auto decoded_eight = [&] {
          if constexpr (!is_float_format<W>()) prefetch.step();
        };
        // Through a padded buffer even for BF16: rows a power of two apart would share L1 sets.
        for (std::size_t k0 = seg0; k0 < seg_end; k0 += slice) {
          const std::size_t width = std::min(slice, seg_end - k0);
          const std::size_t skip = bytes_of(k0);
          for (std::size_t n = 0; n < kBf16Rows;) {
            std::uint16_t* dst = reinterpret_cast<std::uint16_t*>(s.w + n * ldw) + k0;
            // A group of eight at a time, the same bf16 as the GGUF rows' bit for bit.
            if (n < nrows && whole_group<L>(c, r0 + n, nrows - n)) {
              decode_x8_group_bf16(W, c.w + (r0 + n) * c.row_bytes + kInterleave * skip, width, dst, ldw / 2,
                                   int8_scratch<W>(s.int8, c.cols));
              n += kInterleave;
              decoded_eight();
              continue;
            }
            if (n < nrows) {
              row_to_bf16<W>(c.w + (r0 + n) * c.row_bytes + skip, width, s, dst);
            } else {
              std::memset(dst, 0, 2 * width);
            }
            if (++n % kInterleave == 0) decoded_eight();
          }
        }
        prefetch.spread_over((mb_end - mb + 1) / 2 * (k_end - k_begin));
        for (std::size_t mt = mb; mt < mb_end; mt += 2) {
          const std::uint8_t* b0 = c.packed + mt * bf16_tile_bytes(c.cols);
          const std::uint8_t* b1 = mt + 1 < mb_end ? b0 + bf16_tile_bytes(c.cols) : b0;  // odd tile: a spare product
          float* acc = s.acc + (mt - mb) / 2 * 1024;
          float* carry = partial == nullptr ? nullptr : partial + ((r0 - begin) / kBf16Rows * block_pairs + (mt - mb) / 2) * 1024;
          if (first) {
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
          } else {
            _tile_loadd(0, carry, 64);
            _tile_loadd(1, carry + 256, 64);
            _tile_loadd(2, carry + 512, 64);
            _tile_loadd(3, carry + 768, 64);
          }
          // Tiles are not renamed: a load waits for the products still reading the register, so
          // each is issued right after its last reader.
          for (std::size_t k = k_begin; k < k_end; ++k) {
            // The previous pair's outputs are transposed on the vector units while this pair's
            // first products run on the tile unit (1.07-1.4x, alternated runs). Decoding the next
            // row group there as well, into a second buffer, measured slower and was dropped.
            if (last && k == transpose_at && mt > mb) store_transposed(c, s.acc, mb, mt - 2, mt, r0, nrows);
            prefetch.step();
            _tile_loadd(4, s.w + 64 * k, lda);
            _tile_loadd(6, b0 + 1024 * k, 64);
            _tile_dpbf16ps(0, 4, 6);
            _tile_loadd(7, b1 + 1024 * k, 64);
            _tile_dpbf16ps(1, 4, 7);
            _tile_loadd(5, s.w + 16 * ldw + 64 * k, lda);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
          }
          float* out = last ? acc : carry;
          _tile_stored(0, out, 64);
          _tile_stored(1, out + 256, 64);
          _tile_stored(2, out + 512, 64);
          _tile_stored(3, out + 768, 64);
        }
        if (last) store_transposed(c, s.acc, mb, mb + (mb_end - mb - 1) / 2 * 2, mb_end, r0, nrows);  // the last pair
      }
    }
  }
}

template <GgmlType W, WeightLayout L = WeightLayout::gguf>
constexpr GemmKernel int8_kernel() {
  return GemmKernel{"amx_int8", W, int8_packed_bytes<W>, int8_pack<W>, kTile, int8_rows<W, L>, kTile,
                    int8_scratch_bytes<W>};
}
template <GgmlType W, WeightLayout L = WeightLayout::gguf>
constexpr GemmKernel bf16_kernel() {
  return GemmKernel{"amx_bf16", W, bf16_packed_bytes, bf16_pack, kTile, bf16_rows<W, L>, kBf16Rows, bf16_scratch_bytes<W>};
}

constexpr std::array kInt8Kernels = {
    int8_kernel<GgmlType::q8_0>(), int8_kernel<GgmlType::q4_0>(), int8_kernel<GgmlType::q5_0>(),
    int8_kernel<GgmlType::q4_k>(), int8_kernel<GgmlType::q5_k>(), int8_kernel<GgmlType::q6_k>(),
};
constexpr std::array kBf16Kernels = {
    bf16_kernel<GgmlType::bf16>(), bf16_kernel<GgmlType::f16>(),  bf16_kernel<GgmlType::q8_0>(),
    bf16_kernel<GgmlType::q4_0>(), bf16_kernel<GgmlType::q5_0>(), bf16_kernel<GgmlType::q4_k>(),
    bf16_kernel<GgmlType::q5_k>(), bf16_kernel<GgmlType::q6_k>(),
};

// The same tiles over interleaved weights: the block formats only (the float formats have no
// interleaved layout).
constexpr auto kX8 = WeightLayout::interleaved8;
constexpr std::array kInt8X8Kernels = {
    int8_kernel<GgmlType::q8_0, kX8>(), int8_kernel<GgmlType::q4_0, kX8>(), int8_kernel<GgmlType::q5_0, kX8>(),
    int8_kernel<GgmlType::q4_k, kX8>(), int8_kernel<GgmlType::q5_k, kX8>(), int8_kernel<GgmlType::q6_k, kX8>(),
};
constexpr std::array kBf16X8Kernels = {
    bf16_kernel<GgmlType::q8_0, kX8>(), bf16_kernel<GgmlType::q4_0, kX8>(), bf16_kernel<GgmlType::q5_0, kX8>(),
    bf16_kernel<GgmlType::q4_k, kX8>(), bf16_kernel<GgmlType::q5_k, kX8>(), bf16_kernel<GgmlType::q6_k, kX8>(),
};

template <class Int8, class Bf16>
const GemmKernel* pick(const Int8& int8, const Bf16& bf16, GgmlType type, std::size_t batch) {
  if (batch < amx_bf16_min_batch(type)) {
    for (const auto& k : int8) {
      if (k.type == type) return &k;
    }
  }
  for (const auto& k : bf16) {
    if (k.type == type) return &k;
  }
  return nullptr;
}

}  // namespace

const GemmKernel* amx_gemm_kernel(GgmlType type, std::size_t batch) { return pick(kInt8Kernels, kBf16Kernels, type, batch); }

const GemmKernel* amx_x8_gemm_kernel(GgmlType type, std::size_t batch) {
  return pick(kInt8X8Kernels, kBf16X8Kernels, type, batch);
}

}  // namespace infercast
