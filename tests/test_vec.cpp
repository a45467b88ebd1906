// Every ISA's attention primitives against the scalar ones, at lengths that exercise the tails.
#include <gtest/gtest.h>

#include <cmath>
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

TEST(VecOps, RowVariantsMatchPerRowCalls) {
  SeededRng rng(12);
  constexpr std::size_t kRows = 5, kStride = 40, kN = 33;
  std::vector<float> rows(kRows * kStride), q(kN), w(kRows);
  std::vector<std::uint16_t> half_rows(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) half_rows[i] = fp32_to_fp16(rows[i] = rng.gaussian());
  for (auto& v : q) v = rng.gaussian();
  for (auto& v : w) v = rng.gaussian();
  for (int l = 0; l <= static_cast<int>(max_supported_level(host_cpu())); ++l) {
    const VecOps& ops = vec_ops(static_cast<IsaLevel>(l));
    float out32[kRows], out16[kRows];
    ops.dot_rows_f32(rows.data(), kStride, kRows, q.data(), kN, 0.5F, out32);
    ops.dot_rows_f16(half_rows.data(), kStride, kRows, q.data(), kN, 0.5F, out16);
    std::vector<float> y32(kN, 0.0F), y16(kN, 0.0F), e32(kN, 0.0F), e16(kN, 0.0F);
    ops.axpy_rows_f32(w.data(), rows.data(), kStride, kRows, y32.data(), kN);
    ops.axpy_rows_f16(w.data(), half_rows.data(), kStride, kRows, y16.data(), kN);
    for (std::size_t j = 0; j < kRows; ++j) {
      EXPECT_FLOAT_EQ(out32[j], 0.5F * ops.dot_f32(&rows[j * kStride], q.data(), kN)) << ops.name;
      EXPECT_FLOAT_EQ(out16[j], 0.5F * ops.dot_f16(&half_rows[j * kStride], q.data(), kN)) << ops.name;
      ops.axpy_f32(w[j], &rows[j * kStride], e32.data(), kN);
      ops.axpy_f16(w[j], &half_rows[j * kStride], e16.data(), kN);
    }
    for (std::size_t i = 0; i < kN; ++i) {
      EXPECT_FLOAT_EQ(y32[i], e32[i]) << ops.name;
      EXPECT_FLOAT_EQ(y16[i], e16[i]) << ops.name;
    }
  }
}

}  // namespace
}  // namespace infercast
