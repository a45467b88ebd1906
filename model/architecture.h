#pragma once
// A model's shape for the forecast, from the catalog (model/catalog/models/*.json) or from a
// GGUF file's metadata, and its weight inventory: every matrix with its shape and the type a
// quantization gives it, so sizes come from the block layouts rather than from typed-in
// bits-per-weight figures.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/gguf.h"
#include "kernels/blocks.h"
#include "kernels/recipes.h"

namespace infercast {

struct MoeShape {
  int experts = 0;         // routed experts per MoE layer; 0 for a dense model
  int active = 0;          // routed experts per token
  int expert_ffn = 0;      // feed-forward size of one expert
  int shared_experts = 0;  // always-on experts (DeepSeek)
  int dense_layers = 0;    // leading layers with a dense FFN instead (DeepSeek: 3)
};

// Multi-head latent attention (DeepSeek-V2/V3): the KV cache holds one compressed latent and
// one shared RoPE key per token instead of per-head keys and values.
struct MlaShape {
  int q_lora_rank = 0;
  int kv_lora_rank = 0;
  int qk_nope_head_dim = 0;
  int qk_rope_head_dim = 0;
  int v_head_dim = 0;
};

struct Architecture {
  std::string name;
  std::string display;
  std::string family;  // llama, qwen2, phi3, deepseek2, qwen3moe, ...
  std::string source;  // where the figures come from
  int layers = 0;
  int dim = 0;
  int ffn = 0;  // dense FFN size
  int heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int vocab = 0;
  int context = 0;
  bool tied_embeddings = false;
  bool qkv_bias = false;
  MoeShape moe;
  std::optional<MlaShape> mla;
  std::optional<double> published_parameters;
  std::optional<double> published_active_parameters;

  [[nodiscard]] bool is_moe() const { return moe.experts > 0; }
  [[nodiscard]] bool is_moe_layer(int layer) const { return is_moe() && layer >= moe.dense_layers; }
  [[nodiscard]] int moe_layer_count() const { return is_moe() ? std::max(0, layers - std::max(0, moe.dense_layers)) : 0; }
};

// Throws UsageError naming the field and the origin when a field is missing or out of range.
Architecture architecture_from_json(const nlohmann::json& j, const std::string& origin);
std::vector<Architecture> catalog_models();
// Case-insensitive; nullopt for a name not in the catalog.
std::optional<Architecture> find_catalog_model(std::string_view name);
std::string catalog_model_names();
// From a GGUF file's metadata (llama, mistral, qwen2, mixtral-style MoE).
Architecture architecture_from_gguf(const GgufFile& file, const std::string& name);

enum class MatrixRole { attention, ffn, expert, shared_expert, router, output };

struct MatrixInfo {
  std::string name;        // GGUF tensor name
  std::uint64_t rows = 0;  // output features (of one expert)
  std::uint64_t cols = 0;  // input features
  int copies = 1;          // experts stacked in the tensor
  int layer = -1;          // -1 outside the blocks
  MatrixRole role = MatrixRole::attention;
  GgmlType type = GgmlType::f32;

  // The format whose measured kernels (speed, accuracy) stand in for `type`: `type` itself, or
  // for a type a GGUF file may hold but infercast has no kernels for, see stand_in_format.
  [[nodiscard]] GgmlType kernel_type() const;
  [[nodiscard]] std::uint64_t bytes_per_copy() const;
  [[nodiscard]] std::uint64_t bytes() const { return bytes_per_copy() * static_cast<std::uint64_t>(copies); }
  [[nodiscard]] std::uint64_t parameters() const { return rows * cols * static_cast<std::uint64_t>(copies); }
};

// For a ggml type without kernels here (a llama.cpp file's Q4_1, Q5_1, Q3_K, IQ4_XS,
// ...), the weight format with the same block length and the nearest bits per weight (the
// lower of two as near): its decode loop is the nearest in shape and work per byte. Its
// measured speed per byte and its accuracy then stand in; the type's own bytes are still
// counted. Returns `type` itself for a weight format with kernels, nullopt for a type ggml does
// not define.
std::optional<GgmlType> stand_in_format(GgmlType type);

// Every weight of a model under one quantization.
struct WeightInventory {
  std::vector<MatrixInfo> matrices;
  std::uint64_t embedding_bytes = 0;        // token_embd: rows are looked up, not multiplied
  std::uint64_t embedding_parameters = 0;
  std::uint64_t vector_bytes = 0;           // norms and biases (F32)
  std::uint64_t vector_parameters = 0;

  [[nodiscard]] std::uint64_t total_bytes() const;
  [[nodiscard]] std::uint64_t total_parameters() const;
  // Parameters one token multiplies (MoE: the active and shared experts only), without the
  // embedding table.
  [[nodiscard]] std::uint64_t active_matrix_parameters(const Architecture& a) const;
  // Weight bytes one step over `batch` tokens reads: every dense matrix once, each MoE layer's
  // experts as many as the batch is expected to touch (see expected_experts_touched).
  [[nodiscard]] double step_weight_bytes(const Architecture& a, double batch) const;
  // Bits per weight over the whole file.
  [[nodiscard]] double bits_per_weight() const;

  // The matrices' types without kernels here, each with its stand-in and share of the matrix
  // parameters; empty for a file of computable formats.
  struct StandIn {
    GgmlType type;
    GgmlType measured_as;
    double parameter_share;
  };
  // `measured_as` maps a format with kernels to the one whose measurements stand for it (a
  // calibration from before its kernels; see Calibration::measured_as); the identity if null.
  [[nodiscard]] std::vector<StandIn> stand_ins(const std::function<GgmlType(GgmlType)>& measured_as = nullptr) const;
};

// Whether the engine multiplies this matrix in the product call of the one before it, which
// shares its input (K and V with Q, up with gate, the experts' up with their gate), paying no
// call of its own.
bool shares_product_call(const MatrixInfo& m);

// Expected distinct experts that `batch` tokens route to when each picks `active` of `experts`
// without preference: E * (1 - (1 - k/E)^B). Real routers are skewed, so this is an upper bound
// on the spread (and so on the bytes) for a batch.
double expected_experts_touched(int experts, int active, double batch);

WeightInventory weight_inventory(const Architecture& a, const Quantization& quant);
// The file's own tensors and types.
WeightInventory weight_inventory(const GgufFile& file, const Architecture& a);

// KV cache bytes per token of one sequence (all layers), with `element_bytes` per value.
std::uint64_t kv_bytes_per_token(const Architecture& a, std::uint64_t element_bytes);
// Attention operations per generated token that attends to `context` earlier positions.
double attention_ops_per_token(const Architecture& a, double context);

}  // namespace infercast
