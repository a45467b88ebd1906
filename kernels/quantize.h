#pragma once
// Reference quantizers, dequantizers and dot products in plain scalar code. The quantizers follow
// ggml's reference ones step for step (same search, same rounding), so a row quantized here has
// the bytes llama.cpp's quantize tool writes without an importance matrix. Every SIMD kernel is
// tested against the dot products here.
#include <cstddef>
#include <cstdint>

#include "kernels/blocks.h"

namespace infercast::reference {

// `count` must be a multiple of the block size of the format.
void quantize_q8_0(const float* x, BlockQ8_0* y, std::size_t count);
void quantize_q4_0(const float* x, BlockQ4_0* y, std::size_t count);
void quantize_q5_0(const float* x, BlockQ5_0* y, std::size_t count);
void quantize_q4_k(const float* x, BlockQ4_K* y, std::size_t count);
void quantize_q5_k(const float* x, BlockQ5_K* y, std::size_t count);
void quantize_q6_k(const float* x, BlockQ6_K* y, std::size_t count);
void quantize_q8_k(const float* x, BlockQ8_K* y, std::size_t count);
void quantize_f16(const float* x, std::uint16_t* y, std::size_t count);
void quantize_bf16(const float* x, std::uint16_t* y, std::size_t count);

void dequantize_q8_0(const BlockQ8_0* x, float* y, std::size_t count);
void dequantize_q4_0(const BlockQ4_0* x, float* y, std::size_t count);
void dequantize_q5_0(const BlockQ5_0* x, float* y, std::size_t count);
void dequantize_q4_k(const BlockQ4_K* x, float* y, std::size_t count);
void dequantize_q5_k(const BlockQ5_K* x, float* y, std::size_t count);
void dequantize_q6_k(const BlockQ6_K* x, float* y, std::size_t count);
void dequantize_q8_k(const BlockQ8_K* x, float* y, std::size_t count);
void dequantize_f16(const std::uint16_t* x, float* y, std::size_t count);
void dequantize_bf16(const std::uint16_t* x, float* y, std::size_t count);

// Dot products of one weight row with one activation row in the weight format's activation
// format (Q8_0 for Q8_0/Q4_0, Q8_K for the K-quants, F32 for the float formats).
float dot_q8_0(const BlockQ8_0* w, const BlockQ8_0* x, std::size_t count);
float dot_q4_0(const BlockQ4_0* w, const BlockQ8_0* x, std::size_t count);
float dot_q5_0(const BlockQ5_0* w, const BlockQ8_0* x, std::size_t count);
float dot_q4_k(const BlockQ4_K* w, const BlockQ8_K* x, std::size_t count);
float dot_q5_k(const BlockQ5_K* w, const BlockQ8_K* x, std::size_t count);
float dot_q6_k(const BlockQ6_K* w, const BlockQ8_K* x, std::size_t count);
float dot_f32(const float* w, const float* x, std::size_t count);
float dot_f16(const std::uint16_t* w, const float* x, std::size_t count);
float dot_bf16(const std::uint16_t* w, const float* x, std::size_t count);

// ggml's round-half-away trick for |x| < 2^22, kept bit-exact: it rounds to nearest even.
int nearest_int(float x);

}  // namespace infercast::reference
