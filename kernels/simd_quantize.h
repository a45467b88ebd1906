#pragma once
// SIMD activation quantizers, one per ISA variant, byte-identical to the reference ones (tests
// hold them to that): the GEMM front quantizes every activation row once per call, and at batch
// 64 a scalar quantizer would cost as much as the product itself.
#include <cstddef>

#include "kernels/blocks.h"

namespace infercast {

struct ActivationQuantizers {
  void (*q8_0)(const float* x, BlockQ8_0* y, std::size_t count);
  void (*q8_k)(const float* x, BlockQ8_K* y, std::size_t count);
};

const ActivationQuantizers& avx2_activation_quantizers();
const ActivationQuantizers& avx512_activation_quantizers();

}  // namespace infercast
