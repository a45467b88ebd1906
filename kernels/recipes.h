#pragma once
// Mixed-precision recipes (llama.cpp's Q4_K_M, Q5_K_M) as data: which tensors of a model get
// which type. The model generator writes files with them and the forecast sizes models by them.
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "kernels/blocks.h"

namespace infercast {

// Which layers a rule covers.
enum class LayerSelector {
  all,
  // llama.cpp's "use more bits" layers: the first and last eighth, and every third in between.
  more_bits,
};

struct RecipeRule {
  std::string_view tensor;  // the GGUF tensor name without its "blk.N." prefix, matched whole
  LayerSelector layers;
  GgmlType type;
};

struct Recipe {
  std::string_view name;
  GgmlType base;                     // every 2-D weight no rule names
  std::span<const RecipeRule> rules;  // first match wins
};

std::span<const Recipe> recipes();
const Recipe* find_recipe(std::string_view name);  // case-insensitive

// The type a tensor gets under a recipe. `layer` is the block index (ignored for tensors outside
// the blocks), `layers` the block count. 1-D tensors (norms) are always F32.
GgmlType recipe_type(const Recipe& recipe, std::string_view tensor_name, bool is_matrix, int layer, int layers);

bool uses_more_bits(int layer, int layers);

// What a --quant option names: one format for every matrix, or a recipe.
struct Quantization {
  std::optional<GgmlType> format;
  const Recipe* recipe = nullptr;
  std::uint32_t file_type = 0;  // llama.cpp's general.file_type
};
// Throws UsageError for a name that is neither a weight format nor a recipe.
Quantization parse_quantization(std::string_view name);

// The type a weight matrix gets. Rows whose length the chosen format's block does not divide
// fall back to Q8_0, then F16 (llama.cpp falls back too, e.g. for Qwen's 896-wide rows under
// K-quants).
GgmlType matrix_type(const Quantization& q, std::string_view tensor_name, int layer, int layers, std::uint64_t cols);

}  // namespace infercast
