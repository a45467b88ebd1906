#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernel_test_data.h"
#include "kernels/formats.h"
#include "kernels/half.h"
#include "kernels/quantize.h"
#include "kernels/recipes.h"
#include "kernels/simd_quantize.h"
#include "probes/cpu_features.h"

namespace infercast {
namespace {

using testing::fnv1a;
using testing::gaussian;

TEST(Half, ConvertsKnownValues) {
  EXPECT_EQ(fp32_to_fp16(1.0F), 0x3C00);
  EXPECT_EQ(fp32_to_fp16(-2.0F), 0xC000);
  EXPECT_EQ(fp32_to_fp16(65504.0F), 0x7BFF);
  EXPECT_EQ(fp32_to_fp16(65520.0F), 0x7C00);        // the tie above the largest finite rounds to infinity
  EXPECT_EQ(fp32_to_fp16(0x1.0p-24F), 0x0001);      // smallest subnormal
  EXPECT_EQ(fp32_to_fp16(0x1.0p-25F), 0x0000);      // half of it: tie to even (zero)
  EXPECT_EQ(fp32_to_fp16(0x1.8p-24F), 0x0002);      // 1.5 units: tie to even (two)
  EXPECT_EQ(fp32_to_fp16(1.0F + 0x1.0p-11F), 0x3C00);  // tie between 1 and 1+2^-10 goes to even
  EXPECT_EQ(fp32_to_fp16(1.0F + 0x1.8p-11F), 0x3C01);
  EXPECT_EQ(fp32_to_fp16(std::nanf("")) & 0x7E00, 0x7E00);
  EXPECT_EQ(fp16_to_fp32(0x0001), 0x1.0p-24F);
  EXPECT_EQ(fp16_to_fp32(0x7BFF), 65504.0F);
}

TEST(Half, EveryFiniteHalfRoundTrips) {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7C00) == 0x7C00) continue;  // inf/NaN
    ASSERT_EQ(fp32_to_fp16(fp16_to_fp32(static_cast<std::uint16_t>(h))), h) << std::hex << h;
  }
}

TEST(Half, Bf16RoundsToNearestEven) {
  EXPECT_EQ(fp32_to_bf16(1.0F), 0x3F80);
  EXPECT_EQ(fp32_to_bf16(std::bit_cast<float>(0x3F808000U)), 0x3F80);  // tie, even stays
  EXPECT_EQ(fp32_to_bf16(std::bit_cast<float>(0x3F818000U)), 0x3F82);  // tie, odd rounds up
  EXPECT_EQ(fp32_to_bf16(std::bit_cast<float>(0x3F808001U)), 0x3F81);
  EXPECT_EQ(bf16_to_fp32(0x3F80), 1.0F);
}

TEST(Blocks, SizesAndBitsPerWeight) {
  EXPECT_DOUBLE_EQ(format_info(GgmlType::q4_0).bits_per_weight(), 4.5);
  EXPECT_DOUBLE_EQ(format_info(GgmlType::q8_0).bits_per_weight(), 8.5);
  EXPECT_DOUBLE_EQ(format_info(GgmlType::q5_0).bits_per_weight(), 5.5);
  EXPECT_DOUBLE_EQ(format_info(GgmlType::q4_k).bits_per_weight(), 4.5);
  EXPECT_DOUBLE_EQ(format_info(GgmlType::q5_k).bits_per_weight(), 5.5);
  EXPECT_DOUBLE_EQ(format_info(GgmlType::q6_k).bits_per_weight(), 6.5625);
  EXPECT_EQ(format_info(GgmlType::q4_k).row_bytes(4096), 16U * 144U);
  EXPECT_EQ(parse_format("q4_k"), GgmlType::q4_k);
  EXPECT_EQ(parse_format("Q5_0"), GgmlType::q5_0);
  EXPECT_FALSE(parse_format("Q3_K").has_value());
}

