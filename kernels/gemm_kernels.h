#pragma once
// Internal contract between the GEMM front (gemm.cpp) and one kernel implementation. A kernel is
// a row of function pointers, ggml-style: the front packs activations once per call (split by
// activation rows across threads), lines the threads up, then hands each its output rows.
#include <cstddef>
#include <cstdint>

#include "kernels/blocks.h"
#include "kernels/simd_macros.h"
#include "probes/cpu_features.h"

namespace infercast {

struct GemmCall {
  const std::uint8_t* w;   // weight rows
  std::size_t row_bytes;
  std::size_t rows;
  std::size_t cols;
  const float* x;          // activations, batch rows of cols floats, stride ldx
  std::size_t ldx;
  std::size_t batch;
  float* y;                // y[b * ldy + r]
  std::size_t ldy;
  std::uint8_t* packed;    // packed_bytes(batch, cols) bytes, 64-byte aligned
};

struct GemmKernel {
  const char* name;
  GgmlType type;
  // Packed activation size for this kernel (0 when it reads x directly).
  std::size_t (*packed_bytes)(std::size_t batch, std::size_t cols);
  // Packs activation rows [begin, end); `begin` is a multiple of pack_step.
  void (*pack)(const GemmCall& call, std::size_t begin, std::size_t end);
  std::size_t pack_step;
  // Computes output rows [begin, end) for every activation row; `begin` is a multiple of row_step.
  void (*rows)(const GemmCall& call, std::size_t begin, std::size_t end, std::uint8_t* scratch);
  std::size_t row_step;
  std::size_t (*scratch_bytes)(std::size_t cols);  // per thread, may be null
};

// Kernel tables per ISA variant; nullptr where a variant lacks a format. Each lives in its own
// translation unit compiled for that ISA.
const GemmKernel* scalar_gemm_kernel(GgmlType type);
// `batch`: F32, F16 and BF16 batches from kFloatPanelMinBatch / kWidenedPanelMinBatch rows take
// the panel kernels (kernels/float_panel.inc).
const GemmKernel* avx2_gemm_kernel(GgmlType type, const CpuFeatures& cpu, std::size_t batch);
// `batch`: BF16 weights from kBf16RoundMinBatch activation rows on round the activations to
// bf16 (kernel "avx512_bf16_round"), as the AMX BF16 tiles do; from kBf16PanelMinBatch (BF16),
// kFloatPanelMinBatch (F32) and kWidenedPanelMinBatch (F16) the panel kernels take them.
const GemmKernel* avx512_gemm_kernel(GgmlType type, const CpuFeatures& cpu, std::size_t batch);
const GemmKernel* amx_gemm_kernel(GgmlType type, std::size_t batch);
// The same AMX kernels reading the interleaved layout (the block formats): each group of eight
// rows is decoded into the tile rows by an 8x8 transpose of four-quant groups (amx_decode.h).
const GemmKernel* amx_x8_gemm_kernel(GgmlType type, std::size_t batch);
// The kernels of the interleaved layout (every batch): AVX-512 VNNI (not for every format), AVX2,
// and the scalar reference.
// Q4_0 and Q8_0 batches of kPairMinBatch rows and more take their activation rows in pairs
// ("avx512_x8_pairs"); below it the pairs' second permute per weight load costs more than
// their saving (Q4_0 batch 2, Zen 4: 0.94x).
inline constexpr std::size_t kPairMinBatch = 4;
// Q5_0 takes its pairs from batch 9, and its sixteen-row kernel below that (from
// kSixteenMinBatch): 4096x14336 from DRAM, two threads, Zen 5, alternated, against the
// single-row kernel the pairs ran 0.83x at batch 4 and 0.92x at 8 but 1.18x at 9, 1.2x at 10
// and 12, 1.14-1.19x at 16 and 64; the sixteen-row kernel 0.95-1.03x at 3 and 4, 1.02-1.07x
// at 6 and 8 (1.1-1.17x at 8 on one core in cache), but 0.96x the pairs at 9 and 0.9x at 12.
inline constexpr std::size_t kQ5_0PairMinBatch = 9;
// Q4_0 batches from kSixteenMinBatch to kSixteenMaxBatch rows take two groups of eight rows side
// by side instead ("avx512_x16"; kernels/gemm_x8_avx512.cpp has the figures). Batch 2 gained
// 1.03x (not worth a third kernel there), batches 16-64 0.88-1.07x, where the pairs kernel
// decodes a block once for up to sixteen activation rows.
inline constexpr std::size_t kSixteenMinBatch = 3;
inline constexpr std::size_t kSixteenMaxBatch = 15;
// From kThirtyTwoMinBatch to kSixteenMaxBatch, Q4_0 takes two such pairs of groups at a time
// ("avx512_x32"), four streams per thread. In TinyLlama Q4_0's decode, alternated against the
// sixteen-row kernel (docs/PERFORMANCE.md, forty-second session): eight users 1.03-1.12x, but
// six 0.96x and four 0.89x (0.93x and 0.97x with its streams twice as far ahead), though the
// kernel sweep's 4096x14336 from DRAM ran it 1.02-1.09x at batches 4 and 6.
inline constexpr std::size_t kThirtyTwoMinBatch = 8;
const GemmKernel* avx512_x8_gemm_kernel(GgmlType type, std::size_t batch);
const GemmKernel* avx2_x8_gemm_kernel(GgmlType type);
const GemmKernel* scalar_x8_gemm_kernel(GgmlType type);

// AMX pays a fixed decode per row group; below this many activation rows AVX-512 is faster.
inline constexpr std::size_t kAmxMinBatch = 8;
// From here on, batched products round activations to bf16 wherever the weights are bf16
// (AMX tiles, AVX-512 BF16): the batches where those kernels are compute-bound.
inline constexpr std::size_t kBf16RoundMinBatch = kAmxMinBatch;
// From here on, AVX-512 BF16 batches take sixteen activation rows per vector
// ("avx512_bf16_panel"; gemm_avx512.cpp says why).
inline constexpr std::size_t kBf16PanelMinBatch = 16;
// The same for F32 weights ("avx512_panel", "avx2_panel"), and for F16 weights (and BF16 without
// AVX512-BF16), which are widened to F32 once per block of rows and win only where the batch
// repays that.
inline constexpr std::size_t kFloatPanelMinBatch = 16;
inline constexpr std::size_t kWidenedPanelMinBatch = 32;
// From this batch on, a block format is decoded to bf16 once per block of activation rows and
// multiplied on BF16 tiles, instead of on INT8 tiles with an AVX-512 rescale per sub-block.
// Measured on 4096x4096, 2 threads, weights from DRAM (docs/PERFORMANCE.md, forty-sixth session,
// a 2-core Xeon with AMX): the K-quants, whose INT8 tiles rescale with an offset too, gained
// 1.1-1.25x over INT8 tiles at 32 and 48 (16 was measured against the AVX-512 kernels only), and
// Q6_K, which rescales twice as often, had gained from 32 on the first sessions' Xeon; the
// 32-weight formats tie at 32 and gain at 64 (Q8_0 1.09x, Q4_0 1.23x; on the first sessions'
// Xeon they tied at 64). F16/BF16 always use BF16 tiles.
inline std::size_t amx_bf16_min_batch(GgmlType type) {
  return type == GgmlType::q4_k || type == GgmlType::q5_k || type == GgmlType::q6_k ? 16 : 64;
}
// Interleaved weights at the AMX level stay on the interleaved AVX-512 kernels below this batch.
// On the 2-core Xeon of the forty-sixth session (4096x4096, DRAM) the K-quants and Q6_K on BF16
// tiles beat them from 16 (1.6-1.8x); Q8_0 and Q4_0 on INT8 tiles tie at 16 and win at 24
// (1.6-1.9x, where the pairs kernel runs an odd batch). On the 16-core Xeon of the nineteenth
// session the AVX-512 kernels won at 16 over the GGUF-layout INT8 tiles of then.
inline std::size_t amx_x8_min_batch(GgmlType type) {
  return type == GgmlType::q4_k || type == GgmlType::q5_k || type == GgmlType::q6_k ? 16 : 24;
}

inline std::size_t round_up(std::size_t n, std::size_t m) { return (n + m - 1) / m * m; }

}  // namespace infercast
