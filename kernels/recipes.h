#pragma once
// Mixed-precision recipes (llama.cpp's Q4_K_M, Q5_K_M) as data: which tensors of a model get
// which type. The model generator writes files with them and the forecast sizes models by them.
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
  std::string_view tensor_suffix;  // matched against the end of the GGUF tensor name
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

}  // namespace infercast
