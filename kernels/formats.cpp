#include "kernels/formats.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>

#include "kernels/quantize.h"
#include "probes/units.h"

namespace infercast {
namespace {

namespace ref = reference;

template <class Block, void (*F)(const float*, Block*, std::size_t)>
void quantize_as(const float* x, void* y, std::size_t count) {
  F(x, static_cast<Block*>(y), count);
}
template <class Block, void (*F)(const Block*, float*, std::size_t)>
void dequantize_as(const void* x, float* y, std::size_t count) {
  F(static_cast<const Block*>(x), y, count);
}
template <class W, class X, float (*F)(const W*, const X*, std::size_t)>
float dot_as(const void* w, const void* x, std::size_t count) {
  return F(static_cast<const W*>(w), static_cast<const X*>(x), count);
}

void quantize_f32(const float* x, void* y, std::size_t count) { std::copy(x, x + count, static_cast<float*>(y)); }
void dequantize_f32(const void* x, float* y, std::size_t count) {
  const auto* f = static_cast<const float*>(x);
  std::copy(f, f + count, y);
}
float dot_q8_k_unused(const void*, const void*, std::size_t) {
  throw std::logic_error("Q8_K is an activation format; it has no weight dot product");
}

const std::array kFormats = {
    FormatInfo{GgmlType::f32, "F32", 1, 4, GgmlType::f32, quantize_f32, dequantize_f32,
               dot_as<float, float, ref::dot_f32>},
    FormatInfo{GgmlType::f16, "F16", 1, 2, GgmlType::f32, quantize_as<std::uint16_t, ref::quantize_f16>,
               dequantize_as<std::uint16_t, ref::dequantize_f16>, dot_as<std::uint16_t, float, ref::dot_f16>},
    FormatInfo{GgmlType::bf16, "BF16", 1, 2, GgmlType::f32, quantize_as<std::uint16_t, ref::quantize_bf16>,
               dequantize_as<std::uint16_t, ref::dequantize_bf16>, dot_as<std::uint16_t, float, ref::dot_bf16>},
    FormatInfo{GgmlType::q8_0, "Q8_0", kQk, sizeof(BlockQ8_0), GgmlType::q8_0,
               quantize_as<BlockQ8_0, ref::quantize_q8_0>, dequantize_as<BlockQ8_0, ref::dequantize_q8_0>,
               dot_as<BlockQ8_0, BlockQ8_0, ref::dot_q8_0>},
    FormatInfo{GgmlType::q4_0, "Q4_0", kQk, sizeof(BlockQ4_0), GgmlType::q8_0,
               quantize_as<BlockQ4_0, ref::quantize_q4_0>, dequantize_as<BlockQ4_0, ref::dequantize_q4_0>,
               dot_as<BlockQ4_0, BlockQ8_0, ref::dot_q4_0>},
    FormatInfo{GgmlType::q5_0, "Q5_0", kQk, sizeof(BlockQ5_0), GgmlType::q8_0,
               quantize_as<BlockQ5_0, ref::quantize_q5_0>, dequantize_as<BlockQ5_0, ref::dequantize_q5_0>,
               dot_as<BlockQ5_0, BlockQ8_0, ref::dot_q5_0>},
    FormatInfo{GgmlType::q4_k, "Q4_K", kQkK, sizeof(BlockQ4_K), GgmlType::q8_k,
               quantize_as<BlockQ4_K, ref::quantize_q4_k>, dequantize_as<BlockQ4_K, ref::dequantize_q4_k>,
               dot_as<BlockQ4_K, BlockQ8_K, ref::dot_q4_k>},
    FormatInfo{GgmlType::q5_k, "Q5_K", kQkK, sizeof(BlockQ5_K), GgmlType::q8_k,
               quantize_as<BlockQ5_K, ref::quantize_q5_k>, dequantize_as<BlockQ5_K, ref::dequantize_q5_k>,
               dot_as<BlockQ5_K, BlockQ8_K, ref::dot_q5_k>},
    FormatInfo{GgmlType::q6_k, "Q6_K", kQkK, sizeof(BlockQ6_K), GgmlType::q8_k,
               quantize_as<BlockQ6_K, ref::quantize_q6_k>, dequantize_as<BlockQ6_K, ref::dequantize_q6_k>,
               dot_as<BlockQ6_K, BlockQ8_K, ref::dot_q6_k>},
    FormatInfo{GgmlType::q8_k, "Q8_K", kQkK, sizeof(BlockQ8_K), GgmlType::q8_k,
               quantize_as<BlockQ8_K, ref::quantize_q8_k>, dequantize_as<BlockQ8_K, ref::dequantize_q8_k>,
               dot_q8_k_unused},
};

constexpr std::array kWeightFormats = {GgmlType::f32,  GgmlType::f16,  GgmlType::bf16, GgmlType::q8_0, GgmlType::q4_0,
                                       GgmlType::q5_0, GgmlType::q4_k, GgmlType::q5_k, GgmlType::q6_k};

}  // namespace

const FormatInfo& format_info(GgmlType type) {
  for (const auto& f : kFormats) {
    if (f.type == type) return f;
  }
  throw std::invalid_argument("unsupported tensor type " + std::to_string(static_cast<unsigned>(type)));
}

std::optional<GgmlType> parse_format(std::string_view name) {
  for (const auto& f : kFormats) {
    if (iequals(f.name, name)) return f.type;
  }
  return std::nullopt;
}

bool is_known_type(std::uint32_t raw_type) {
  return std::any_of(kFormats.begin(), kFormats.end(),
                     [&](const FormatInfo& f) { return static_cast<std::uint32_t>(f.type) == raw_type; });
}

std::span<const GgmlType> weight_formats() { return kWeightFormats; }

std::string weight_format_names() {
  std::string names;
  for (auto t : kWeightFormats) {
    if (!names.empty()) names += ", ";
    names += format_info(t).name;
  }
  return names;
}

std::optional<GgmlType> nearest_format(int block_elems, double bits, std::span<const GgmlType> candidates) {
  std::optional<GgmlType> best;
  double best_gap = 0;
  double best_bits = 0;
  for (const GgmlType t : candidates) {
    const FormatInfo& f = format_info(t);
    if (f.block_elems != block_elems) continue;
    const double gap = std::abs(f.bits_per_weight() - bits);
    if (!best || gap < best_gap || (gap == best_gap && f.bits_per_weight() < best_bits)) {
      best = t;
      best_gap = gap;
      best_bits = f.bits_per_weight();
    }
  }
  return best;
}

}  // namespace infercast
