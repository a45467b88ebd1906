// The interleaved layout: in-place rewriting that keeps every row recoverable byte for byte, and
// the dispatch that sends each layout to the kernels that read it. The products themselves are
// checked against the scalar reference in test_gemm.cpp, in both layouts at every level.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/formats.h"
#include "kernels/gemm.h"
#include "kernels/gemm_kernels.h"
#include "kernels/interleave.h"
#include "probes/error.h"
#include "probes/random.h"

namespace infercast {
namespace {

std::vector<GgmlType> interleaved_formats() {
  std::vector<GgmlType> out;
  for (GgmlType t : weight_formats()) {
    if (has_interleaved_layout(t)) out.push_back(t);
  }
  return out;
}

std::vector<std::uint8_t> random_bytes(std::size_t n, std::uint64_t seed) {
  SeededRng rng(seed);
  std::vector<std::uint8_t> v(n);
  for (auto& b : v) b = static_cast<std::uint8_t>(rng.next());
  return v;
}

class InterleaveFormats : public ::testing::TestWithParam<GgmlType> {};

// Every bit of every field survives: random bytes are a valid block of each of these formats
// (the 12 packed scale bytes of Q4_K/Q5_K hold exactly sixteen 6-bit fields).
TEST_P(InterleaveFormats, EveryRowComesBackByteForByte) {
  const GgmlType t = GetParam();
  const auto& f = format_info(t);
  const std::size_t cols = 3 * static_cast<std::size_t>(f.block_elems);
  for (std::size_t rows : {1U, 8U, 19U, 24U}) {
    const std::size_t row_bytes = f.row_bytes(cols);
    const std::vector<std::uint8_t> original = random_bytes(rows * row_bytes, 5 + rows);
    std::vector<std::uint8_t> data = original;
    const WeightView w = relayout(make_weight_view(t, data.data(), rows, cols), data.data(),
                                  WeightLayout::interleaved8);
    EXPECT_EQ(w.layout, WeightLayout::interleaved8);
    if (rows >= 8) {
      EXPECT_NE(data, original) << "the full groups were rewritten";
    }
    // Rows past the last full group keep the GGUF bytes where they were.
    const std::size_t full = rows / 8 * 8;
    EXPECT_EQ(0, std::memcmp(data.data() + full * row_bytes, original.data() + full * row_bytes,
                             (rows - full) * row_bytes));
    // All rows at once, across groups and into the GGUF tail.
    std::vector<std::uint8_t> all(rows * row_bytes);
    copy_gguf_rows(t, data.data(), rows, cols, row_bytes, 0, rows, all.data());
    EXPECT_EQ(all, original) << f.name << " rows " << rows;
    std::vector<std::uint8_t> scratch;
    for (std::size_t r = 0; r < rows; ++r) {
      const std::uint8_t* row = gguf_row(w, r, scratch);
      ASSERT_EQ(0, std::memcmp(row, original.data() + r * row_bytes, row_bytes))
          << f.name << " rows " << rows << " row " << r;
    }
  }
}

// Eight interleaved rows occupy the bytes of those eight rows, so a slice starting at a multiple
// of eight (one MoE expert of a stacked matrix) is itself an interleaved matrix.
TEST_P(InterleaveFormats, SlicesInMultiplesOfEightStayInterleaved) {
  const GgmlType t = GetParam();
  const auto& f = format_info(t);
  const std::size_t cols = static_cast<std::size_t>(f.block_elems) * 2;
  const std::size_t row_bytes = f.row_bytes(cols);
  const std::vector<std::uint8_t> original = random_bytes(32 * row_bytes, 77);
  std::vector<std::uint8_t> whole = original;
  relayout(make_weight_view(t, whole.data(), 32, cols), whole.data(), WeightLayout::interleaved8);
  std::vector<std::uint8_t> second(original.begin() + 16 * static_cast<std::ptrdiff_t>(row_bytes),
                                   original.end());
  relayout(make_weight_view(t, second.data(), 16, cols), second.data(), WeightLayout::interleaved8);
  EXPECT_EQ(0, std::memcmp(whole.data() + 16 * row_bytes, second.data(), second.size()));
}

// Any quant bytes a file can hold (Q8_0's -128, every 6-bit scale and min, every high bit), with
// tame block scales: the interleaved kernels at every level against the scalar kernel on the
// GGUF bytes.
TEST_P(InterleaveFormats, KernelsAgreeWithTheReferenceOnArbitraryQuants) {
  const GgmlType t = GetParam();
  const auto& f = format_info(t);
  const std::size_t cols = 2 * static_cast<std::size_t>(f.block_elems);
  const std::size_t rows = 27;
  std::vector<std::uint8_t> gguf = random_bytes(rows * f.row_bytes(cols), 91);
  for (std::size_t b = 0; b < gguf.size() / f.block_bytes; ++b) {
    std::uint8_t* block = gguf.data() + b * f.block_bytes;
    const std::uint16_t scale = 0x2000 + static_cast<std::uint16_t>(b % 64);  // about 2^-7
    const std::size_t at = t == GgmlType::q6_k ? offsetof(BlockQ6_K, d) : 0;
    std::memcpy(block + at, &scale, 2);
    if (t == GgmlType::q4_k || t == GgmlType::q5_k) std::memcpy(block + 2, &scale, 2);  // dmin
  }
  std::vector<std::uint8_t> interleaved = gguf;
  const WeightView x8 = relayout(make_weight_view(t, interleaved.data(), rows, cols), interleaved.data(), WeightLayout::interleaved8);
  SeededRng rng(3);
  std::vector<float> x(3 * cols);
  for (auto& v : x) v = rng.gaussian();
  for (std::size_t batch : {1U, 3U}) {
    std::vector<float> want(batch * rows);
    GemmContext(1, IsaLevel::scalar).gemm(make_weight_view(t, gguf.data(), rows, cols), x.data(), batch, want.data());
    for (int l = 0; l <= static_cast<int>(max_supported_level(host_cpu())); ++l) {
      GemmContext ctx(2, static_cast<IsaLevel>(l));
      std::vector<float> got(batch * rows);
      ctx.gemm(x8, x.data(), batch, got.data());
      for (std::size_t i = 0; i < got.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], 1e-4F * std::fabs(want[i]) + 1e-3F)
            << f.name << " " << ctx.kernel_name(t, batch, cols, x8.layout) << " batch " << batch << " output " << i;
      }
    }
  }
}

