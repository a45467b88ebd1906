// The interleaved layout: in-place rewriting that keeps every row recoverable byte for byte, and
// the dispatch that sends each layout to the kernels that read it. The products themselves are
// checked against the scalar reference in test_gemm.cpp, in both layouts at every level.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "kernel_test_data.h"
#include "kernels/amx_decode.h"
#include "kernels/formats.h"
#include "kernels/gemm.h"
#include "kernels/gemm_kernels.h"
#include "kernels/half.h"
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
  // Fifteen groups and three rows. AVX-512 Q4_0's thirty-two-row batches split them in steps of
  // four groups: with two threads the first takes eight groups (two from each quarter of its
  // rows), the second seven and the tail (one group from each quarter, then the three left to
  // the sixteen-row kernel: a pair and one alone).
  const std::size_t rows = 123;
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
  std::vector<float> x(15 * cols);
  for (auto& v : x) v = rng.gaussian();
  // GEMV and the two-stream batches: up to three rows for the K-quants, up to four pairs of rows
  // for AVX-512 Q8_0 (an odd batch's last pair half empty), and AVX-512 Q4_0's sixteen-row
  // batches and Q4_0's thirty-two-row ones (12: a pass of eight activation rows and one of four).
  for (std::size_t batch : {1U, 2U, 3U, 5U, 8U, 12U, 15U}) {
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
    // Small batches on an AMX machine run the interleaved AVX-512 kernels; its tiles decode either layout.
    EXPECT_EQ(preferred_layout(t, IsaLevel::amx), WeightLayout::interleaved8) << format_info(t).name;
    // The scalar reference gains nothing from it.
    EXPECT_EQ(preferred_layout(t, IsaLevel::scalar), WeightLayout::gguf);
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
    // Q4_0, Q5_0 and Q8_0 batches take their activation rows in pairs, but the small batches of
    // Q4_0 and Q5_0 (fewer of Q5_0's) take sixteen weight rows at a time, Q4_0's from eight rows
    // thirty-two.
    const bool vnni = host_cpu().avx512_vnni;
    for (GgmlType t : interleaved_formats()) {
      const bool q5_0 = t == GgmlType::q5_0;
      const bool pairs = vnni && (t == GgmlType::q4_0 || q5_0 || t == GgmlType::q8_0);
      const std::size_t pair_min = q5_0 ? kQ5_0PairMinBatch : kPairMinBatch;
      const bool sixteen = vnni && (t == GgmlType::q4_0 || q5_0);
      for (std::size_t batch : {1U, 2U, 3U, 4U, 8U, 9U, 15U, 16U, 64U, 512U}) {
        const bool small = batch >= kSixteenMinBatch && batch <= (q5_0 ? kQ5_0PairMinBatch - 1 : kSixteenMaxBatch);
        const std::string x8 = !vnni                          ? "avx2_x8"
                               : sixteen && small             ? (!q5_0 && batch >= kThirtyTwoMinBatch ? "avx512_x32" : "avx512_x16")
                               : pairs && batch >= pair_min   ? "avx512_x8_pairs"
                                                              : "avx512_x8";
        EXPECT_EQ(GemmContext(1, IsaLevel::avx512).kernel_name(t, batch, 4096, WeightLayout::interleaved8), x8) << format_info(t).name;
      }
    }
    CpuFeatures older = host_cpu();
    older.avx512_vnni = false;
    EXPECT_EQ(GemmContext(1, IsaLevel::avx512, older).kernel_name(GgmlType::q6_k, 8, 4096, WeightLayout::interleaved8),
              "avx2_x8");
  }
  if (max_supported_level(host_cpu()) >= IsaLevel::amx) {
    // AMX takes interleaved weights from amx_x8_min_batch on, INT8 tiles first, then BF16 tiles.
    const GemmContext amx(1, IsaLevel::amx);
    const auto x8 = [&](GgmlType t, std::size_t batch) { return amx.kernel_name(t, batch, 4096, WeightLayout::interleaved8); };
    EXPECT_EQ(x8(GgmlType::q4_0, 16), "avx512_x8_pairs");
    EXPECT_EQ(x8(GgmlType::q4_0, 24), "amx_int8");
    EXPECT_EQ(x8(GgmlType::q4_0, 63), "amx_int8");
    EXPECT_EQ(x8(GgmlType::q4_0, 64), "amx_bf16");
    EXPECT_EQ(x8(GgmlType::q4_k, 15), "avx512_x8");
    EXPECT_EQ(x8(GgmlType::q4_k, 16), "amx_bf16");
    EXPECT_EQ(x8(GgmlType::q6_k, 16), "amx_bf16");
    EXPECT_EQ(x8(GgmlType::q8_0, 1), "avx512_x8");
  }
}

