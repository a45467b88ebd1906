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
};

const VecOps& vec_ops(IsaLevel level);

// Per-ISA tables (internal; each in its own translation unit).
const VecOps& scalar_vec_ops();
const VecOps& avx2_vec_ops();
const VecOps& avx512_vec_ops();

}  // namespace infercast
