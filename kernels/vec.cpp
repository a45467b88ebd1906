#include "kernels/vec.h"

#include <algorithm>
#include <cmath>

#include "kernels/half.h"

namespace infercast {
namespace {

float dot_f32(const float* a, const float* b, std::size_t n) {
  float s = 0;
  for (std::size_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

float dot_f16(const std::uint16_t* a, const float* b, std::size_t n) {
  float s = 0;
  for (std::size_t i = 0; i < n; ++i) s += fp16_to_fp32(a[i]) * b[i];
  return s;
}

float f32_value(float v) { return v; }
float f16_value(std::uint16_t v) { return fp16_to_fp32(v); }

void axpy_f32(float a, const float* x, float* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void axpy_f16(float a, const std::uint16_t* x, float* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] += a * fp16_to_fp32(x[i]);
}

const VecOps kScalar{"scalar", dot_f32, dot_f16, axpy_f32, axpy_f16,
                     dot_keys_by_keys<float, f32_value>, dot_keys_by_keys<std::uint16_t, f16_value>,
                     axpy_blocks_by_rows<float, axpy_f32>, axpy_blocks_by_rows<std::uint16_t, axpy_f16>, softmax_reference,
                     swiglu_reference, to_f16_reference, argmax_reference};

}  // namespace

void softmax_reference(float* x, std::size_t n) {
  if (n == 0) return;
  float max = x[0];
  for (std::size_t i = 1; i < n; ++i) max = std::fmax(max, x[i]);
  double sum = 0;
  for (std::size_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += static_cast<double>(x[i]);
  }
  const auto inv = static_cast<float>(1.0 / sum);
  for (std::size_t i = 0; i < n; ++i) x[i] *= inv;
}

void swiglu_reference(float* gate, const float* up, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) gate[i] = gate[i] / (1.0F + std::exp(-gate[i])) * up[i];
}

void to_f16_reference(const float* x, std::uint16_t* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = fp32_to_fp16(x[i]);
}

std::size_t argmax_reference(const float* x, std::size_t n) {
  return static_cast<std::size_t>(std::max_element(x, x + n) - x);
}

const VecOps& scalar_vec_ops() { return kScalar; }

const VecOps& vec_ops(IsaLevel level) {
  if (level >= IsaLevel::avx512) return avx512_vec_ops();
  if (level >= IsaLevel::avx2) return avx2_vec_ops();
  return kScalar;
}

}  // namespace infercast
