// The scalar reference kernels: activations quantized by the reference quantizers, each output
// the reference dot product. Slow on purpose: plain code every SIMD path is checked against.
#include <algorithm>
#include <array>

#include "kernels/formats.h"
#include "kernels/gemm_kernels.h"
#include "kernels/interleave.h"

namespace infercast {
namespace {

std::size_t act_row_bytes(GgmlType weight_type, std::size_t cols) {
  const auto& f = format_info(weight_type);
  if (f.activation == GgmlType::f32) return 0;
  return round_up(format_info(f.activation).row_bytes(cols), 64);
}

template <GgmlType T>
std::size_t packed_bytes(std::size_t batch, std::size_t cols) {
  return batch * act_row_bytes(T, cols);
}

template <GgmlType T>
void pack(const GemmCall& c, std::size_t begin, std::size_t end) {
  const auto& act = format_info(format_info(T).activation);
  const std::size_t stride = act_row_bytes(T, c.cols);
  for (std::size_t b = begin; b < end; ++b) act.quantize(c.x + b * c.ldx, c.packed + b * stride, c.cols);
}

template <GgmlType T>
void rows(const GemmCall& c, std::size_t begin, std::size_t end, std::uint8_t*) {
  const auto& f = format_info(T);
  const std::size_t stride = act_row_bytes(T, c.cols);
  for (std::size_t r = begin; r < end; ++r) {
    const std::uint8_t* w = c.w + r * c.row_bytes;
    for (std::size_t b = 0; b < c.batch; ++b) {
      const void* x = stride == 0 ? static_cast<const void*>(c.x + b * c.ldx) : c.packed + b * stride;
      c.y[b * c.ldy + r] = f.dot(w, x, c.cols);
    }
  }
}

// The interleaved layout: each group of eight rows decoded back to its GGUF bytes once, then
// the reference dot of every row.
template <GgmlType T>
void rows_x8(const GemmCall& c, std::size_t begin, std::size_t end, std::uint8_t* scratch) {
  const auto& f = format_info(T);
  const std::size_t stride = act_row_bytes(T, c.cols);
  for (std::size_t r0 = begin; r0 < end; r0 += kInterleave) {
    const std::size_t n = std::min<std::size_t>(kInterleave, end - r0);
    copy_gguf_rows(T, c.w, c.rows, c.cols, c.row_bytes, r0, n, scratch);
    for (std::size_t i = 0; i < n; ++i) {
      for (std::size_t b = 0; b < c.batch; ++b) {
        c.y[b * c.ldy + r0 + i] = f.dot(scratch + i * c.row_bytes, c.packed + b * stride, c.cols);
      }
    }
  }
}

template <GgmlType T>
std::size_t group_scratch(std::size_t cols) {
  return kInterleave * format_info(T).row_bytes(cols);
}

template <GgmlType T>
constexpr GemmKernel kernel() {
  return GemmKernel{"scalar", T, packed_bytes<T>, pack<T>, 1, rows<T>, 1, nullptr};
}

template <GgmlType T>
constexpr GemmKernel x8_kernel() {
  return GemmKernel{"scalar_x8", T, packed_bytes<T>, pack<T>, 1, rows_x8<T>, kInterleave, group_scratch<T>};
}

constexpr std::array kKernels = {
    kernel<GgmlType::f32>(),  kernel<GgmlType::f16>(),  kernel<GgmlType::bf16>(), kernel<GgmlType::q8_0>(),
    kernel<GgmlType::q4_0>(), kernel<GgmlType::q5_0>(), kernel<GgmlType::q4_k>(), kernel<GgmlType::q5_k>(),
    kernel<GgmlType::q6_k>(),
};

constexpr std::array kX8Kernels = {
    x8_kernel<GgmlType::q8_0>(), x8_kernel<GgmlType::q4_0>(), x8_kernel<GgmlType::q5_0>(),
    x8_kernel<GgmlType::q4_k>(), x8_kernel<GgmlType::q5_k>(), x8_kernel<GgmlType::q6_k>(),
};

template <std::size_t N>
const GemmKernel* find(const std::array<GemmKernel, N>& table, GgmlType type) {
  for (const auto& k : table) {
    if (k.type == type) return &k;
  }
  return nullptr;
}

}  // namespace

const GemmKernel* scalar_gemm_kernel(GgmlType type) { return find(kKernels, type); }
const GemmKernel* scalar_x8_gemm_kernel(GgmlType type) { return find(kX8Kernels, type); }

}  // namespace infercast
