#pragma once
// The elementwise pieces of a llama block, shared by the optimized engine and the F32 reference
// (they are memory-light next to the matrix products, so one plain version serves both).
#include <cmath>
#include <cstddef>

#include "engine/model.h"
#include "kernels/vec.h"

namespace infercast {

// out = x / rms(x) * weight
// The sum of squares runs in four chains: one chain of n dependent additions was most of the
// norm's time (`infercast_bench_kernels --benchmark_filter=rms_norm`).
inline void rms_norm(const float* x, const float* weight, float* out, std::size_t n, float eps) {
  const auto square = [x](std::size_t i) { return static_cast<double>(x[i]) * static_cast<double>(x[i]); };
  double s0 = 0;
  double s1 = 0;
  double s2 = 0;
  double s3 = 0;
  const std::size_t whole = n / 4 * 4;
  for (std::size_t i = 0; i < whole; i += 4) {
    s0 += square(i);
    s1 += square(i + 1);
    s2 += square(i + 2);
    s3 += square(i + 3);
  }
  for (std::size_t i = whole; i < n; ++i) s0 += square(i);
  const double sum = (s0 + s1) + (s2 + s3);
  const auto scale = static_cast<float>(1.0 / std::sqrt(sum / static_cast<double>(n) + static_cast<double>(eps)));
  for (std::size_t i = 0; i < n; ++i) out[i] = x[i] * scale * weight[i];
}

// cos/sin of the rotation angles pos * base^(-2i/d) for i < d/2.
inline void rope_angles(int pos, int head_dim, float base, float* cos_out, float* sin_out) {
  for (int i = 0; i < head_dim / 2; ++i) {
    const double theta = pos * std::pow(static_cast<double>(base), -2.0 * i / head_dim);
    cos_out[i] = static_cast<float>(std::cos(theta));
    sin_out[i] = static_cast<float>(std::sin(theta));
  }
}

// Rotates every head of `x` (heads x head_dim) in place.
inline void rope_rotate(float* x, int heads, int head_dim, const float* cos_a, const float* sin_a, RopeStyle style) {
  const int half = head_dim / 2;
  for (int h = 0; h < heads; ++h) {
    float* v = x + static_cast<std::ptrdiff_t>(h) * head_dim;
    for (int i = 0; i < half; ++i) {
      const int a = style == RopeStyle::interleaved ? 2 * i : i;
      const int b = style == RopeStyle::interleaved ? 2 * i + 1 : i + half;
      const float x0 = v[a];
      const float x1 = v[b];
      v[a] = x0 * cos_a[i] - x1 * sin_a[i];
      v[b] = x0 * sin_a[i] + x1 * cos_a[i];
    }
  }
}

// gate[i] = silu(gate[i]) * up[i]; the kernels' reference, like softmax below.
inline void swiglu(float* gate, const float* up, std::size_t n) { swiglu_reference(gate, up, n); }

// In-place softmax; the inputs become probabilities. The same reference routine as the scalar
// attention primitives (kernels/vec.h), so the reference path and the scalar level agree.
inline void softmax(float* x, std::size_t n) { softmax_reference(x, n); }

}  // namespace infercast