// Hand-derived: amax 16 -> d = 16/127, quants round(x * 127/16) half away from zero.
TEST(ReferenceQuantizer, Q8_0HandDerived) {
  float x[32];
  for (int i = 0; i < 32; ++i) x[i] = static_cast<float>(i - 16);
  BlockQ8_0 b{};
  reference::quantize_q8_0(x, &b, 32);
  EXPECT_EQ(b.d, 0x3008);  // fp16(0.12598) = 2^-3 * (1 + 8/1024)
  EXPECT_EQ(b.qs[0], -127);
  EXPECT_EQ(b.qs[1], -119);  // -15 * 7.9375 = -119.06
  EXPECT_EQ(b.qs[16], 0);
  EXPECT_EQ(b.qs[17], 8);  // 7.9375
  EXPECT_EQ(b.qs[31], 119);

  // d = 1 exactly: the quants are round(x), with halves away from zero (not to even).
  float y[32] = {127, 0.5F, -0.5F, 1.5F, -1.5F, 2.5F, -2.5F, 0.49F};
  reference::quantize_q8_0(y, &b, 32);
  EXPECT_EQ(b.d, 0x3C00);  // 127 / 127 = 1
  const int expect[8] = {127, 1, -1, 2, -2, 3, -3, 0};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(b.qs[i], expect[i]) << i;
}

TEST(ReferenceQuantizer, Q4_0HandDerived) {
  float x[32] = {};
  x[0] = -8;  // the signed max: d = -8 / -8 = 1
  x[1] = 7;
  x[2] = 7.6F;   // 16.1 -> clamped to 15
  x[3] = 0.49F;  // 8.99 -> 8
  x[4] = 0.5F;   // 9.0 -> 9
  x[16] = -3;    // high nibble of byte 0
  BlockQ4_0 b{};
  reference::quantize_q4_0(x, &b, 32);
  EXPECT_EQ(b.d, 0x3C00);
  EXPECT_EQ(b.qs[0], 0 | (5 << 4));
  EXPECT_EQ(b.qs[1], 15 | (8 << 4));
  EXPECT_EQ(b.qs[2], 15 | (8 << 4));
  EXPECT_EQ(b.qs[3], 8 | (8 << 4));
  EXPECT_EQ(b.qs[4], 9 | (8 << 4));
}

TEST(ReferenceQuantizer, Q5_0HandDerived) {
  float x[32] = {};
  x[0] = -16;    // the signed max: d = -16 / -16 = 1, and -16 + 16.5 -> 0
  x[1] = 15;     // 31.5 -> 31: nibble 15, fifth bit set
  x[2] = 15.6F;  // 32.1 -> 32, clamped to 31
  x[3] = 0.49F;  // 16.99 -> 16: nibble 0, fifth bit set
  x[4] = 0.5F;   // 17
  x[5] = -0.6F;  // 15.9 -> 15: no fifth bit
  x[16] = -3;    // 13.5 -> 13: high nibble of byte 0, bit 16 clear
  x[17] = 2;     // 18.5 -> 18: high nibble 2 of byte 1, bit 17 set
  BlockQ5_0 b{};
  reference::quantize_q5_0(x, &b, 32);
  EXPECT_EQ(b.d, 0x3C00);
  EXPECT_EQ(b.qs[0], 0 | (13 << 4));
  EXPECT_EQ(b.qs[1], 15 | (2 << 4));
  EXPECT_EQ(b.qs[2], 15 | (0 << 4));  // zeros quantize to 16: nibble 0, fifth bit set
  EXPECT_EQ(b.qs[3], 0);
  EXPECT_EQ(b.qs[4], 1);
  EXPECT_EQ(b.qs[5], 15);
  // Bits 0 (x[0]), 5 (x[5]) and 16 (x[16]) clear, every other one set.
  EXPECT_EQ(b.qh[0], 0xDE);
  EXPECT_EQ(b.qh[1], 0xFF);
  EXPECT_EQ(b.qh[2], 0xFE);
  EXPECT_EQ(b.qh[3], 0xFF);
  float back[32];
  reference::dequantize_q5_0(&b, back, 32);
  EXPECT_EQ(back[0], -16.0F);
  EXPECT_EQ(back[1], 15.0F);
  EXPECT_EQ(back[3], 0.0F);
  EXPECT_EQ(back[5], -1.0F);
  EXPECT_EQ(back[16], -3.0F);
  EXPECT_EQ(back[17], 2.0F);
}

