#include "kernels/recipes.h"

#include <algorithm>
#include <array>

#include <fmt/format.h>

#include "kernels/formats.h"
#include "probes/error.h"
#include "probes/units.h"

namespace infercast {
namespace {

// llama.cpp's choices for llama-family models, first match first. Both recipes keep the output
// head and the value and down projections of the sensitive layers at Q6_K (the down rule covers
// the experts' and shared experts' down projections too). A model of exactly eight experts gets
// its keys and values at Q8_0 and its attention output at Q5_K; an 80-block model the rest of
// its values at Q5_K. The two Q5_K rules are llama.cpp's for Q4_K_M; under Q5_K_M they give the
// base type, as llama.cpp's quantizer does. With these the inventories of Llama 3.1 70B and
// Mixtral 8x22B come within 0.015 GB of llama.cpp's files.
constexpr std::array kMediumRules = {
    RecipeRule{"output.weight", LayerSelector::all, GgmlType::q6_k},
    RecipeRule{"attn_v.weight", LayerSelector::eight_experts, GgmlType::q8_0},
    RecipeRule{"attn_k.weight", LayerSelector::eight_experts, GgmlType::q8_0},
    RecipeRule{"attn_output.weight", LayerSelector::eight_experts, GgmlType::q5_k},
    RecipeRule{"attn_v.weight", LayerSelector::more_bits, GgmlType::q6_k},
    RecipeRule{"attn_v.weight", LayerSelector::eighty_blocks, GgmlType::q5_k},
    RecipeRule{"ffn_down.weight", LayerSelector::more_bits, GgmlType::q6_k},
    RecipeRule{"ffn_down_exps.weight", LayerSelector::more_bits, GgmlType::q6_k},
    RecipeRule{"ffn_down_shexp.weight", LayerSelector::more_bits, GgmlType::q6_k},
};

const std::array kRecipes = {
    Recipe{"Q4_K_M", GgmlType::q4_k, kMediumRules},
    Recipe{"Q5_K_M", GgmlType::q5_k, kMediumRules},
};

// "blk.12.attn_v.weight" -> "attn_v.weight"; names outside the blocks are returned whole. Rules
// compare whole names: a suffix match let "output.weight" claim every "blk.N.attn_output.weight".
std::string_view name_in_block(std::string_view name) {
  constexpr std::string_view prefix = "blk.";
  if (name.substr(0, prefix.size()) != prefix) return name;
  const std::size_t dot = name.find('.', prefix.size());
  if (dot == std::string_view::npos || dot == prefix.size()) return name;
  for (std::size_t i = prefix.size(); i < dot; ++i) {
    if (name[i] < '0' || name[i] > '9') return name;
  }
  return name.substr(dot + 1);
}

bool covers(LayerSelector selector, int layer, RecipeModel model) {
  switch (selector) {
    case LayerSelector::all: return true;
    case LayerSelector::more_bits: return uses_more_bits(layer, model.layers);
    case LayerSelector::eight_experts: return model.experts == 8;
    case LayerSelector::eighty_blocks: return model.layers == 80;
  }
  return false;
}

}  // namespace

bool uses_more_bits(int layer, int layers) {
  return layer < layers / 8 || layer >= 7 * layers / 8 || (layer - layers / 8) % 3 == 2;
}

std::span<const Recipe> recipes() { return kRecipes; }

const Recipe* find_recipe(std::string_view name) {
  for (const auto& r : kRecipes) {
    if (iequals(r.name, name)) {
      return &r;
    }
  }
  return nullptr;
}

GgmlType recipe_type(const Recipe& recipe, std::string_view tensor_name, bool is_matrix, int layer, RecipeModel model) {
  if (!is_matrix) return GgmlType::f32;
  const std::string_view name = name_in_block(tensor_name);
  for (const auto& rule : recipe.rules) {
    if (name != rule.tensor) continue;
    if (covers(rule.layers, layer, model)) return rule.type;
  }
  return recipe.base;
}

Quantization parse_quantization(std::string_view name) {
  Quantization q;
  if ((q.recipe = find_recipe(name)) != nullptr) {
    q.file_type = q.recipe->base == GgmlType::q4_k ? 15 : 17;
    return q;
  }
  q.format = parse_format(name);
  if (!q.format || *q.format == GgmlType::q8_k) {
    throw UsageError(fmt::format("unknown quantization '{}' (formats: {}; recipes: Q4_K_M, Q5_K_M)", name, weight_format_names()));
  }
  switch (*q.format) {
    case GgmlType::f32: q.file_type = 0; break;
    case GgmlType::f16: q.file_type = 1; break;
    case GgmlType::q4_0: q.file_type = 2; break;
    case GgmlType::q8_0: q.file_type = 7; break;
    case GgmlType::q4_k: q.file_type = 14; break;
    case GgmlType::q5_k: q.file_type = 16; break;
    case GgmlType::q6_k: q.file_type = 18; break;
    case GgmlType::bf16: q.file_type = 32; break;
    default: break;
  }
  return q;
}

GgmlType matrix_type(const Quantization& q, std::string_view tensor_name, int layer, RecipeModel model, std::uint64_t cols,
                     Fallback fallback) {
  GgmlType t = q.recipe != nullptr ? recipe_type(*q.recipe, tensor_name, true, layer, model) : *q.format;
  if (cols % static_cast<std::uint64_t>(format_info(t).block_elems) == 0) return t;
  if (cols % kQk == 0) {
    // llama.cpp's choices: Q4_K to Q5_0, Q5_K to Q5_1, Q6_K to Q8_0. Q5_1 has no kernels here
    // (ggml's number, no enum name): the generator takes Q8_0 instead.
    constexpr auto q5_1 = static_cast<GgmlType>(7);
    if (t == GgmlType::q4_k) return GgmlType::q5_0;
    if (t == GgmlType::q5_k && fallback == Fallback::llama_cpp) return q5_1;
    return GgmlType::q8_0;
  }
  return GgmlType::f16;
}

GgmlType embedding_type(const Quantization& q, bool tied, RecipeModel model, std::uint64_t dim, Fallback fallback) {
  return matrix_type(q, tied ? "output.weight" : "token_embd.weight", 0, model, dim, fallback);
}

}  // namespace infercast