// Every quant, scale and min at its largest and every activation at the largest magnitude its
// quantizer gives (equal inputs quantize to -128 in Q8_K): the integer sums the kernels hold
// before scaling are as large as they get, so a narrower accumulator or a wider pre-scale (the
// AVX-512 Q4_K kernel sums 16 x its high-nibble quants) would show here.
TEST_P(InterleaveFormats, KernelsHoldTheLargestSums) {
  const GgmlType t = GetParam();
  const auto& f = format_info(t);
  const std::size_t cols = 2 * static_cast<std::size_t>(f.block_elems);
  const std::size_t rows = 16;
  std::vector<std::uint8_t> gguf(rows * f.row_bytes(cols), 0xFF);
  for (std::size_t b = 0; b < gguf.size() / f.block_bytes; ++b) {
    std::uint8_t* block = gguf.data() + b * f.block_bytes;
    const std::uint16_t scale = 0x2000;  // 2^-7
    const std::size_t at = t == GgmlType::q6_k ? offsetof(BlockQ6_K, d) : 0;
    std::memcpy(block + at, &scale, 2);
    if (t == GgmlType::q4_k || t == GgmlType::q5_k) std::memcpy(block + 2, &scale, 2);  // dmin
  }
  std::vector<std::uint8_t> interleaved = gguf;
  const WeightView x8 = relayout(make_weight_view(t, interleaved.data(), rows, cols), interleaved.data(), WeightLayout::interleaved8);
  const std::vector<float> x(cols, 3.0F);
  std::vector<float> want(rows);
  GemmContext(1, IsaLevel::scalar).gemm(make_weight_view(t, gguf.data(), rows, cols), x.data(), 1, want.data());
  for (int l = 0; l <= static_cast<int>(max_supported_level(host_cpu())); ++l) {
    GemmContext ctx(1, static_cast<IsaLevel>(l));
    std::vector<float> got(rows);
    ctx.gemm(x8, x.data(), 1, got.data());
    for (std::size_t i = 0; i < rows; ++i) {
      ASSERT_NEAR(got[i], want[i], 1e-5F * std::fabs(want[i]) + 1e-3F)
          << f.name << " " << ctx.kernel_name(t, 1, cols, x8.layout) << " output " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, InterleaveFormats, ::testing::ValuesIn(interleaved_formats()),
                         [](const ::testing::TestParamInfo<GgmlType>& p) {
                           return std::string(format_info(p.param).name);
                         });

TEST(Interleave, FormatsWithoutTheLayoutAreLeftAlone) {
  std::vector<std::uint8_t> data(16 * 64, 3);
  const WeightView w = relayout(make_weight_view(GgmlType::f16, data.data(), 16, 32), data.data(),
                                WeightLayout::interleaved8);
  EXPECT_EQ(w.layout, WeightLayout::gguf);
  EXPECT_EQ(data, std::vector<std::uint8_t>(16 * 64, 3));
  EXPECT_EQ(preferred_layout(GgmlType::f16, IsaLevel::avx2), WeightLayout::gguf);
  EXPECT_EQ(preferred_layout(GgmlType::bf16, IsaLevel::avx2), WeightLayout::gguf);
  WeightView bad = make_weight_view(GgmlType::f16, data.data(), 16, 32);
  bad.layout = WeightLayout::interleaved8;
  EXPECT_THROW(validate_weights(bad), UsageError);
}

TEST(Interleave, VectorLevelsPreferItForTheBlockFormatsOnly) {
  for (GgmlType t : interleaved_formats()) {
    EXPECT_EQ(preferred_layout(t, IsaLevel::avx2), WeightLayout::interleaved8) << format_info(t).name;
    EXPECT_EQ(preferred_layout(t, IsaLevel::avx512), WeightLayout::interleaved8) << format_info(t).name;
    // The scalar reference gains nothing from it, and AMX tiles read the GGUF layout as it is.
    EXPECT_EQ(preferred_layout(t, IsaLevel::scalar), WeightLayout::gguf);
    EXPECT_EQ(preferred_layout(t, IsaLevel::amx), WeightLayout::gguf);
  }
}

TEST(Interleave, EachLayoutGoesToItsOwnKernels) {
  EXPECT_EQ(GemmContext(1, IsaLevel::scalar)
                .kernel_name(GgmlType::q4_k, 1, 4096, WeightLayout::interleaved8),
            "scalar_x8");
  if (max_supported_level(host_cpu()) >= IsaLevel::avx2) {
    for (std::size_t batch : {1U, 4U, 64U, 512U}) {
      EXPECT_EQ(GemmContext(1, IsaLevel::avx2)
                    .kernel_name(GgmlType::q4_0, batch, 4096, WeightLayout::interleaved8),
                "avx2_x8");
    }
    const std::string row_kernel = host_cpu().avx_vnni ? "avx2_vnni" : "avx2";
    EXPECT_EQ(GemmContext(1, IsaLevel::avx2).kernel_name(GgmlType::q4_0, 1, 4096), row_kernel);
  }
  if (max_supported_level(host_cpu()) >= IsaLevel::avx512) {
    // VNNI has its own interleaved kernels for every interleaved format; CPUs without VNNI keep AVX2's.
    // Q4_0 and Q8_0 batches take their activation rows in pairs.
    const bool vnni = host_cpu().avx512_vnni;
    for (GgmlType t : interleaved_formats()) {
      const bool pairs = vnni && (t == GgmlType::q4_0 || t == GgmlType::q8_0);
      for (std::size_t batch : {1U, 2U, 4U, 64U, 512U}) {
        const std::string x8 = !vnni ? "avx2_x8" : pairs && batch >= kPairMinBatch ? "avx512_x8_pairs" : "avx512_x8";
        EXPECT_EQ(GemmContext(1, IsaLevel::avx512).kernel_name(t, batch, 4096, WeightLayout::interleaved8), x8) << format_info(t).name;
      }
    }
    CpuFeatures older = host_cpu();
    older.avx512_vnni = false;
    EXPECT_EQ(GemmContext(1, IsaLevel::avx512, older).kernel_name(GgmlType::q6_k, 8, 4096, WeightLayout::interleaved8),
              "avx2_x8");
  }
}

// Only a writable GGUF-layout matrix can be rewritten, and only by its owner's pointer.
TEST(Interleave, RefusesAMatrixItCannotRewrite) {
  std::vector<std::uint8_t> data(8 * sizeof(BlockQ4_0));
  const WeightView w = make_weight_view(GgmlType::q4_0, data.data(), 8, 32);
  std::vector<std::uint8_t> other(data.size());
  EXPECT_THROW(relayout(w, other.data(), WeightLayout::interleaved8), UsageError);
}

}  // namespace
}  // namespace infercast
