#pragma once
// Vector primitives for attention and the feed-forward's activation: dot products of a query
// with cached keys and accumulation of cached values (keys and values in F32 or F16), softmax,
// SwiGLU. One implementation per ISA level, like the GEMM kernels; vec_ops(level) gives the
// best one at or below `level`.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/prefetch_hint.h"
#include "probes/cpu_features.h"

namespace infercast {

struct VecOps {
  const char* name;
  float (*dot_f32)(const float* a, const float* b, std::size_t n);
  float (*dot_f16)(const std::uint16_t* a, const float* b, std::size_t n);
  void (*axpy_f32)(float a, const float* x, float* y, std::size_t n);           // y += a * x
  void (*axpy_f16)(float a, const std::uint16_t* x, float* y, std::size_t n);   // y += a * x
  // Attention takes its cache blocks in runs of up to kRunBlocks (run_blocks), `count`
  // positions in all, position j in block j / kKeyBlock. While block b of a run is read, the
  // block at ahead[b] (where not null) is asked for with the streaming hint: see
  // attend_tokens.
  //
  // Scores of the `heads` query heads that share a run of blocks of cached keys (grouped-query
  // attention). A block holds kKeyBlock keys column by column: element i of key j is
  // block[i * kKeyBlock + j], so one vector load takes element i of every key and no horizontal
  // sum is needed. All kKeyBlock columns of a block are read; only the run's positions stored:
  //   out[h * out_stride + j] = scale * sum_i q[h * n + i] * (key j)[i],  j < count
  void (*dot_keys_f32)(const float* const* blocks, const float* const* ahead, std::size_t count, const float* q,
                       std::size_t heads, std::size_t n, float scale, float* out, std::size_t out_stride);
  void (*dot_keys_f16)(const std::uint16_t* const* blocks, const std::uint16_t* const* ahead, std::size_t count,
                       const float* q, std::size_t heads, std::size_t n, float scale, float* out,
                       std::size_t out_stride);
  // Over a run of blocks of cached values (position j is row j % kKeyBlock of its block, a
  // block's rows n elements apart) and the heads that share them:
  //   y[h * n + i] += sum_j w[h * w_stride + j] * (position j's row)[i]
  void (*axpy_blocks_f32)(const float* w, std::size_t w_stride, const float* const* blocks, const float* const* ahead,
                          std::size_t count, std::size_t heads, std::size_t n, float* y);
  void (*axpy_blocks_f16)(const float* w, std::size_t w_stride, const std::uint16_t* const* blocks,
                          const std::uint16_t* const* ahead, std::size_t count, std::size_t heads, std::size_t n,
                          float* y);
  // In place: x becomes softmax(x).
  void (*softmax)(float* x, std::size_t n);
  // In place: gate[i] = silu(gate[i]) * up[i], the SwiGLU feed-forward's activation.
  void (*swiglu)(float* gate, const float* up, std::size_t n);
  // out[i] = x[i] as fp16, rounded to nearest even (the F16 KV cache's writes): bit for bit
  // fp32_to_fp16 (kernels/half.h) at every level.
  void (*to_f16)(const float* x, std::uint16_t* out, std::size_t n);
  // The index of the first largest of x[0..n), n >= 1, as std::max_element gives it: a NaN is
  // never larger than anything, and a NaN at x[0] is never replaced. Greedy decoding's token.
  std::size_t (*argmax)(const float* x, std::size_t n);
};

// Positions per block of cached keys: one 512-bit vector of F32 scores.
inline constexpr std::size_t kKeyBlock = 16;
// How many blocks ahead attention asks for keys (in the score pass) and values (in the value
// pass). Each is asked for with the streaming hint, a row at a time while the kernels read
// the block that many before it: see attend_tokens.
inline constexpr std::size_t kKeyPrefetchBlocks = 2;
inline constexpr std::size_t kValuePrefetchBlocks = 4;
// Attention's passes take up to this many blocks a call, and no more than kRunBytes of keys
// or values (run_blocks): a run is read once per group of heads (and in the value pass per
// group of columns), from L1 after the first; the value kernels keep a head group's sums in
// registers over the whole run, the score kernels take its blocks in pairs.
inline constexpr std::size_t kRunBlocks = 8;
inline constexpr std::size_t kRunBytes = std::size_t{16} << 10;
inline std::size_t run_blocks(std::size_t n, std::size_t element_bytes) {
  return std::clamp<std::size_t>(kRunBytes / (kKeyBlock * n * element_bytes), 1, kRunBlocks);
}

// Asks (with the streaming hint, kernels/prefetch_hint.h) for the lines of `bytes` from p,
// where p is not null: the kernels' requests for the blocks ahead (for_each_position,
// ask_for_key_rows).
inline void ask_for_lines(const void* p, std::size_t bytes) {
  if (p == nullptr) return;
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  for (std::size_t offset = 0; offset < bytes; offset += 64) stream_line(at + offset);
}

// step(row, j) for each position j of a run of blocks (the value pass's, see axpy_blocks_f32),
// row pointing at its n elements. With Ask, the same row of block ahead[b] is asked for (with the
// streaming hint) just before, where ahead[b] is not null: a block's lines spread over the
// positions of the block before it.
template <class T, bool Ask, class Step>
inline void for_each_position(const T* const* blocks, const T* const* ahead, std::size_t count, std::size_t n,
                              Step&& step) {
  const std::size_t row_bytes = n * sizeof(T);
  for (std::size_t j0 = 0, b = 0; j0 < count; j0 += kKeyBlock, ++b) {
    const T* next = Ask ? ahead[b] : nullptr;
    const std::size_t in_block = std::min(kKeyBlock, count - j0);
    for (std::size_t j = 0; j < in_block; ++j) {
      if constexpr (Ask) ask_for_lines(next == nullptr ? nullptr : next + j * n, row_bytes);
      step(blocks[b] + j * n, j0 + j);
    }
  }
}

// Asks (with the streaming hint) for element rows [i, i + rows) of the key block at
// `ahead`, where not null: the score kernels spread a block's request over the element rows of
// the block they read meanwhile.
template <class T>
inline void ask_for_key_rows(const T* ahead, std::size_t i, std::size_t rows) {
  ask_for_lines(ahead == nullptr ? nullptr : ahead + i * kKeyBlock, rows * kKeyBlock * sizeof(T));
}

// pass.template operator()<H>(h) over the heads in passes of four, then one pass of the three,
// two or one left: the vector kernels keep H heads' accumulators in registers.
template <class Pass>
void in_head_passes(std::size_t heads, Pass&& pass) {
  std::size_t h = 0;
  for (; h + 4 <= heads; h += 4) pass.template operator()<4>(h);
  switch (heads - h) {
    case 3: pass.template operator()<3>(h); break;
    case 2: pass.template operator()<2>(h); break;
    case 1: pass.template operator()<1>(h); break;
    default: break;
  }
}

// The column-layout scores and the value pass over blocks in plain loops; each ISA file
// instantiates them with its own element conversion and inlined axpy.
template <class T, float (*ToFloat)(T)>
void dot_keys_by_keys(const T* const* blocks, const T* const* /*ahead*/, std::size_t count, const float* q,
                      std::size_t heads, std::size_t n, float scale, float* out, std::size_t out_stride) {
  for (std::size_t h = 0; h < heads; ++h) {
    for (std::size_t j = 0; j < count; ++j) {
      const T* keys = blocks[j / kKeyBlock] + j % kKeyBlock;
      float s = 0;
      for (std::size_t i = 0; i < n; ++i) s += q[h * n + i] * ToFloat(keys[i * kKeyBlock]);
      out[h * out_stride + j] = scale * s;
    }
  }
}
template <class T, void (*Axpy)(float, const T*, float*, std::size_t)>
void axpy_blocks_by_rows(const float* w, std::size_t w_stride, const T* const* blocks, const T* const* /*ahead*/,
                         std::size_t count, std::size_t heads, std::size_t n, float* y) {
  for (std::size_t h = 0; h < heads; ++h) {
    for (std::size_t j = 0; j < count; ++j) {
      Axpy(w[h * w_stride + j], blocks[j / kKeyBlock] + j % kKeyBlock * n, y + h * n, n);
    }
  }
}

// The reference softmax (max-subtracted, sum in double), shared by the scalar and AVX2 tables.
void softmax_reference(float* x, std::size_t n);
// The reference SwiGLU activation (std::exp), likewise shared.
void swiglu_reference(float* gate, const float* up, std::size_t n);
// fp32_to_fp16 over n values, the scalar table's to_f16 and the vector tables' tail.
void to_f16_reference(const float* x, std::uint16_t* out, std::size_t n);
// std::max_element's index, the scalar table's argmax.
std::size_t argmax_reference(const float* x, std::size_t n);

const VecOps& vec_ops(IsaLevel level);

// Attention of `tokens` consecutive positions of one sequence at once (a prompt's tokens), each
// with the `heads` query heads of q (head size n) that share one KV head: token i over the
// first lens[i] cached positions (lens ascending), in blocks of kKeyBlock (keys in the column
// layout, values in rows, of element type T: float or F16 bits). `key_block(b)` and
// `value_block(b)` give block b's data, so the engine's block tables and a benchmark's flat
// arrays both serve. q holds the tokens' heads one after another (tokens x heads rows of n);
// scores go to `scores` (tokens x heads rows of lens[tokens - 1]), the weighted sums of the
// values to `out` (tokens x heads rows of n).
//
// Each block of keys and values is loaded once for every token's heads: a prompt token by token
// loaded the keys and values before it once per token, from L2 or beyond. A position a token
// does not see gets probability zero, which adds exactly nothing, so each token's output is the
// one it gets alone, bit for bit.
//
// With `max_score` and `exp_sum` (tokens x heads each) it also gives each row's largest score m
// and sum of exp(score - m): what merging it with attention over other positions needs.
template <class T, class KeyBlock, class ValueBlock>
void attend_tokens(const VecOps& ops, const float* q, std::size_t tokens, std::size_t heads, std::size_t n,
                   const std::size_t* lens, float scale, KeyBlock&& key_block, ValueBlock&& value_block, float* scores,
                   float* out, float* max_score = nullptr, float* exp_sum = nullptr) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, std::uint16_t>, "an F32 or F16 cache");
  constexpr bool kF32 = std::is_same_v<T, float>;
  const std::size_t len = lens[tokens - 1];
  const std::size_t rows = tokens * heads;
  // A decode step's keys and values come from DRAM: the weights streamed since they were
  // written. Each pass asks for its own stream a few blocks ahead with the streaming hint,
  // the lines' only use following shortly. Asking for the values during the score pass into L2
  // (T1) and the keys into L1 (T0) held a task from DRAM to 8-11 GB/s on one Zen 5 core; this
  // way the task took 0.5-0.65x the time at 2048 positions and 0.6-0.8x at 512, and within
  // 1.2x of the task from cache (`attention_dram` against `attention` in
  // bench/bench_kernels.cpp, docs/PERFORMANCE.md, thirty-seventh session).
  const std::size_t blocks = (len + kKeyBlock - 1) / kKeyBlock;
  const std::size_t run = run_blocks(n, sizeof(T));
  const T* in_run[kRunBlocks];
  const T* ahead[kRunBlocks];
  // The first kValuePrefetchBlocks blocks' keys go two blocks a call (the score kernels' pair),
  // each call's values asked for before it, into L2, to be there after the softmax: the value
  // pass asks for none of these, and a short task (a few blocks, as most are early in a
  // decode) has no other. Then runs of blocks.
  for (std::size_t b0 = 0; b0 < blocks;) {
    const std::size_t step = b0 < kValuePrefetchBlocks ? 2 : run;
    const std::size_t in_call = std::min(step, blocks - b0);
    for (std::size_t b = 0; b < in_call; ++b) {
      if (b0 + b < kValuePrefetchBlocks) {
        const auto* values = reinterpret_cast<const char*>(value_block(b0 + b));
        const std::size_t bytes = std::min(kKeyBlock, len - (b0 + b) * kKeyBlock) * n * sizeof(T);
        for (std::size_t at = 0; at < bytes; at += 64) __builtin_prefetch(values + at, 0, 2);
      }
      in_run[b] = key_block(b0 + b);
      ahead[b] = b0 + b + kKeyPrefetchBlocks < blocks ? key_block(b0 + b + kKeyPrefetchBlocks) : nullptr;
    }
    const std::size_t j0 = b0 * kKeyBlock;
    const std::size_t count = std::min(in_call * kKeyBlock, len - j0);
    // All query heads of the group in one call: each key is loaded once for all of them.
    if constexpr (kF32) {
      ops.dot_keys_f32(in_run, ahead, count, q, rows, n, scale, scores + j0, len);
    } else {
      ops.dot_keys_f16(in_run, ahead, count, q, rows, n, scale, scores + j0, len);
    }
    b0 += in_call;
  }
  for (std::size_t r = 0; r < rows; ++r) {
    float* row = scores + r * len;
    const std::size_t seen = lens[r / heads];
    if (max_score == nullptr) {
      ops.softmax(row, seen);
    } else {
      // The largest score's probability is exp(0) / sum: the sum without another pass of exp.
      const std::size_t top = static_cast<std::size_t>(std::max_element(row, row + seen) - row);
      max_score[r] = row[top];
      ops.softmax(row, seen);
      exp_sum[r] = 1.0F / row[top];
    }
    std::fill(row + seen, row + len, 0.0F);
  }
  std::fill(out, out + rows * n, 0.0F);
  // The values in runs of blocks, each block's lines asked for kValuePrefetchBlocks blocks ahead
  // of its use (the first ones were asked for in the score pass).
  for (std::size_t b0 = 0; b0 < blocks; b0 += run) {
    const std::size_t in_call = std::min(run, blocks - b0);
    for (std::size_t b = 0; b < in_call; ++b) {
      in_run[b] = value_block(b0 + b);
      ahead[b] = b0 + b + kValuePrefetchBlocks < blocks ? value_block(b0 + b + kValuePrefetchBlocks) : nullptr;
    }
    const std::size_t j0 = b0 * kKeyBlock;
    const std::size_t count = std::min(in_call * kKeyBlock, len - j0);
    if constexpr (kF32) {
      ops.axpy_blocks_f32(scores + j0, len, in_run, ahead, count, rows, n, out);
    } else {
      ops.axpy_blocks_f16(scores + j0, len, in_run, ahead, count, rows, n, out);
    }
  }
}

// One token's attention (attend_tokens of one token): scores go to `scores` (heads x len), the
// weighted sums to `out` (heads x n), and with `max_score` and `exp_sum`, one of each per head.
template <class T, class KeyBlock, class ValueBlock>
void attend(const VecOps& ops, const float* q, std::size_t heads, std::size_t n, std::size_t len, float scale,
            KeyBlock&& key_block, ValueBlock&& value_block, float* scores, float* out, float* max_score = nullptr,
            float* exp_sum = nullptr) {
  attend_tokens<T>(ops, q, 1, heads, n, &len, scale, key_block, value_block, scores, out, max_score, exp_sum);
}

// Per-ISA tables (internal; each in its own translation unit).
const VecOps& scalar_vec_ops();
const VecOps& avx2_vec_ops();
const VecOps& avx512_vec_ops();

}  // namespace infercast
