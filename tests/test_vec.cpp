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

}  // namespace
}  // namespace infercast
