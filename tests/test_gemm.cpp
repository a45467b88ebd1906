// Every kernel path the machine supports against the scalar reference, on random data and on
// the edge cases of each format.
#include <gtest/gtest.h>

#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernel_test_data.h"
#include "kernels/formats.h"
#include "kernels/gemm.h"
#include "kernels/gemm_kernels.h"
#include "kernels/interleave.h"
#include "kernels/measure.h"
#include "kernels/thread_pool.h"
#include "probes/bandwidth.h"
#include "probes/error.h"
#include "probes/topology.h"

namespace infercast {
namespace {

using testing::Pattern;

struct Case {
  GgmlType type;
  std::size_t rows;
  std::size_t cols;
  std::size_t batch;
  Pattern pattern;
};

std::vector<IsaLevel> supported_levels() {
  std::vector<IsaLevel> levels;
  for (int l = 0; l <= static_cast<int>(max_supported_level(host_cpu())); ++l) levels.push_back(static_cast<IsaLevel>(l));
  return levels;
}

struct Result {
  std::vector<float> y;
  std::vector<float> exact;      // the dequantized weights times the float activations, in double
  std::vector<float> magnitude;  // sum_k |w_k x_k| per output, the scale of its rounding error
  std::string kernel;
};

// The host's features, and the host with VNNI and BF16 masked off: the variants an older CPU gets.
std::vector<CpuFeatures> feature_variants() {
  CpuFeatures older = host_cpu();
  older.avx512_vnni = older.avx_vnni = older.avx512_bf16 = false;
  return {host_cpu(), older};
}

Result run(const Case& c, IsaLevel level, unsigned threads, const CpuFeatures& features = host_cpu(),
           WeightLayout layout = WeightLayout::gguf) {
  const auto& f = format_info(c.type);
  const std::vector<float> w = testing::pattern(c.pattern, c.rows * c.cols, static_cast<std::size_t>(f.block_elems) * 8 > c.cols ? c.cols : static_cast<std::size_t>(f.block_elems), 17 + c.rows);
  std::vector<float> x = testing::gaussian(c.batch * c.cols, 99 + c.batch);
  if (c.pattern == Pattern::outlier_per_block) x[c.cols / 2] = 25.0F;
  if (c.pattern == Pattern::saturated) std::fill(x.begin(), x.end(), -1.0F);
  std::vector<std::uint8_t> q(f.row_bytes(c.cols) * c.rows);
  for (std::size_t r = 0; r < c.rows; ++r) f.quantize(w.data() + r * c.cols, q.data() + r * f.row_bytes(c.cols), c.cols);
  std::vector<float> deq(c.cols);
  Result out;
  out.magnitude.assign(c.batch * c.rows, 0.0F);
  out.exact.assign(c.batch * c.rows, 0.0F);
  for (std::size_t r = 0; r < c.rows; ++r) {
    f.dequantize(q.data() + r * f.row_bytes(c.cols), deq.data(), c.cols);
    for (std::size_t b = 0; b < c.batch; ++b) {
      double m = 0;
      double e = 0;
      for (std::size_t k = 0; k < c.cols; ++k) {
        const double p = static_cast<double>(deq[k]) * static_cast<double>(x[b * c.cols + k]);
        m += std::fabs(p);
        e += p;
      }
      out.magnitude[b * c.rows + r] = static_cast<float>(m);
      out.exact[b * c.rows + r] = static_cast<float>(e);
    }
  }
  GemmContext ctx(threads, level, features);
  const WeightView view = relayout(make_weight_view(c.type, q.data(), c.rows, c.cols), q.data(), layout);
  out.y.assign(c.batch * c.rows, NAN);
  out.kernel = ctx.kernel_name(c.type, c.batch, c.cols, view.layout);
  ctx.gemm(view, x.data(), c.batch, out.y.data());
  return out;
}

// Integer paths differ from the reference only in float summation order (and FMA), so the error
// is a few ulps of the accumulated magnitude. BF16 tiles round activations and weights (a block
// format's after its scale) to 8-bit mantissas, at most 2^-9 each, so a product is off by at
// most 2^-8 of its magnitude; they do not quantize activations to 8 bits, so they are held to
// the exact product rather than to the scalar kernel's Q8 result. The AVX-512 BF16 kernel of
// large batches (both its kernels) rounds its activations the same way.
bool rounds_to_bf16(const std::string& kernel) {
  return kernel == "amx_bf16" || kernel == "avx512_bf16_round" || kernel == "avx512_bf16_panel";
}

float tolerance(const std::string& kernel, float magnitude) {
  if (rounds_to_bf16(kernel)) return 0x1.0p-8F * magnitude + 1e-6F;
  return 2e-5F * magnitude + 1e-6F;
}

std::vector<WeightLayout> layouts_of(GgmlType type) {
  if (!has_interleaved_layout(type)) return {WeightLayout::gguf};
  return {WeightLayout::gguf, WeightLayout::interleaved8};
}

void check_all_levels(const Case& c) {
  const Result ref = run(c, IsaLevel::scalar, 1);
  for (IsaLevel level : supported_levels()) {
    // Host features on one thread, the older-CPU variants on two: both splits, both variants;
    // each in both layouts (the interleaved one runs its own kernels at every level).
    for (const WeightLayout layout : layouts_of(c.type)) {
      for (unsigned variant = 0; variant < 2; ++variant) {
        const unsigned threads = variant + 1;
        const Result got = run(c, level, threads, feature_variants()[variant], layout);
        const std::vector<float>& want = rounds_to_bf16(got.kernel) ? ref.exact : ref.y;
        for (std::size_t i = 0; i < ref.y.size(); ++i) {
          ASSERT_NEAR(got.y[i], want[i], tolerance(got.kernel, ref.magnitude[i]))
              << format_info(c.type).name << " kernel " << got.kernel << " level " << to_string(level) << " rows "
              << c.rows << " cols " << c.cols << " batch " << c.batch << " threads " << threads << " layout "
              << (layout == WeightLayout::gguf ? "gguf" : "interleaved8") << " output " << i;
        }
      }
    }
  }
}

class GemmAllFormats : public ::testing::TestWithParam<GgmlType> {};

TEST_P(GemmAllFormats, RandomWeightsEveryBatchShape) {
  const GgmlType t = GetParam();
  const std::size_t block = static_cast<std::size_t>(format_info(t).block_elems);
  const std::size_t cols = block == 1 ? 96 : (block == 32 ? 96 : 512);  // three Q8_0 blocks: odd pair count
  // At the AMX level interleaved K-quants and Q6_K go to BF16 tiles from 16, the others to INT8
  // tiles from 24 and to BF16 tiles from 64 (the GGUF layout: INT8 tiles from 8); 37 rows mix four
  // interleaved groups with five GGUF-layout rows in the last tile. 5-7, 9-11, 13 and 15 end in
  // a pass of every remainder size after the largest groups of activation rows (or pairs), and
  // in the float kernels' last groups of five and six.
  for (std::size_t batch : {1U, 2U, 3U, 4U, 5U, 6U, 7U, 8U, 9U, 10U, 11U, 13U, 15U, 16U, 17U, 24U, 33U, 64U}) {
    check_all_levels({t, 37, cols, batch, Pattern::gaussian});
  }
}

// A GEMV walks a thread's groups of eight rows in two or three streams, then the groups left
// over: these row counts leave each thread every remainder of groups (0-2) after three streams,
// ranges of fewer groups than streams, and a tail of GGUF-layout rows.
TEST_P(GemmAllFormats, GemvEveryStreamRemainder) {
  const GgmlType t = GetParam();
  const std::size_t cols = format_info(t).block_elems == 256 ? 256 : 64;
  for (std::size_t rows : {8U, 16U, 24U, 40U, 48U, 56U, 72U, 91U, 107U}) check_all_levels({t, rows, cols, 1, Pattern::gaussian});
}

TEST_P(GemmAllFormats, EdgeCases) {
  const GgmlType t = GetParam();
  const std::size_t block = static_cast<std::size_t>(format_info(t).block_elems);
  const std::size_t cols = block == 1 ? 256 : 512;
  for (Pattern p : {Pattern::zero_blocks, Pattern::outlier_per_block, Pattern::extreme}) {
    for (std::size_t batch : {1U, 9U, 32U}) check_all_levels({t, 48, cols, batch, p});
  }
}

// The largest sums a kernel can meet: 4-bit quants at 15 against activations quantized to -128.
// The Q4_K batch kernels hold a 16-product sum in 16 bits (16 x 15 x 128 = 30720), which only
// data like this comes near.
TEST_P(GemmAllFormats, SaturatedQuantsAndActivations) {
  const GgmlType t = GetParam();
  if (t == GgmlType::q4_k) {
    const auto& f = format_info(t);
    const std::vector<float> w = testing::pattern(Pattern::saturated, 256, 256, 1);
    std::vector<std::uint8_t> q(f.row_bytes(256));
    f.quantize(w.data(), q.data(), 256);
    const auto& block = *reinterpret_cast<const BlockQ4_K*>(q.data());
    int fifteen = 0;
    for (std::uint8_t b : block.qs) fifteen += ((b & 0xF) == 15) + ((b >> 4) == 15);
    ASSERT_EQ(fifteen, 256 - 8) << "the pattern no longer reaches the largest quant";
  }
  for (std::size_t batch : {1U, 4U, 8U, 9U}) check_all_levels({t, 16, 512, batch, Pattern::saturated});
}

// Large batches: block formats switch to BF16 tiles, decoded once per block of activation rows
// (16 tiles), rows longer than 2048 columns in segments whose sums carry over: a batch of 300
// activation rows of 4096 columns is two segments and two blocks, the second of three tiles (an
// odd count) and a partial last tile; 37 weight rows leave a partial row group per thread.
TEST_P(GemmAllFormats, LargeBatchesInSeveralActivationBlocks) {
  const GgmlType t = GetParam();
  check_all_levels({t, 37, 4096, 300, Pattern::gaussian});
  // BF16 tiles decode a block format's row group in 256-column slices: 608 columns end in a
  // shorter one (the K-quants' 768 in three).
  check_all_levels({t, 37, format_info(t).block_elems == 256 ? 768U : 608U, 64, Pattern::gaussian});
}

// Block formats come in whole blocks; the float formats take any row length.
class GemmFloatFormats : public ::testing::TestWithParam<GgmlType> {};

TEST_P(GemmFloatFormats, RowLengthNotAMultipleOfTheVector) {
  const GgmlType t = GetParam();
  for (std::size_t cols : {1U, 7U, 33U, 100U}) {
    for (std::size_t batch : {1U, 5U, 16U, 33U}) check_all_levels({t, 19, cols, batch, Pattern::gaussian});
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, GemmFloatFormats, ::testing::Values(GgmlType::f32, GgmlType::f16, GgmlType::bf16),
                         [](const ::testing::TestParamInfo<GgmlType>& p) { return std::string(format_info(p.param).name); });
INSTANTIATE_TEST_SUITE_P(Formats, GemmAllFormats, ::testing::ValuesIn(weight_formats().begin(), weight_formats().end()),
                         [](const ::testing::TestParamInfo<GgmlType>& p) { return std::string(format_info(p.param).name); });

TEST(GemmDispatch, LevelsPickTheirKernels) {
  const IsaLevel best = max_supported_level(host_cpu());
  EXPECT_EQ(GemmContext(1, IsaLevel::scalar).kernel_name(GgmlType::q4_0, 1, 4096), "scalar");
  if (best >= IsaLevel::avx2) {
    EXPECT_EQ(GemmContext(1, IsaLevel::avx2).kernel_name(GgmlType::q4_0, 1, 4096).substr(0, 4), "avx2");
  }
  if (best >= IsaLevel::avx512 && host_cpu().avx512_bf16) {
    // BF16 keeps F32-like activations (high and low parts) while memory-bound, and rounds them
    // to bf16 from the batches where AMX would: one vdpbf16ps per product; from a vector's worth
    // of activation rows (sixteen), one vdpbf16ps per pair of weights against sixteen of them.
    const GemmContext avx512(1, IsaLevel::avx512);
    EXPECT_EQ(avx512.kernel_name(GgmlType::bf16, 1, 4096), "avx512_bf16");
    EXPECT_EQ(avx512.kernel_name(GgmlType::bf16, kBf16RoundMinBatch - 1, 4096), "avx512_bf16");
    EXPECT_EQ(avx512.kernel_name(GgmlType::bf16, kBf16RoundMinBatch, 4096), "avx512_bf16_round");
    EXPECT_EQ(avx512.kernel_name(GgmlType::bf16, kBf16PanelMinBatch - 1, 4096), "avx512_bf16_round");
    EXPECT_EQ(avx512.kernel_name(GgmlType::bf16, kBf16PanelMinBatch, 4096), "avx512_bf16_panel");
  }
  // The float formats' panels start where they beat the row kernels: F32 sooner than the
  // formats widened to F32 once per block of rows.
  const std::pair<IsaLevel, const char*> panel_levels[] = {{IsaLevel::avx2, "avx2_panel"}, {IsaLevel::avx512, "avx512_panel"}};
  for (const auto& [level, panel] : panel_levels) {
    if (best < level) continue;
    const GemmContext ctx(1, level);
    const std::pair<GgmlType, std::size_t> starts[] = {{GgmlType::f32, kFloatPanelMinBatch}, {GgmlType::f16, kWidenedPanelMinBatch}};
    for (const auto& [type, from] : starts) {
      EXPECT_NE(ctx.kernel_name(type, from - 1, 4096), panel) << to_string(level);
      EXPECT_EQ(ctx.kernel_name(type, from, 4096), panel) << to_string(level);
    }
  }
  if (best >= IsaLevel::avx2) {
    // AVX2 has no bf16 arithmetic: BF16 is widened as F16 is.
    EXPECT_EQ(GemmContext(1, IsaLevel::avx2).kernel_name(GgmlType::bf16, kWidenedPanelMinBatch, 4096), "avx2_panel");
  }
  if (best >= IsaLevel::amx) {
    GemmContext amx(1, IsaLevel::amx);
    EXPECT_EQ(amx.kernel_name(GgmlType::q4_k, 8, 4096), "amx_int8");
    EXPECT_EQ(amx.kernel_name(GgmlType::q4_k, 16, 4096), "amx_bf16");  // decoded to bf16 once per block
    EXPECT_EQ(amx.kernel_name(GgmlType::q8_0, 63, 4096), "amx_int8");
    EXPECT_EQ(amx.kernel_name(GgmlType::q8_0, 64, 4096), "amx_bf16");
    EXPECT_EQ(amx.kernel_name(GgmlType::bf16, 64, 4096), "amx_bf16");
    EXPECT_EQ(amx.kernel_name(GgmlType::q4_k, 1, 4096).substr(0, 6), "avx512");  // GEMV stays on AVX-512
    EXPECT_EQ(amx.kernel_name(GgmlType::f32, 64, 4096).substr(0, 6), "avx512");  // no F32 tiles
  }
  // A request above the machine is lowered, never honoured.
  EXPECT_LE(GemmContext(1, IsaLevel::amx).level(), best);
}

TEST(GemmValidation, RejectsShapesTheFormatCannotHold) {
  std::vector<std::uint8_t> data(1 << 16);
  GemmContext ctx(1);
  std::vector<float> x(512), y(8);
  EXPECT_THROW(ctx.gemm(WeightView{GgmlType::q4_k, data.data(), 1, 100, 100}, x.data(), 1, y.data()), UsageError);
  EXPECT_THROW(ctx.gemm(WeightView{GgmlType::q8_0, data.data(), 1, 64, 10}, x.data(), 1, y.data()), UsageError);
  EXPECT_THROW(ctx.gemm(WeightView{GgmlType::q8_k, data.data(), 1, 256, 292}, x.data(), 1, y.data()), UsageError);
  EXPECT_THROW(ctx.gemm(WeightView{GgmlType::f32, nullptr, 1, 16, 64}, x.data(), 1, y.data()), UsageError);
}

// Guided row scheduling hands rows to whichever thread is free; every row is still computed
// by exactly one thread in the same way, so the outputs equal the fixed split's bit for bit.
// 1003 rows of 512 columns are four or more of the smallest runs a thread takes in every
// format, so the threads share each matrix in several runs; the last three rows are a tail.
// Every level runs both layouts: a level that prefers one still runs the other's kernels (the
// AMX level kept the GGUF layout until the twentieth session, and its AVX-512 Q4_K/Q5_K GEMV
// differed by schedule until the K-quant runs became whole four-row groups; only an AMX host
// showed it).
TEST(GemmSchedule, GuidedRowsEqualTheFixedSplitBitForBit) {
  const std::size_t rows = 1003;
  const std::size_t cols = 512;
  const std::vector<float> w = testing::gaussian(rows * cols, 77, 0.02F);
  for (GgmlType type : weight_formats()) {
    const auto& f = format_info(type);
    std::vector<std::uint8_t> gguf(f.row_bytes(cols) * rows);
    for (std::size_t r = 0; r < rows; ++r)
      f.quantize(w.data() + r * cols, gguf.data() + r * f.row_bytes(cols), cols);
    for (IsaLevel level : supported_levels()) {
      for (const auto& [threads, layout] :
           {std::pair{2U, WeightLayout::gguf}, std::pair{3U, WeightLayout::gguf},
            std::pair{2U, WeightLayout::interleaved8}, std::pair{3U, WeightLayout::interleaved8}}) {
        GemmContext ctx(threads, level);
        std::vector<std::uint8_t> data = gguf;
        const WeightView v =
            relayout(make_weight_view(type, data.data(), rows, cols), data.data(), layout);
        // 5: a group of four activations and one alone; 33: the float formats' panel kernels,
        // weight rows in blocks of twelve and a thread's last rows in a smaller one, activation
        // rows in a pair of blocks and a partial third.
        for (std::size_t batch : {1U, 3U, 5U, 33U}) {
          const std::vector<float> x = testing::gaussian(batch * cols, 5);
          std::vector<float> guided(batch * rows, NAN), fixed(batch * rows, NAN);
          ASSERT_EQ(ctx.row_schedule(), GemmContext::RowSchedule::guided);
          ctx.gemm(v, x.data(), batch, guided.data());
          ctx.set_row_schedule(GemmContext::RowSchedule::fixed);
          ctx.gemm(v, x.data(), batch, fixed.data());
          ctx.set_row_schedule(GemmContext::RowSchedule::guided);
          EXPECT_TRUE(
              std::none_of(guided.begin(), guided.end(), [](float y) { return std::isnan(y); }))
              << f.name << " level " << to_string(level) << ": a row was left out";
          EXPECT_EQ(guided, fixed)
              << f.name << " level " << to_string(level) << " threads " << threads << " batch "
              << batch << (layout == WeightLayout::gguf ? " gguf" : " interleaved");
        }
      }
    }
  }
}

TEST(GemmSchedule, OnlyProductsWorthBalancingTakeGuidedRuns) {
  // A GEMV's runs restart its streams: with less than kGuidedLeastShare a thread, it is split fixed.
  EXPECT_FALSE(guided_rows_pay(2 * kGuidedLeastShare - 1, 1, 2));
  EXPECT_TRUE(guided_rows_pay(2 * kGuidedLeastShare, 1, 2));
  EXPECT_FALSE(guided_rows_pay(2 * kGuidedLeastShare, 1, 3));
  // Small batches are split by speed like a GEMV; larger ones are long pieces of work: always
  // balanced.
  EXPECT_FALSE(guided_rows_pay(1024, kGuidedLeastBatch - 1, 2));
  EXPECT_TRUE(guided_rows_pay(2 * kGuidedLeastShare, kGuidedLeastBatch - 1, 2));
  EXPECT_TRUE(guided_rows_pay(1024, kGuidedLeastBatch, 2));
  EXPECT_TRUE(guided_rows_pay(1024, 64, 16));
  // One thread has nothing to balance.
  EXPECT_FALSE(guided_rows_pay(std::size_t{1} << 30, 64, 1));
}

// The small matrices above are split fixed at batch 1: the guided runs of a GEMV need a product
// of kGuidedLeastShare a thread.
TEST(GemmSchedule, GuidedGemvRowsEqualTheFixedSplitBitForBit) {
  const std::size_t cols = 1024;
  for (GgmlType type : {GgmlType::f32, GgmlType::q8_0}) {
    const auto& f = format_info(type);
    for (unsigned threads : {2U, 3U}) {
      const std::size_t rows = threads * kGuidedLeastShare / f.row_bytes(cols) + 13;
      ASSERT_TRUE(guided_rows_pay(rows * f.row_bytes(cols), 1, threads));
      const std::vector<float> w = testing::gaussian(rows * cols, 91, 0.02F);
      const std::vector<float> x = testing::gaussian(cols, 6);
      std::vector<std::uint8_t> gguf(f.row_bytes(cols) * rows);
      for (std::size_t r = 0; r < rows; ++r) f.quantize(w.data() + r * cols, gguf.data() + r * f.row_bytes(cols), cols);
      for (IsaLevel level : supported_levels()) {
        GemmContext ctx(threads, level);
        std::vector<std::uint8_t> data = gguf;  // relayout rewrites it in place
        const WeightView v = relayout(make_weight_view(type, data.data(), rows, cols), data.data(), ctx.preferred_layout(type));
        std::vector<float> guided(rows, NAN), fixed(rows, NAN);
        ctx.gemm(v, x.data(), 1, guided.data());
        ctx.set_row_schedule(GemmContext::RowSchedule::fixed);
        ctx.gemm(v, x.data(), 1, fixed.data());
        EXPECT_TRUE(std::none_of(guided.begin(), guided.end(), [](float y) { return std::isnan(y); }))
            << f.name << " level " << to_string(level) << ": a row was left out";
        EXPECT_EQ(guided, fixed) << f.name << " level " << to_string(level) << " threads " << threads;
      }
    }
  }
}

// One small Gaussian matrix per format, quantized (matrix i drawn from seed + i).
std::vector<std::vector<std::uint8_t>> quantized_matrices(const std::vector<GgmlType>& types, const std::vector<std::size_t>& rows,
                                                          std::size_t cols, std::uint64_t seed) {
  std::vector<std::vector<std::uint8_t>> data;
  for (std::size_t i = 0; i < types.size(); ++i) {
    const auto& f = format_info(types[i]);
    const std::vector<float> w = testing::gaussian(rows[i] * cols, seed + i, 0.02F);
    data.emplace_back(f.row_bytes(cols) * rows[i]);
    for (std::size_t r = 0; r < rows[i]; ++r) f.quantize(w.data() + r * cols, data[i].data() + r * f.row_bytes(cols), cols);
  }
  return data;
}

// Matrices sharing one input give, each, exactly what a call of their own gives: the packed
// activations are shared only between kernels that pack alike (Q4_K and Q6_K both take Q8_K),
// and formats without packing (F16) read the floats.
TEST(GemmShared, EachMatrixGetsWhatItsOwnCallGives) {
  const std::size_t cols = 512;
  const std::vector<GgmlType> types{GgmlType::q4_k, GgmlType::q6_k, GgmlType::f16, GgmlType::q8_0};
  const std::vector<std::size_t> rows{40, 24, 19, 33};
  const std::vector<std::vector<std::uint8_t>> data = quantized_matrices(types, rows, cols, 40);
  for (IsaLevel level : supported_levels()) {
    for (std::size_t batch : {1U, 5U}) {
      GemmContext ctx(2, level);
      std::vector<WeightView> ws;
      std::vector<std::vector<std::uint8_t>> copies = data;
      for (std::size_t i = 0; i < types.size(); ++i) {
        const WeightView v = make_weight_view(types[i], copies[i].data(), rows[i], cols);
        ws.push_back(relayout(v, copies[i].data(), ctx.preferred_layout(types[i])));
      }
      const std::vector<float> x = testing::gaussian(batch * cols, 3);
      std::vector<std::vector<float>> shared(types.size()), alone(types.size());
      std::vector<float*> outs;
      for (std::size_t i = 0; i < types.size(); ++i) {
        shared[i].assign(batch * rows[i], NAN);
        alone[i].assign(batch * rows[i], NAN);
        outs.push_back(shared[i].data());
        ctx.gemm(ws[i], x.data(), batch, alone[i].data());
      }
      ctx.gemm_shared(ws, x.data(), batch, outs);
      // Buffers prepared ahead (for this call and a larger one) change nothing.
      GemmContext prepared(2, level);
      prepared.prepare(ws, 2 * batch);
      prepared.prepare(ws, batch);
      std::vector<std::vector<float>> ahead(types.size());
      std::vector<float*> ahead_outs;
      for (std::size_t i = 0; i < types.size(); ++i) {
        ahead[i].assign(batch * rows[i], NAN);
        ahead_outs.push_back(ahead[i].data());
      }
      prepared.gemm_shared(ws, x.data(), batch, ahead_outs);
      for (std::size_t i = 0; i < types.size(); ++i) {
        EXPECT_EQ(shared[i], alone[i]) << format_info(types[i]).name << " level " << to_string(level) << " batch " << batch;
        EXPECT_EQ(ahead[i], alone[i]) << format_info(types[i]).name << " level " << to_string(level) << " batch " << batch;
      }
    }
  }
  GemmContext ctx(1);
  std::vector<float> x(cols), y(64);
  const std::vector<WeightView> mixed{make_weight_view(GgmlType::f16, data[2].data(), 1, cols),
                                      make_weight_view(GgmlType::f16, data[2].data(), 1, cols / 2)};
  std::vector<float*> ys{y.data(), y.data() + 8};
  EXPECT_THROW(ctx.gemm_shared(mixed, x.data(), 1, ys), UsageError);
  EXPECT_THROW(ctx.prepare(mixed, 1), UsageError);  // checked as the call itself would be
  ys.pop_back();
  EXPECT_THROW(ctx.gemm_shared(mixed, x.data(), 1, ys), UsageError);
}

// Jobs of different matrices, inputs and batches in one call (a MoE layer's experts) give,
// each, exactly what a call of their own gives: two jobs of one input and batch share its
// packing, two of one input at different batches must not, and a job of batch 0 is skipped.
TEST(GemmJobs, EachJobGetsWhatItsOwnCallGives) {
  const std::size_t cols = 256;
  const std::vector<GgmlType> types{GgmlType::q4_k, GgmlType::q4_k, GgmlType::q6_k, GgmlType::q8_0, GgmlType::q8_0, GgmlType::f16};
  const std::vector<std::size_t> rows{24, 24, 17, 40, 40, 9};
  // Jobs 0 and 1 share input 0 and batch 3 (gate and up); 3 and 4 read input 1 at batches 1 and 2.
  const std::vector<std::size_t> input{0, 0, 2, 1, 1, 3};
  const std::vector<std::size_t> batch{3, 3, 5, 1, 2, 0};
  const std::vector<std::vector<std::uint8_t>> data = quantized_matrices(types, rows, cols, 70);
  std::vector<std::vector<float>> inputs;
  for (std::size_t k = 0; k < 4; ++k) inputs.push_back(testing::gaussian(5 * cols, 90 + k));
  for (IsaLevel level : supported_levels()) {
    GemmContext ctx(2, level);
    std::vector<std::vector<std::uint8_t>> copies = data;
    std::vector<GemmContext::Job> jobs;
    std::vector<std::vector<float>> together(types.size()), alone(types.size());
    for (std::size_t i = 0; i < types.size(); ++i) {
      const WeightView v = make_weight_view(types[i], copies[i].data(), rows[i], cols);
      const WeightView w = relayout(v, copies[i].data(), ctx.preferred_layout(types[i]));
      together[i].assign(std::max<std::size_t>(batch[i], 1) * rows[i], NAN);
      alone[i] = together[i];
      jobs.push_back({w, inputs[input[i]].data(), batch[i], together[i].data()});
      ctx.gemm(w, inputs[input[i]].data(), batch[i], alone[i].data());
    }
    ctx.gemm_jobs(jobs);
    for (std::size_t i = 0; i + 1 < types.size(); ++i) {
      EXPECT_EQ(together[i], alone[i]) << "job " << i << " " << format_info(types[i]).name << " level " << to_string(level);
    }
    EXPECT_TRUE(std::isnan(together.back().front())) << "a job of batch 0 writes nothing";
  }
}

// A MoE layer's routed rows fall among its experts differently every step: prepare() with the
// number of parts sizes the packing for any split, so no step grows the buffer while timed.
TEST(GemmJobs, PreparedForPartsFitsEverySplitOfTheRows) {
  const std::size_t cols = 256;
  const std::size_t total = 40;
  const std::vector<GgmlType> types{GgmlType::q4_0, GgmlType::q8_0, GgmlType::q4_k, GgmlType::q6_k, GgmlType::f16, GgmlType::bf16};
  const std::vector<std::vector<std::size_t>> splits{
      {5, 5, 5, 5, 5, 5, 5, 5}, {33, 1, 1, 1, 1, 1, 1, 1}, {17, 17, 1, 1, 1, 1, 1, 1}, {9, 9, 9, 9, 1, 1, 1, 1}, {16, 16, 8}, {40}};
  const std::vector<float> x = testing::gaussian(total * cols, 11);
  bool one_part_grew = false;  // the test can tell a split that outgrows an unsplit batch
  for (IsaLevel level : supported_levels()) {
    for (GgmlType type : types) {
      std::vector<std::vector<std::uint8_t>> data = quantized_matrices({type}, {24}, cols, 12);
      for (std::size_t parts : {std::size_t{1}, std::size_t{8}}) {
        GemmContext ctx(2, level);
        const WeightView w = relayout(make_weight_view(type, data[0].data(), 24, cols), data[0].data(), ctx.preferred_layout(type));
        ctx.prepare(std::span(&w, 1), total, parts);
        const std::size_t prepared = ctx.packed_capacity();
        std::vector<float> y(total * 24);
        for (const auto& split : splits) {
          std::vector<GemmContext::Job> jobs;
          std::size_t row = 0;
          for (std::size_t m : split) {
            jobs.push_back({w, &x[row * cols], m, &y[row * 24]});
            row += m;
          }
          ASSERT_EQ(row, total);
          ctx.gemm_jobs(jobs);
        }
        if (parts > 1) {
          EXPECT_EQ(ctx.packed_capacity(), prepared) << format_info(type).name << " level " << to_string(level);
        } else {
          one_part_grew = one_part_grew || ctx.packed_capacity() > prepared;
        }
      }
    }
  }
  EXPECT_TRUE(one_part_grew);
}

TEST(ThreadPool, SplitRowsCoversEveryRowOnceInSteps) {
  for (std::size_t rows : {0U, 1U, 15U, 16U, 17U, 4096U, 4097U}) {
    for (std::size_t step : {1U, 16U, 32U}) {
      for (unsigned members : {1U, 2U, 3U, 7U}) {
        std::size_t next = 0;
        for (unsigned m = 0; m < members; ++m) {
          const RowRange r = split_rows(rows, step, m, members);
          ASSERT_EQ(r.begin, next);
          if (r.end < rows) {
            ASSERT_EQ((r.end - r.begin) % step, 0U);
          }
          next = r.end;
        }
        ASSERT_EQ(next, rows);
      }
    }
  }
}

// Every row once, in whole steps but the last, ranges in member order.
void expect_speed_split_covers(const SpeedSplit& split, std::size_t rows, std::size_t step) {
  std::size_t next = 0;
  for (unsigned m = 0; m < split.members(); ++m) {
    const RowRange r = split.range(rows, step, m);
    ASSERT_EQ(r.begin, next) << "member " << m << " of " << split.members() << ", rows " << rows << ", step " << step;
    ASSERT_LE(r.begin, r.end);
    if (r.end < rows) {
      ASSERT_EQ((r.end - r.begin) % step, 0U);
    }
    next = r.end;
  }
  ASSERT_EQ(next, rows);
}

// n updates with member m streaming speed[m] bytes a second.
void run_speed_split(SpeedSplit& split, const std::vector<double>& speed, int n) {
  for (int i = 0; i < n; ++i) {
    for (unsigned m = 0; m < split.members(); ++m) split.record(m, 1e6, 1e6 / speed[m]);
    split.update();
  }
}

TEST(ThreadPool, SpeedSplitStartsEqualAndCoversEveryRowOnce) {
  for (unsigned members : {1U, 2U, 3U, 7U}) {
    const SpeedSplit split(members);
    for (std::size_t rows : {0U, 1U, 17U, 4096U, 4097U}) {
      for (std::size_t step : {1U, 8U, 16U}) {
        expect_speed_split_covers(split, rows, step);
        // Equal shares: each member's steps within one of an equal part.
        const double equal = static_cast<double>((rows + step - 1) / step) / members;
        for (unsigned m = 0; m < members; ++m) {
          const RowRange r = split.range(rows, step, m);
          EXPECT_NEAR(static_cast<double>((r.end - r.begin + step - 1) / step), equal, 1.0)
              << "member " << m << " of " << members << ", rows " << rows << ", step " << step;
        }
      }
    }
  }
}

TEST(ThreadPool, SpeedSplitGivesFasterMembersMoreRows) {
  SpeedSplit split(3);
  run_speed_split(split, {2e9, 1e9, 1e9}, 200);
  EXPECT_NEAR(split.share(0), 0.5, 0.01);
  EXPECT_NEAR(split.share(1), 0.25, 0.01);
  EXPECT_NEAR(split.share(2), 0.25, 0.01);
  expect_speed_split_covers(split, 4000, 8);
  EXPECT_NEAR(static_cast<double>(split.range(4000, 8, 0).end), 2000, 8);
  // Speeds that change are followed.
  run_speed_split(split, {1e9, 1e9, 1e9}, 200);
  for (unsigned m = 0; m < 3; ++m) EXPECT_NEAR(split.share(m), 1.0 / 3, 0.01);
}

TEST(ThreadPool, SpeedSplitKeepsEveryMemberInWorkAndIgnoresSmallSamples) {
  SpeedSplit split(2);
  // A member that barely moved (descheduled, say) keeps about a quarter of an equal share (the
  // floor, then normalized with the others: 0.123 here).
  run_speed_split(split, {1e9, 1e3}, 500);
  EXPECT_NEAR(split.share(1), 0.125, 0.005);
  EXPECT_GT(split.range(1 << 20, 1, 1).end - split.range(1 << 20, 1, 1).begin, std::size_t{1} << 16);
  expect_speed_split_covers(split, 1 << 20, 1);
  // Samples below kLeastBytes, or from only some of the members, change nothing.
  SpeedSplit fresh(2);
  fresh.record(0, SpeedSplit::kLeastBytes / 2, 1e-9);
  fresh.record(1, SpeedSplit::kLeastBytes, 1.0);
  fresh.update();
  EXPECT_EQ(fresh.share(0), 0.5);
  fresh.record(0, 1e9, 1.0);
  fresh.update();
  EXPECT_EQ(fresh.share(0), 0.5);
  // Samples of one job do not carry into the next.
  fresh.record(0, 1e9, 1.0);
  fresh.update();
  fresh.record(1, 1e9, 100.0);
  fresh.update();
  EXPECT_EQ(fresh.share(0), 0.5);
}

TEST(ThreadPool, RestoresTheCallersAffinity) {
  cpu_set_t before;
  ASSERT_EQ(sched_getaffinity(0, sizeof before, &before), 0);
  { ThreadPool pool(1); }  // pins the calling thread to core 0 while it lives
  cpu_set_t after;
  ASSERT_EQ(sched_getaffinity(0, sizeof after, &after), 0);
  EXPECT_TRUE(CPU_EQUAL(&before, &after));
}

TEST(ThreadPool, RunsEveryMemberAndReusesThreads) {
  ThreadPool pool(2);
  std::vector<int> hits(pool.size(), 0);
  for (int i = 0; i < 100; ++i) pool.run([&](unsigned m) { ++hits[m]; });
  for (int h : hits) EXPECT_EQ(h, 100);
}

// An idle pool's members sleep after their spin, rather than keep a core busy: over 300 ms idle
// a member may spin its few milliseconds, not the whole time (a yield loop did, on an otherwise
// idle core). A later job still reaches every member.
TEST(ThreadPool, IdleMembersSleep) {
  ThreadPool pool(2);
  clockid_t member_clock{};
  int clock_error = -1;
  pool.run([&](unsigned m) {
    if (m == 1) clock_error = pthread_getcpuclockid(pthread_self(), &member_clock);
  });
  ASSERT_EQ(clock_error, 0);
  const auto cpu_seconds = [&] {
    timespec t{};
    clock_gettime(member_clock, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
  };
  const double before = cpu_seconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_LT(cpu_seconds() - before, 0.1);
  std::vector<int> hits(pool.size(), 0);
  for (int i = 0; i < 3; ++i) {
    pool.run([&](unsigned m) { ++hits[m]; });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // asleep again before the next
  }
  for (int h : hits) EXPECT_EQ(h, 3);
}

}  // namespace
}  // namespace infercast

namespace infercast {
namespace {

// Each kernel is judged against the peak of the instructions it runs, at its width: the
// AVX-512 table's float kernels (named "avx512_vnni" on a VNNI machine) against FP32 FMA, the
// interleaved kernels against VNNI, the BF16 ones against the BF16 dot; an AVX2 kernel gets
// the peak the probe measured at 256 bits, or half of a 512-bit one when there is none.
TEST(KernelSweep, ComputeCeilingIsThePeakOfTheKernelsFamilyAndWidth) {
  const auto profile = [](const char* fp32_kernel, const char* vnni_kernel) {
    return nlohmann::json{{"summary",
                           {{"dram_read_gbs", 40.0}, {"peak_fp32_gflops", 200.0}, {"peak_bf16_gflops", 400.0},
                            {"peak_int8_vnni_gops", 800.0}, {"peak_int8_avx2_gops", 600.0}}},
                          {"compute",
                           {{"peaks", nlohmann::json::array({{{"kernel", fp32_kernel}, {"threads", 2}},
                                                             {{"kernel", vnni_kernel}, {"threads", 2}}})}}}};
  };
  const Ceilings wide = ceilings_from_profile(profile("fp32_fma_avx512", "int8_vnni_avx512"));
  EXPECT_EQ(compute_ceiling(wide, GgmlType::f16, "avx512_vnni"), 200.0);
  EXPECT_EQ(compute_ceiling(wide, GgmlType::q4_k, "avx512_x8"), 800.0);
  EXPECT_EQ(compute_ceiling(wide, GgmlType::q8_0, "avx512_vnni"), 800.0);
  EXPECT_EQ(compute_ceiling(wide, GgmlType::bf16, "avx512_bf16_round"), 400.0);
  EXPECT_EQ(compute_ceiling(wide, GgmlType::f32, "avx2"), 100.0);
  EXPECT_EQ(compute_ceiling(wide, GgmlType::f16, "avx2_vnni"), 100.0);
  EXPECT_EQ(compute_ceiling(wide, GgmlType::q4_0, "avx2_vnni"), 400.0);
  EXPECT_EQ(compute_ceiling(wide, GgmlType::q4_0, "avx2_x8"), 600.0);
  EXPECT_EQ(compute_ceiling(wide, GgmlType::q4_0, "scalar"), std::nullopt);
  const Ceilings narrow = ceilings_from_profile(profile("fp32_fma_avx2", "int8_avx_vnni"));
  EXPECT_EQ(compute_ceiling(narrow, GgmlType::f32, "avx2"), 200.0);
  EXPECT_EQ(compute_ceiling(narrow, GgmlType::q4_0, "avx2_vnni"), 800.0);
  // A 256-bit FMA peak the probe measured is the AVX2 float kernels' ceiling, whatever the
  // 512-bit one: Zen 4 runs 256-bit FMA at nearly the 512-bit rate.
  auto split = profile("fp32_fma_avx512", "int8_vnni_avx512");
  split["summary"]["peak_fp32_avx2_gflops"] = 180.0;
  const Ceilings zen4 = ceilings_from_profile(split);
  EXPECT_EQ(compute_ceiling(zen4, GgmlType::f16, "avx2"), 180.0);
  EXPECT_EQ(compute_ceiling(zen4, GgmlType::bf16, "avx2"), 180.0);
  EXPECT_EQ(compute_ceiling(zen4, GgmlType::f16, "avx512_vnni"), 200.0);
  EXPECT_EQ(compute_family(GgmlType::f16, "avx512_vnni"), ComputeFamily::fp32);
  EXPECT_EQ(compute_family(GgmlType::q6_k, "amx_int8"), ComputeFamily::amx_int8);
}

// The sweep cycles twice the working set from which the probe saw DRAM latency, never less
// than 1 GiB nor more than the CPUID-based default; without a DRAM plateau, the default.
TEST(KernelSweep, FootprintFollowsTheProfilesDramPlateau) {
  const auto profile = [](double from_bytes) {
    return nlohmann::json{{"latency",
                           {{"plateaus", nlohmann::json::array({{{"level", "L2"}, {"from_bytes", 65536}},
                                                                {{"level", "DRAM"}, {"from_bytes", from_bytes}}})}}}};
  };
  const std::size_t mib = std::size_t{1} << 20;
  const std::size_t fallback = 4096 * mib;
  EXPECT_EQ(footprint_from_profile(profile(64.0 * static_cast<double>(mib)), fallback), 1024 * mib);  // the floor
  EXPECT_EQ(footprint_from_profile(profile(768.0 * static_cast<double>(mib)), fallback), 1536 * mib);
  EXPECT_EQ(footprint_from_profile(profile(1e15), fallback), fallback);
  EXPECT_EQ(footprint_from_profile(nlohmann::json::object(), fallback), fallback);
  EXPECT_EQ(footprint_from_profile(nlohmann::json{{"latency", {{"plateaus", nlohmann::json::array()}}}}, fallback), fallback);
  // Malformed entries are no plateau, never an exception of the JSON library.
  EXPECT_EQ(footprint_from_profile(nlohmann::json{{"latency", {{"plateaus", nlohmann::json::array({{{"level", 3}}, 7})}}}}, fallback), fallback);
  EXPECT_EQ(footprint_from_profile(nlohmann::json{{"latency", {{"plateaus", "none"}}}}, fallback), fallback);
  EXPECT_THROW((void)footprint_from_profile(profile(-1), fallback), UsageError);
  EXPECT_THROW((void)footprint_from_profile(profile(0), fallback), UsageError);
  // Memory too short for the floor: the default, which already took what is free into account.
  EXPECT_EQ(footprint_from_profile(profile(64.0 * static_cast<double>(mib)), 512 * mib), 512 * mib);

  // The read curves count too, per thread times threads: loads at DRAM latency from 8 MiB on,
  // reads at 16 threads on their DRAM plateau from 64 MiB per thread (a 300 MiB L3 kept
  // serving part of anything smaller).
  nlohmann::json big_l3 = profile(8.0 * static_cast<double>(mib));
  big_l3["bandwidth"]["read_plateaus_by_threads"] = {
      {"1", nlohmann::json::array({{{"level", "L3"}, {"from_bytes", 4 * mib}},
                                   {{"level", "DRAM"}, {"from_bytes", 768 * mib}}})},
      {"16", nlohmann::json::array({{{"level", "DRAM"}, {"from_bytes", 64 * mib}}})},
      {"x", nlohmann::json::array({{{"level", "DRAM"}, {"from_bytes", 4096 * mib}}})}};
  EXPECT_EQ(footprint_from_profile(big_l3, fallback), 2048 * mib);
  big_l3["latency"] = nlohmann::json::object();  // the reads alone suffice
  EXPECT_EQ(footprint_from_profile(big_l3, fallback), 2048 * mib);
  big_l3["bandwidth"]["read_plateaus_by_threads"]["16"] = "none";
  EXPECT_EQ(footprint_from_profile(big_l3, fallback), 1536 * mib);

  // This host's default: at least the floor, unless a quarter of its memory is less.
  const std::size_t host = default_footprint();
  const std::uint64_t quarter = host_topology().available_memory_bytes / 4;
  EXPECT_GE(host, std::min<std::uint64_t>(kDramFloorBytes, std::max<std::uint64_t>(kDramLeastBytes, quarter)));
  EXPECT_EQ(host, dram_working_set(host_topology(), 4));
  EXPECT_EQ(footprint_from_profile(profile(1e15)), host);
}

}  // namespace
}  // namespace infercast