// The AMX decode tests: AVX-512 code, run on any machine that has it; 768 columns are 24 Q8_0
// blocks (a gather of sixteen scales and a tail of eight) and three K blocks; two row groups.
bool has_avx512(bool bf16) {
  const CpuFeatures& cpu = host_cpu();
  return cpu.avx512f && cpu.avx512bw && cpu.avx512vl && cpu.avx512dq && cpu.os_avx512 && (!bf16 || cpu.avx512_bf16);
}
constexpr std::size_t kDecodeCols = 768;
constexpr std::size_t kDecodeRows = 16;

bool same_floats(const float* a, const float* b, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))) return false;
  }
  return true;
}

// The AMX tiles take a group of eight interleaved rows through an 8x8 transpose of four-quant
// groups instead of the GGUF decode: both must give the same tile rows, scales and offsets.
// Random bytes reach every bit of every quant and scale field. Plain AVX-512, so any AVX-512
// machine checks what only an AMX machine multiplies.
TEST_P(InterleaveFormats, TheAmxDecodeOfAGroupEqualsTheGgufRowsDecode) {
  if (!has_avx512(false)) GTEST_SKIP() << "the decode is AVX-512 code and this CPU or OS lacks AVX-512";
  const GgmlType t = GetParam();
  const auto& f = format_info(t);
  const std::size_t cols = kDecodeCols;
  const std::size_t rows = kDecodeRows;
  const std::size_t row_bytes = f.row_bytes(cols);
  const std::vector<std::uint8_t> original = random_bytes(rows * row_bytes, 41 + static_cast<int>(t));
  std::vector<std::uint8_t> data = original;
  relayout(make_weight_view(t, data.data(), rows, cols), data.data(), WeightLayout::interleaved8);

  const std::size_t nsub = cols / decoded_sub_block(t);
  const std::size_t ldq = cols + 64;
  struct Decoded {
    std::vector<std::int8_t> q;
    std::vector<float> scale;
    std::vector<float> offset;
    DecodedRows rows;
  };
  const auto make = [&](std::int8_t fill) {
    Decoded d{std::vector<std::int8_t>(rows * ldq, fill), std::vector<float>(rows * nsub, -1.0F),
              std::vector<float>(rows * nsub, -1.0F), {}};
    d.rows = DecodedRows{d.q.data(), d.scale.data(), d.offset.data(), ldq, nsub};
    return d;
  };
  Decoded gguf = make(0);
  Decoded x8 = make(0x55);
  for (std::size_t r = 0; r < rows; ++r) decode_gguf_row(t, original.data() + r * row_bytes, cols, gguf.rows, r);
  for (std::size_t g = 0; g < rows; g += 8) decode_x8_group(t, data.data() + g * row_bytes, cols, x8.rows, g);
  const bool offsets = t == GgmlType::q4_k || t == GgmlType::q5_k;
  for (std::size_t r = 0; r < rows; ++r) {
    EXPECT_EQ(0, std::memcmp(gguf.q.data() + r * ldq, x8.q.data() + r * ldq, cols)) << f.name << " quants of row " << r;
    EXPECT_TRUE(same_floats(gguf.scale.data() + r * nsub, x8.scale.data() + r * nsub, nsub)) << f.name << " scales of row " << r;
    if (offsets) {
      EXPECT_TRUE(same_floats(gguf.offset.data() + r * nsub, x8.offset.data() + r * nsub, nsub))
          << f.name << " offsets of row " << r;
    }
  }
  // Random quants reach each format's whole decoded range: Q4_0, Q5_0 and Q6_K less their bias,
  // Q4_K and Q5_K unsigned (their mins go to the offsets), the fifth bits included.
  int lo = 0;
  int hi = 0;
  for (std::size_t r = 0; r < rows; ++r) {
    const auto row = x8.q.begin() + static_cast<std::ptrdiff_t>(r * ldq);
    const auto [a, b] = std::minmax_element(row, row + static_cast<std::ptrdiff_t>(cols));
    lo = std::min<int>(lo, *a);
    hi = std::max<int>(hi, *b);
  }
  const std::pair<int, int> range = t == GgmlType::q8_0   ? std::pair{-128, 127}
                                    : t == GgmlType::q4_0 ? std::pair{-8, 7}
                                    : t == GgmlType::q5_0 ? std::pair{-16, 15}
                                    : t == GgmlType::q4_k ? std::pair{0, 15}
                                    : t == GgmlType::q5_k ? std::pair{0, 31}
                                                          : std::pair{-32, 31};
  EXPECT_EQ(lo, range.first) << f.name;
  EXPECT_EQ(hi, range.second) << f.name;
}

