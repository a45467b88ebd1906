#pragma once
// One table row per tensor type: its block geometry, the activation format its dot product
// takes, and the reference {quantize, dequantize, dot} functions. Everything that needs to know
// "how big is a Q4_K row" or "how do I turn it back into floats" asks here.
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "kernels/blocks.h"

namespace infercast {

struct FormatInfo {
  GgmlType type;
  std::string_view name;        // GGUF/llama.cpp spelling, e.g. "Q4_K"
  int block_elems;              // elements per block (1 for the float formats)
  std::size_t block_bytes;      // bytes per block
  GgmlType activation;          // what the dot product quantizes activations to (f32: none)
  void (*quantize)(const float* x, void* y, std::size_t count);
  void (*dequantize)(const void* x, float* y, std::size_t count);
  // Reference dot product of a weight row with an activation row already in `activation` format.
  float (*dot)(const void* w, const void* x, std::size_t count);

  [[nodiscard]] double bits_per_weight() const {
    return 8.0 * static_cast<double>(block_bytes) / block_elems;
  }
  [[nodiscard]] std::size_t row_bytes(std::size_t cols) const {
    return cols / static_cast<std::size_t>(block_elems) * block_bytes;
  }
};

const FormatInfo& format_info(GgmlType type);
// Case-insensitive lookup by name; nullopt for an unknown or unsupported name.
std::optional<GgmlType> parse_format(std::string_view name);
bool is_known_type(std::uint32_t raw_type);

// The weight formats the kernels implement, in the order reports list them.
std::span<const GgmlType> weight_formats();
// "F32, F16, ..." for error messages.
std::string weight_format_names();
// Of `candidates`, the format with `block_elems` elements per block whose bits per weight are
// nearest `bits`, the lower of two as near; nullopt where none has that block length. What
// stands in for a format where its own kernels or measurements are missing.
std::optional<GgmlType> nearest_format(int block_elems, double bits, std::span<const GgmlType> candidates);

}  // namespace infercast
