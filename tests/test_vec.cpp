// Every ISA's attention primitives against the scalar ones, at lengths that exercise the tails.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/half.h"
#include "kernels/vec.h"
#include "probes/random.h"

namespace infercast {
namespace {

TEST(VecOps, EveryLevelMatchesScalar) {
  const VecOps& ref = scalar_vec_ops();
  SeededRng rng(11);
  for (int l = 0; l <= static_cast<int>(max_supported_level(host_cpu())); ++l) {
    const VecOps& ops = vec_ops(static_cast<IsaLevel>(l));
    for (std::size_t n : {1U, 7U, 15U, 16U, 17U, 33U, 64U, 100U, 128U}) {
      std::vector<float> a(n), b(n), y(n), y_ref(n);
      std::vector<std::uint16_t> h(n);
      for (std::size_t i = 0; i < n; ++i) {
        a[i] = rng.gaussian();
        b[i] = rng.gaussian();
        h[i] = fp32_to_fp16(a[i]);
        y[i] = y_ref[i] = rng.gaussian();
      }
      const float tol = 1e-5F * static_cast<float>(n);
      EXPECT_NEAR(ops.dot_f32(a.data(), b.data(), n), ref.dot_f32(a.data(), b.data(), n), tol) << ops.name << " n=" << n;
      EXPECT_NEAR(ops.dot_f16(h.data(), b.data(), n), ref.dot_f16(h.data(), b.data(), n), tol) << ops.name << " n=" << n;
      ops.axpy_f32(0.75F, a.data(), y.data(), n);
      ref.axpy_f32(0.75F, a.data(), y_ref.data(), n);
      ops.axpy_f16(-1.5F, h.data(), y.data(), n);
      ref.axpy_f16(-1.5F, h.data(), y_ref.data(), n);
      for (std::size_t i = 0; i < n; ++i) EXPECT_NEAR(y[i], y_ref[i], 1e-5F) << ops.name << " n=" << n << " i=" << i;
    }
  }
}

// Scores over a run of key blocks in the column layout against the same level's dot product of
// each key gathered into a row, for every head count the kernels split into passes, head sizes
// with odd tails, and runs of one block, of pairs and of an odd block after pairs. The columns
// past `count` hold NaN: they are read, and must change nothing. Each block is an allocation of
// its own, and every other run asks for its blocks again, ahead: only a hint, never a change.
TEST(VecOps, KeyScoresMatchPerKeyDots) {
  SeededRng rng(13);
  for (int l = 0; l <= static_cast<int>(max_supported_level(host_cpu())); ++l) {
    const VecOps& ops = vec_ops(static_cast<IsaLevel>(l));
    for (std::size_t count : {1U, 5U, 15U, 16U, 17U, 32U, 40U, 128U}) {
      for (std::size_t n : {1U, 7U, 33U, 64U, 128U, 300U}) {
        for (std::size_t heads : {1U, 2U, 3U, 4U, 5U, 8U, 9U, 12U}) {
          const std::size_t blocks = (count + kKeyBlock - 1) / kKeyBlock;
          ASSERT_LE(blocks, kRunBlocks);
          std::vector<std::vector<float>> keys(blocks, std::vector<float>(n * kKeyBlock, std::nanf("")));
          std::vector<std::vector<std::uint16_t>> half_keys(blocks, std::vector<std::uint16_t>(n * kKeyBlock, 0x7E00));
          std::vector<std::vector<float>> key_rows(count, std::vector<float>(n));
          std::vector<std::vector<std::uint16_t>> half_rows(count, std::vector<std::uint16_t>(n));
          for (std::size_t j = 0; j < count; ++j) {
            for (std::size_t i = 0; i < n; ++i) {
              const std::size_t at = i * kKeyBlock + j % kKeyBlock;
              keys[j / kKeyBlock][at] = key_rows[j][i] = rng.gaussian();
              half_keys[j / kKeyBlock][at] = half_rows[j][i] = fp32_to_fp16(key_rows[j][i]);
            }
          }
          std::vector<const float*> at32(blocks), ahead32(blocks, nullptr);
          std::vector<const std::uint16_t*> at16(blocks), ahead16(blocks, nullptr);
          for (std::size_t b = 0; b < blocks; ++b) {
            at32[b] = keys[b].data();
            at16[b] = half_keys[b].data();
          }
          if (count % 2 == 0) {
            ahead32 = at32;
            ahead16 = at16;
          }
          std::vector<float> q(heads * n);
          for (auto& v : q) v = rng.gaussian();
          const std::size_t out_stride = count + 4;  // rows of scores wider than the run, as in attention
          std::vector<float> out32(heads * out_stride, -7.0F), out16(heads * out_stride, -7.0F);
          ops.dot_keys_f32(at32.data(), ahead32.data(), count, q.data(), heads, n, 0.5F, out32.data(), out_stride);
          ops.dot_keys_f16(at16.data(), ahead16.data(), count, q.data(), heads, n, 0.5F, out16.data(), out_stride);
          const std::string where = std::string(ops.name) + " count " + std::to_string(count) + " n " +
                                    std::to_string(n) + " heads " + std::to_string(heads);
          // Sums run in another order than one dot product's: a few ulp of the magnitude.
          const float tol = 2e-6F * static_cast<float>(n);
          for (std::size_t h = 0; h < heads; ++h) {
            for (std::size_t j = 0; j < out_stride; ++j) {
              if (j >= count) {  // never written
                EXPECT_EQ(out32[h * out_stride + j], -7.0F) << where;
                EXPECT_EQ(out16[h * out_stride + j], -7.0F) << where;
                continue;
              }
              EXPECT_NEAR(out32[h * out_stride + j], 0.5F * ops.dot_f32(key_rows[j].data(), &q[h * n], n), tol) << where;
              EXPECT_NEAR(out16[h * out_stride + j], 0.5F * ops.dot_f16(half_rows[j].data(), &q[h * n], n), tol) << where;
            }
          }
        }
      }
    }
  }
}

// The value pass over a run of blocks against per-row calls of the same level's axpy, over
// run lengths around the 16-position block and up to kRunBlocks blocks, head sizes with
// tails and several heads sharing the rows. Each block is an allocation of its own, as the
// engine's pool blocks are apart, some runs ask for blocks ahead, and the rows past the run
// hold NaN.
TEST(VecOps, BlockVariantsMatchPerRowCalls) {
  SeededRng rng(12);
  for (int l = 0; l <= static_cast<int>(max_supported_level(host_cpu())); ++l) {
    const VecOps& ops = vec_ops(static_cast<IsaLevel>(l));
    for (std::size_t count : {1U, 5U, 16U, 17U, 40U, 128U}) {
      for (std::size_t n : {33U, 64U, 80U, 128U, 300U}) {
        for (std::size_t heads : {1U, 3U, 8U, 9U, 12U}) {
          const std::size_t blocks = (count + kKeyBlock - 1) / kKeyBlock;
          ASSERT_LE(blocks, kRunBlocks);
          std::vector<std::vector<float>> rows(blocks, std::vector<float>(kKeyBlock * n));
          std::vector<std::vector<std::uint16_t>> half_rows(blocks, std::vector<std::uint16_t>(kKeyBlock * n));
          std::vector<const float*> at32(blocks);
          std::vector<const std::uint16_t*> at16(blocks);
          for (std::size_t b = 0; b < blocks; ++b) {
            for (std::size_t i = 0; i < kKeyBlock * n; ++i) half_rows[b][i] = fp32_to_fp16(rows[b][i] = rng.gaussian());
            at32[b] = rows[b].data();
            at16[b] = half_rows[b].data();
          }
          // The last block's rows past the run hold NaN, as a cache's unwritten tail may: never read.
          for (std::size_t i = count % kKeyBlock * n; count % kKeyBlock != 0 && i < kKeyBlock * n; ++i) {
            rows[blocks - 1][i] = std::nanf("");
            half_rows[blocks - 1][i] = 0x7E00;
          }
          // Every other run asks for its own blocks again, ahead: only a hint, never a change.
          const bool ask = count % 2 == 0;
          std::vector<const float*> ahead32(blocks, nullptr);
          std::vector<const std::uint16_t*> ahead16(blocks, nullptr);
          if (ask) {
            ahead32 = at32;
            ahead16 = at16;
          }
          std::vector<float> w(heads * count);
          for (auto& v : w) v = rng.gaussian();
          std::vector<float> y32(heads * n, 1.0F), y16(heads * n, 1.0F), e32(heads * n, 1.0F), e16(heads * n, 1.0F);
          ops.axpy_blocks_f32(w.data(), count, at32.data(), ahead32.data(), count, heads, n, y32.data());
          ops.axpy_blocks_f16(w.data(), count, at16.data(), ahead16.data(), count, heads, n, y16.data());
          const std::string where = std::string(ops.name) + " count " + std::to_string(count) + " n " +
                                    std::to_string(n) + " heads " + std::to_string(heads);
          for (std::size_t h = 0; h < heads; ++h) {
            for (std::size_t j = 0; j < count; ++j) {
              ops.axpy_f32(w[h * count + j], &rows[j / kKeyBlock][j % kKeyBlock * n], &e32[h * n], n);
              ops.axpy_f16(w[h * count + j], &half_rows[j / kKeyBlock][j % kKeyBlock * n], &e16[h * n], n);
            }
          }
          for (std::size_t i = 0; i < heads * n; ++i) {
            EXPECT_FLOAT_EQ(y32[i], e32[i]) << where;
            EXPECT_FLOAT_EQ(y16[i], e16[i]) << where;
          }
        }
      }
    }
  }
}

// A run of a prompt's tokens attended at once gives each token the output it gets alone, bit for
// bit: at run lengths within a block and across block boundaries (and across the value pass's
// runs of blocks: 64 positions of F32, 128 of F16), for query groups the kernels take in one
// pass (8 heads) and in several (3), from F32 and F16 caches. Positions past the
// longest hold NaN, as a cache's unwritten tail may: they must change nothing.
TEST(VecOps, TokenRunsMatchEachTokenAlone) {
  constexpr std::size_t kDim = 64;
  SeededRng rng(17);
  for (int l = 0; l <= static_cast<int>(max_supported_level(host_cpu())); ++l) {
    const VecOps& ops = vec_ops(static_cast<IsaLevel>(l));
    for (const std::vector<std::size_t>& lens :
         {std::vector<std::size_t>{1, 2, 3, 4}, {15, 16, 17, 18, 19}, {30, 31, 32, 33}, {62, 63, 64, 65, 66, 67, 68, 69},
          {126, 127, 128, 129, 130}}) {
      for (std::size_t heads : {3U, 8U}) {
        const std::size_t tokens = lens.size();
        const std::size_t len = lens.back();
        const std::size_t blocks = (len + kKeyBlock - 1) / kKeyBlock;
        std::vector<float> keys(blocks * kKeyBlock * kDim, std::nanf("")), values(keys.size(), std::nanf(""));
        std::vector<std::uint16_t> half_keys(keys.size(), 0x7E00), half_values(keys.size(), 0x7E00);
        for (std::size_t j = 0; j < len; ++j) {
          for (std::size_t i = 0; i < kDim; ++i) {
            const std::size_t key_at = j / kKeyBlock * kKeyBlock * kDim + i * kKeyBlock + j % kKeyBlock;
            half_keys[key_at] = fp32_to_fp16(keys[key_at] = rng.gaussian());
            half_values[j * kDim + i] = fp32_to_fp16(values[j * kDim + i] = rng.gaussian());
          }
        }
        std::vector<float> q(tokens * heads * kDim);
        for (auto& v : q) v = rng.gaussian();
        const auto check = [&]<class T>(const std::vector<T>& k, const std::vector<T>& v, const char* cache) {
          const auto key_block = [&](std::size_t b) { return &k[b * kKeyBlock * kDim]; };
          const auto value_block = [&](std::size_t b) { return &v[b * kKeyBlock * kDim]; };
          std::vector<float> scores(tokens * heads * len), out(tokens * heads * kDim);
          attend_tokens<T>(ops, q.data(), tokens, heads, kDim, lens.data(), 0.125F, key_block, value_block, scores.data(), out.data());
          for (std::size_t t = 0; t < tokens; ++t) {
            std::vector<float> alone_scores(heads * lens[t]), alone(heads * kDim);
            attend<T>(ops, &q[t * heads * kDim], heads, kDim, lens[t], 0.125F, key_block, value_block, alone_scores.data(), alone.data());
            for (std::size_t i = 0; i < heads * kDim; ++i) {
              ASSERT_EQ(out[t * heads * kDim + i], alone[i])
                  << ops.name << " " << cache << " heads " << heads << " token " << t << " of lengths up to " << len;
            }
          }
        };
        check(keys, values, "F32");
        check(half_keys, half_values, "F16");
      }
    }
  }
}

TEST(VecOps, SoftmaxMatchesReference) {
  SeededRng rng(13);
  for (int l = 0; l <= static_cast<int>(max_supported_level(host_cpu())); ++l) {
    const VecOps& ops = vec_ops(static_cast<IsaLevel>(l));
    for (std::size_t n : {1U, 2U, 15U, 16U, 17U, 100U, 513U}) {
      for (float spread : {0.1F, 5.0F, 80.0F}) {
        std::vector<float> x(n);
        for (auto& v : x) v = spread * rng.gaussian();
        std::vector<float> ref = x;
        softmax_reference(ref.data(), n);
        ops.softmax(x.data(), n);
        double sum = 0;
        for (std::size_t i = 0; i < n; ++i) {
          EXPECT_NEAR(x[i], ref[i], 1e-6F + 1e-5F * ref[i]) << ops.name << " n " << n << " spread " << spread << " i " << i;
          sum += static_cast<double>(x[i]);
        }
        EXPECT_NEAR(sum, 1.0, 1e-5) << ops.name << " n " << n;
      }
    }
  }
}

// exp16 is within 1.3 ulp of exp; silu's division and the product add a few more, so 1e-6
// relative (about 8 ulp) bounds every level; the edges: zero, large of both signs, beyond the
// exponential's clamp, and tails of the vector width.
TEST(VecOps, SwigluMatchesReference) {
  SeededRng rng(17);
  for (int l = 0; l <= static_cast<int>(max_supported_level(host_cpu())); ++l) {
    const VecOps& ops = vec_ops(static_cast<IsaLevel>(l));
    for (std::size_t n : {1U, 15U, 16U, 17U, 100U}) {
      for (float spread : {0.5F, 4.0F, 40.0F}) {
        std::vector<float> gate(n);
        std::vector<float> up(n);
        for (auto& v : gate) v = spread * rng.gaussian();
        for (auto& v : up) v = rng.gaussian();
        const float edges[] = {0.0F, -0.0F, 88.0F, -88.0F, 120.0F, -120.0F, 1e-30F, -1e-30F, -1e30F, 1e30F, -87.0F};
        for (std::size_t i = 0; i < n && i < std::size(edges); ++i) gate[(i * 7) % n] = edges[i];
        std::vector<float> ref = gate;
        swiglu_reference(ref.data(), up.data(), n);
        ops.swiglu(gate.data(), up.data(), n);
        for (std::size_t i = 0; i < n; ++i) {
          EXPECT_NEAR(gate[i], ref[i], 1e-30F + 1e-6F * std::fabs(ref[i])) << ops.name << " n " << n << " i " << i;
        }
      }
    }
  }
}

// The F16 KV cache is written through to_f16 at the engine's level: every level must give the
// reference's bits (round to nearest even), on random values of every magnitude and on the
// edges: signed zeros, the largest half and the values either side of its rounding to infinity,
// subnormals and the halfway point below the smallest, infinities and NaN, and vector tails.
TEST(VecOps, ToF16MatchesTheReferenceBitForBit) {
  SeededRng rng(23);
  const float edges[] = {0.0F, -0.0F, 65504.0F, 65519.0F, 65520.0F, -65520.0F, 1e30F, 6.0e-5F, 1e-6F,
                         5.9604645e-8F, 2.9802322e-8F, 8.9406967e-8F, 1.0009766F, 1.0004883F,
                         std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                         std::numeric_limits<float>::quiet_NaN()};
  for (int l = 0; l <= static_cast<int>(max_supported_level(host_cpu())); ++l) {
    const VecOps& ops = vec_ops(static_cast<IsaLevel>(l));
    for (std::size_t n : {1U, 7U, 8U, 9U, 15U, 16U, 17U, 100U}) {
      std::vector<float> x(n);
      for (std::size_t i = 0; i < n; ++i) x[i] = std::ldexp(rng.gaussian(), static_cast<int>(i % 40) - 26);
      for (std::size_t i = 0; i < n && i < std::size(edges); ++i) x[(i * 7) % n] = edges[i];
      std::vector<std::uint16_t> want(n);
      std::vector<std::uint16_t> got(n + 1, 0xABCD);
      to_f16_reference(x.data(), want.data(), n);
      ops.to_f16(x.data(), got.data(), n);
      for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(got[i], want[i]) << ops.name << " n " << n << " x " << x[i];
      EXPECT_EQ(got[n], 0xABCD) << ops.name << " wrote past n = " << n;
    }
  }
}

// Greedy decoding takes its token from argmax at the engine's level, so every level must pick
// std::max_element's index: the first of tied largest values (zeros of both signs tie), past
// NaNs and infinities, a NaN first value kept, and every tail of the vector width.
TEST(VecOps, ArgmaxMatchesMaxElement) {
  SeededRng rng(29);
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int l = 0; l <= static_cast<int>(max_supported_level(host_cpu())); ++l) {
    const VecOps& ops = vec_ops(static_cast<IsaLevel>(l));
    const auto check = [&](const std::vector<float>& x, const char* what) {
      const auto want = static_cast<std::size_t>(std::max_element(x.begin(), x.end()) - x.begin());
      EXPECT_EQ(ops.argmax(x.data(), x.size()), want) << ops.name << " n " << x.size() << " " << what;
    };
    for (std::size_t n : {1U, 7U, 8U, 9U, 15U, 16U, 17U, 33U, 100U, 32000U}) {
      std::vector<float> x(n);
      for (auto& v : x) v = rng.gaussian();
      check(x, "random");
      x[n / 2] = 7.0F;
      x[n - 1] = 7.0F;
      check(x, "tied largest");
      x[n / 3] = nan;
      check(x, "a NaN inside");
      x[n - 1] = inf;
      check(x, "infinity last");
      x[0] = nan;
      check(x, "NaN first");
      std::fill(x.begin(), x.end(), -1.0F);
      x[n - 1] = 0.0F;
      x[n / 2] = -0.0F;
      check(x, "zeros of both signs");
      std::fill(x.begin(), x.end(), -inf);
      check(x, "all minus infinity");
    }
  }
}

}  // namespace
}  // namespace infercast
