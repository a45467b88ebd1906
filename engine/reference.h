#pragma once
// The F32 reference forward pass: plain scalar code, weights dequantized row by row, an F32 KV
// cache, double-precision sums. Slow by design; the tests hold the optimized engine to it.
#include <span>
#include <vector>

#include "engine/model.h"

namespace infercast {

enum class ReferenceMath {
  // Weights dequantized to F32, activations in F32: the model's ideal.
  exact,
  // Activations quantized per matrix the way the format's dot product defines it (Q8_0 or Q8_K
  // for the quantized formats, as ggml does), dot products by the scalar reference kernels: the
  // arithmetic the optimized kernels must reproduce up to summation order.
  as_kernels,
};

// Logits (vocab floats per token) for every position of `tokens`, run from position 0.
std::vector<float> reference_logits(const Model& model, std::span<const int> tokens,
                                    ReferenceMath math = ReferenceMath::exact);

}  // namespace infercast