// The BF16 tiles' rows: eight interleaved rows give the GGUF rows' bf16 bit for bit (random
// bytes, every field), and the GGUF rows are the reference dequantization rounded to bf16
// (quantized Gaussian weights: finite scales, so the comparison is of values).
TEST_P(InterleaveFormats, TheAmxBf16DecodeOfAGroupEqualsTheGgufRowsAndTheReference) {
  if (!has_avx512(true)) GTEST_SKIP() << "the decode is AVX-512 BF16 code and this CPU or OS lacks AVX512-BF16";
  const GgmlType t = GetParam();
  const auto& f = format_info(t);
  const std::size_t cols = kDecodeCols;
  const std::size_t rows = kDecodeRows;
  const std::size_t row_bytes = f.row_bytes(cols);
  const std::size_t nsub = cols / decoded_sub_block(t);
  const std::size_t ldq = cols + 64;
  std::vector<std::int8_t> q(8 * ldq);
  std::vector<float> scale(8 * nsub), offset(8 * nsub);
  const DecodedRows scratch{q.data(), scale.data(), offset.data(), ldq, nsub};
  const std::size_t ld = cols + 32;  // a padded stride, as the tile buffer has
  const auto bf16_rows = [&](const std::vector<std::uint8_t>& gguf) {
    std::vector<std::uint8_t> x8 = gguf;
    relayout(make_weight_view(t, x8.data(), rows, cols), x8.data(), WeightLayout::interleaved8);
    std::vector<std::uint16_t> from_gguf(rows * ld, 0x7FC1), from_x8(rows * ld, 0x7FC2);
    for (std::size_t r = 0; r < rows; ++r) decode_gguf_row_bf16(t, gguf.data() + r * row_bytes, cols, from_gguf.data() + r * ld, scratch);
    for (std::size_t g = 0; g < rows; g += 8) decode_x8_group_bf16(t, x8.data() + g * row_bytes, cols, from_x8.data() + g * ld, ld, scratch);
    for (std::size_t r = 0; r < rows; ++r) {
      EXPECT_EQ(0, std::memcmp(from_gguf.data() + r * ld, from_x8.data() + r * ld, 2 * cols)) << f.name << " row " << r;
    }
    return from_gguf;
  };
  bf16_rows(random_bytes(rows * row_bytes, 43 + static_cast<int>(t)));

  const std::vector<float> w = testing::gaussian(rows * cols, 7, 0.02F);
  std::vector<std::uint8_t> gguf(rows * row_bytes);
  for (std::size_t r = 0; r < rows; ++r) f.quantize(w.data() + r * cols, gguf.data() + r * row_bytes, cols);
  const std::vector<std::uint16_t> got = bf16_rows(gguf);
  std::vector<float> ref(cols);
  for (std::size_t r = 0; r < rows; ++r) {
    f.dequantize(gguf.data() + r * row_bytes, ref.data(), cols);
    for (std::size_t k = 0; k < cols; ++k) {
      const float v = bf16_to_fp32(got[r * ld + k]);
      // bf16 keeps 8 bits of mantissa: half an ulp is 2^-9 of the value; the reference's own
      // float rounding (a multiply, then an add) can move it by a float ulp or two more.
      ASSERT_NEAR(v, ref[k], 0x1.0p-8F * std::fabs(ref[k]) + 1e-30F) << f.name << " row " << r << " column " << k;
    }
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