// Values 0..15 fit Q4_K exactly: scale 1, min 0, so every 6-bit scale is 63 and every min 0.
TEST(ReferenceQuantizer, Q4_KHandDerived) {
  std::vector<float> x(256);
  for (int i = 0; i < 256; ++i) x[i] = static_cast<float>(i % 16);
  BlockQ4_K b{};
  reference::quantize_q4_k(x.data(), &b, 256);
  EXPECT_EQ(b.d, fp32_to_fp16(1.0F / 63));
  EXPECT_EQ(b.dmin, 0);
  const std::uint8_t scales[12] = {0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0, 0x0F, 0x0F, 0x0F, 0x0F};
  EXPECT_EQ(std::memcmp(b.scales, scales, 12), 0);
  for (int i = 0; i < 128; ++i) ASSERT_EQ(b.qs[i], 17 * (i % 32 % 16)) << i;
}

TEST(ReferenceQuantizer, Q5_KHandDerived) {
  std::vector<float> x(256);
  for (int i = 0; i < 256; ++i) x[i] = static_cast<float>(i % 32);
  BlockQ5_K b{};
  reference::quantize_q5_k(x.data(), &b, 256);
  EXPECT_EQ(b.d, fp32_to_fp16(1.0F / 63));
  for (int j = 0; j < 32; ++j) ASSERT_EQ(b.qh[j], j >= 16 ? 0xFF : 0x00) << j;
  for (int i = 0; i < 128; ++i) ASSERT_EQ(b.qs[i], 17 * (i % 32 % 16)) << i;
}

// Every group of 16 is -32..-17: scale 1 per group, super-scale -1/128, 8-bit scales -128.
TEST(ReferenceQuantizer, Q6_KHandDerived) {
  std::vector<float> x(256);
  for (int i = 0; i < 256; ++i) x[i] = static_cast<float>(-32 + i % 16);
  BlockQ6_K b{};
  reference::quantize_q6_k(x.data(), &b, 256);
  EXPECT_EQ(b.d, 0xA000);  // fp16(-2^-7)
  for (int g = 0; g < 16; ++g) ASSERT_EQ(b.scales[g], -128);
  for (int i = 0; i < 128; ++i) ASSERT_EQ(b.ql[i], 17 * (i % 16)) << i;
  for (int i = 0; i < 64; ++i) ASSERT_EQ(b.qh[i], 0) << i;
}

// Q8_K keeps the sign of the *first* element of largest magnitude.
TEST(ReferenceQuantizer, Q8_KHandDerived) {
  std::vector<float> x(256, 0.0F);
  x[0] = 4;
  x[1] = -4;
  x[2] = 1;
  BlockQ8_K b{};
  reference::quantize_q8_k(x.data(), &b, 256);
  EXPECT_FLOAT_EQ(b.d, -4.0F / 127);
  EXPECT_EQ(b.qs[0], -127);
  EXPECT_EQ(b.qs[1], 127);
  EXPECT_EQ(b.qs[2], -32);  // nearest_int(-31.75) rounds to even
  EXPECT_EQ(b.bsums[0], -32);
}

TEST(ReferenceQuantizer, NearestIntRoundsHalvesToEven) {
  EXPECT_EQ(reference::nearest_int(2.5F), 2);
  EXPECT_EQ(reference::nearest_int(3.5F), 4);
  EXPECT_EQ(reference::nearest_int(-2.5F), -2);
  EXPECT_EQ(reference::nearest_int(-0.4F), 0);
}

// Golden bytes: the reference quantizers' output on a fixed seeded Gaussian row, recorded once.
// A change here means files written by this version differ from earlier ones.
TEST(ReferenceQuantizer, GoldenHashes) {
  const std::vector<float> x = gaussian(4096, 2024, 0.05F);
  struct Golden {
    GgmlType type;
    std::uint64_t hash;
  };
  const Golden golden[] = {
      {GgmlType::f16, 0xa69f2f85b00041a8ULL},  {GgmlType::bf16, 0x4454399c9cd76ca6ULL}, {GgmlType::q8_0, 0x470d170e28dc367bULL}, {GgmlType::q4_0, 0x94f5abd4541e7ef7ULL},
      {GgmlType::q5_0, 0x8d251e1a4c80b745ULL},
      {GgmlType::q4_k, 0xb5e6aadade4fdb55ULL}, {GgmlType::q5_k, 0xe83766802bdf05b0ULL}, {GgmlType::q6_k, 0x163953f95bc664efULL}, {GgmlType::q8_k, 0xfb02c2100114cc9eULL},
  };
  for (const auto& g : golden) {
    const auto& f = format_info(g.type);
    std::vector<std::uint8_t> bytes(f.row_bytes(x.size()));
    f.quantize(x.data(), bytes.data(), x.size());
    EXPECT_EQ(fnv1a(bytes.data(), bytes.size()), g.hash) << f.name << " 0x" << std::hex << fnv1a(bytes.data(), bytes.size());
  }
}

