#pragma once
// Mixed-precision recipes (llama.cpp's Q4_K_M, Q5_K_M) as data: which tensors of a model get
// which type. The model generator writes files with them and the forecast sizes models by them.
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "kernels/blocks.h"

namespace infercast {

// Which tensors of the named kind a rule covers.
enum class LayerSelector {
  all,
  // llama.cpp's "use more bits" layers: the first and last eighth, and every third in between.
  more_bits,
  // Every block of a model with exactly eight experts (Mixtral's shape, which llama.cpp's
  // quantizer singles out).
  eight_experts,
  // Every block of an 80-block model (llama.cpp's "70B" type: Llama 2 and 3.1 70B, Qwen2.5 72B).
  eighty_blocks,
};

struct RecipeRule {
  std::string_view tensor;  // the GGUF tensor name without its "blk.N." prefix, matched whole
  LayerSelector layers;
  GgmlType type;
};

// What a recipe needs to know of the model besides a tensor's name.
struct RecipeModel {
  int layers = 0;   // blocks
  int experts = 0;  // 0 for a dense model
};

struct Recipe {
  std::string_view name;
  GgmlType base;                     // every 2-D weight no rule names
  std::span<const RecipeRule> rules;  // first match wins
};

std::span<const Recipe> recipes();
const Recipe* find_recipe(std::string_view name);  // case-insensitive

// The type a tensor gets under a recipe. `layer` is the block index (ignored for tensors outside
// the blocks). 1-D tensors (norms) are always F32.
GgmlType recipe_type(const Recipe& recipe, std::string_view tensor_name, bool is_matrix, int layer, RecipeModel model);

bool uses_more_bits(int layer, int layers);

// What a --quant option names: one format for every matrix, or a recipe.
struct Quantization {
  std::optional<GgmlType> format;
  const Recipe* recipe = nullptr;
  std::uint32_t file_type = 0;  // llama.cpp's general.file_type
};
// Throws UsageError for a name that is neither a weight format nor a recipe.
Quantization parse_quantization(std::string_view name);

// Where a matrix's rows are not a whole number of its format's blocks (Qwen's 896-wide rows and
// Qwen2.5-72B's 29568-wide down projections under K-quants), the format it falls back to.
enum class Fallback {
  // As llama.cpp's quantizer: Q4_K to Q5_0, Q5_K to Q5_1, Q6_K to Q8_0, then F16. Q5_1 has no
  // kernels here: the forecast counts its bytes and takes a stand-in's speed (stand_in_format
  // in model/architecture.h). What sizes catalog models like llama.cpp's files.
  llama_cpp,
  // The same with formats that have kernels: Q5_K to Q8_0. What the model generator writes.
  computable,
};

// The type a weight matrix gets.
GgmlType matrix_type(const Quantization& q, std::string_view tensor_name, int layer, RecipeModel model, std::uint64_t cols,
                     Fallback fallback);
// The token embedding table's type. A tied table is also the output head and takes the head's
// type, as in llama.cpp's files.
GgmlType embedding_type(const Quantization& q, bool tied, RecipeModel model, std::uint64_t dim, Fallback fallback);

}  // namespace infercast
