#pragma once
// Vector primitives for attention: dot products of a query with cached keys and accumulation of
// cached values, with the keys and values in F32 or F16. One implementation per ISA level, like
// the GEMM kernels; vec_ops(level) gives the best one at or below `level`.
#include <cstddef>
#include <cstdint>

#include "probes/cpu_features.h"

namespace infercast {

struct VecOps {
  const char* name;
  float (*dot_f32)(const float* a, const float* b, std::size_t n);
  float (*dot_f16)(const std::uint16_t* a, const float* b, std::size_t n);
  void (*axpy_f32)(float a, const float* x, float* y, std::size_t n);           // y += a * x
  void (*axpy_f16)(float a, const std::uint16_t* x, float* y, std::size_t n);   // y += a * x
  // Over `count` rows `stride` elements apart (keys or values of consecutive positions):
  // out[j] = scale * dot(row j, q), and y += sum_j w[j] * row j. One call per cache block.
  void (*dot_rows_f32)(const float* rows, std::size_t stride, std::size_t count, const float* q, std::size_t n, float scale, float* out);
  void (*dot_rows_f16)(const std::uint16_t* rows, std::size_t stride, std::size_t count, const float* q, std::size_t n, float scale, float* out);
  void (*axpy_rows_f32)(const float* w, const float* rows, std::size_t stride, std::size_t count, float* y, std::size_t n);
  void (*axpy_rows_f16)(const float* w, const std::uint16_t* rows, std::size_t stride, std::size_t count, float* y, std::size_t n);
};

// The row variants in terms of one ISA's dot and axpy (each ISA file instantiates them with its
// own inlined primitives).
template <class T, float (*Dot)(const T*, const float*, std::size_t)>
void dot_rows(const T* rows, std::size_t stride, std::size_t count, const float* q, std::size_t n, float scale, float* out) {
  for (std::size_t j = 0; j < count; ++j) out[j] = scale * Dot(rows + j * stride, q, n);
}
template <class T, void (*Axpy)(float, const T*, float*, std::size_t)>
void axpy_rows(const float* w, const T* rows, std::size_t stride, std::size_t count, float* y, std::size_t n) {
  for (std::size_t j = 0; j < count; ++j) Axpy(w[j], rows + j * stride, y, n);
}

const VecOps& vec_ops(IsaLevel level);

// Per-ISA tables (internal; each in its own translation unit).
const VecOps& scalar_vec_ops();
const VecOps& avx2_vec_ops();
const VecOps& avx512_vec_ops();

}  // namespace infercast