TEST(ReferenceQuantizer, RoundTripErrorShrinksWithBits) {
  const std::vector<float> x = gaussian(4096, 11);
  double previous = 1.0;
  for (GgmlType t : {GgmlType::q4_0, GgmlType::q4_k, GgmlType::q5_0, GgmlType::q5_k, GgmlType::q6_k, GgmlType::q8_0, GgmlType::f16}) {
    const auto& f = format_info(t);
    std::vector<std::uint8_t> bytes(f.row_bytes(x.size()));
    std::vector<float> back(x.size());
    f.quantize(x.data(), bytes.data(), x.size());
    f.dequantize(bytes.data(), back.data(), x.size());
    double err = 0;
    double ref = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double e = static_cast<double>(back[i]) - static_cast<double>(x[i]);
      err += e * e;
      ref += static_cast<double>(x[i]) * static_cast<double>(x[i]);
    }
    const double rel = std::sqrt(err / ref);
    EXPECT_LT(rel, previous) << f.name;
    EXPECT_LT(rel, 0.12) << f.name;
    previous = rel;
  }
}

TEST(ReferenceQuantizer, AllZeroInputGivesZeroBlocks) {
  const std::vector<float> x(512, 0.0F);
  for (GgmlType t : weight_formats()) {
    const auto& f = format_info(t);
    std::vector<std::uint8_t> bytes(f.row_bytes(x.size()), 0xAB);
    std::vector<float> back(x.size(), 1.0F);
    f.quantize(x.data(), bytes.data(), x.size());
    f.dequantize(bytes.data(), back.data(), x.size());
    for (float v : back) ASSERT_EQ(v, 0.0F) << f.name;
  }
}

// The SIMD activation quantizers must write the reference's bytes, ties and extremes included.
void expect_same_activation_bytes(const ActivationQuantizers& q, const char* isa) {
  std::vector<float> x = gaussian(2048 + 3 * 256, 5, 3.0F);  // Q8_0: 88 blocks, not a multiple of 16
  for (int i = 0; i < 64; ++i) x[i] = static_cast<float>(i - 32) * 0.5F;  // many exact halves
  for (int i = 256; i < 512; ++i) x[i] = 0;                               // an all-zero super-block
  x[600] = 1e30F;
  // Scales that fp16 holds only as subnormals, or not at all (flushed to zero).
  for (int i = 1024; i < 1056; ++i) x[i] *= 1e-3F;
  for (int i = 1056; i < 1088; ++i) x[i] *= 1e-7F;
  // Q8_K keeps the sign of the first element of largest magnitude: both signs, in one vector.
  x[800] = -50.0F;
  x[810] = 50.0F;
  std::vector<BlockQ8_0> a(x.size() / 32), b(x.size() / 32);
  reference::quantize_q8_0(x.data(), a.data(), x.size());
  q.q8_0(x.data(), b.data(), x.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(BlockQ8_0)), 0) << isa << " Q8_0";
  std::vector<BlockQ8_K> c(x.size() / 256), d(x.size() / 256);
  reference::quantize_q8_k(x.data(), c.data(), x.size());
  q.q8_k(x.data(), d.data(), x.size());
  EXPECT_EQ(std::memcmp(c.data(), d.data(), c.size() * sizeof(BlockQ8_K)), 0) << isa << " Q8_K";
}

TEST(SimdQuantizer, Avx2MatchesReference) {
  if (max_supported_level(host_cpu()) < IsaLevel::avx2) GTEST_SKIP() << "no AVX2";
  expect_same_activation_bytes(avx2_activation_quantizers(), "avx2");
}

TEST(SimdQuantizer, Avx512MatchesReference) {
  if (max_supported_level(host_cpu()) < IsaLevel::avx512) GTEST_SKIP() << "no AVX-512";
  expect_same_activation_bytes(avx512_activation_quantizers(), "avx512");
}

TEST(Recipes, Q4_K_MKeepsSensitiveTensorsAtQ6_K) {
  const Recipe* r = find_recipe("q4_k_m");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(recipe_type(*r, "output.weight", true, 0, {32, 0}), GgmlType::q6_k);
  EXPECT_EQ(recipe_type(*r, "blk.0.attn_v.weight", true, 0, {32, 0}), GgmlType::q6_k);   // first eighth
  EXPECT_EQ(recipe_type(*r, "blk.5.attn_v.weight", true, 5, {32, 0}), GgmlType::q4_k);   // (5-4) % 3 == 1
  EXPECT_EQ(recipe_type(*r, "blk.6.ffn_down.weight", true, 6, {32, 0}), GgmlType::q6_k); // (6-4) % 3 == 2
  EXPECT_EQ(recipe_type(*r, "blk.7.ffn_down.weight", true, 7, {32, 0}), GgmlType::q4_k);
  EXPECT_EQ(recipe_type(*r, "blk.31.ffn_down.weight", true, 31, {32, 0}), GgmlType::q6_k);  // last eighth
  EXPECT_EQ(recipe_type(*r, "blk.7.attn_q.weight", true, 7, {32, 0}), GgmlType::q4_k);
  EXPECT_EQ(recipe_type(*r, "blk.7.attn_norm.weight", false, 7, {32, 0}), GgmlType::f32);
  // Whole names: the head's rule must not claim the attention output of every block.
  EXPECT_EQ(recipe_type(*r, "blk.0.attn_output.weight", true, 0, {32, 0}), GgmlType::q4_k);
  EXPECT_EQ(recipe_type(*r, "blk.9.attn_output.weight", true, 9, {32, 0}), GgmlType::q4_k);
  EXPECT_EQ(recipe_type(*r, "blk.0.ffn_down_exps.weight", true, 0, {32, 0}), GgmlType::q6_k);
  EXPECT_EQ(recipe_type(*r, "blk.0.ffn_down_shexp.weight", true, 0, {32, 0}), GgmlType::q6_k);
  EXPECT_EQ(recipe_type(*r, "blk.7.ffn_down_shexp.weight", true, 7, {32, 0}), GgmlType::q4_k);
  EXPECT_EQ(recipe_type(*r, "token_embd.weight", true, 0, {32, 0}), GgmlType::q4_k);
  // Eight experts: keys and values at Q8_0 over the sensitive-layer rule, the output at Q5_K.
  EXPECT_EQ(recipe_type(*r, "blk.0.attn_v.weight", true, 0, {32, 8}), GgmlType::q8_0);
  EXPECT_EQ(recipe_type(*r, "blk.5.attn_k.weight", true, 5, {32, 8}), GgmlType::q8_0);
  EXPECT_EQ(recipe_type(*r, "blk.5.attn_output.weight", true, 5, {32, 8}), GgmlType::q5_k);
  EXPECT_EQ(recipe_type(*r, "blk.5.attn_k.weight", true, 5, {32, 128}), GgmlType::q4_k);
  // 80 blocks: the values outside the sensitive layers at Q5_K.
  EXPECT_EQ(recipe_type(*r, "blk.11.attn_v.weight", true, 11, {80, 0}), GgmlType::q5_k);  // (11-10) % 3 == 1
  EXPECT_EQ(recipe_type(*r, "blk.12.attn_v.weight", true, 12, {80, 0}), GgmlType::q6_k);  // (12-10) % 3 == 2
  EXPECT_EQ(recipe_type(*r, "blk.11.attn_q.weight", true, 11, {80, 0}), GgmlType::q4_k);
  const Recipe* r5 = find_recipe("Q5_K_M");
  EXPECT_EQ(recipe_type(*r5, "blk.5.attn_output.weight", true, 5, {32, 8}), GgmlType::q5_k);
  EXPECT_EQ(recipe_type(*r5, "blk.5.attn_v.weight", true, 5, {32, 8}), GgmlType::q8_0);
  EXPECT_EQ(recipe_type(*r5, "blk.11.attn_v.weight", true, 11, {80, 0}), GgmlType::q5_k);
  EXPECT_EQ(recipe_type(*r5, "blk.12.attn_v.weight", true, 12, {80, 0}), GgmlType::q6_k);
  EXPECT_EQ(find_recipe("Q5_K_M")->base, GgmlType::q5_k);
  EXPECT_EQ(find_recipe("Q3_K_S"), nullptr);
}

}  // namespace
}  // namespace infercast
