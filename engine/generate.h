#pragma once
// Synthetic llama-family models: a valid GGUF with deterministic random weights at a real
// model's shape (from a preset or explicit dimensions), in any weight format or mixed recipe,
// with the metadata and a small SentencePiece vocabulary other GGUF tools need to load it.
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

namespace infercast {

struct ModelShape {
  std::string architecture = "llama";
  int layers = 0;
  int dim = 0;
  int ffn = 0;
  int heads = 0;
  int kv_heads = 0;
  int vocab = 0;
  int experts = 0;
  int active_experts = 0;
  int context = 4096;
  float rope_base = 10000.0F;
  float norm_eps = 1e-5F;
  bool tied_embeddings = false;  // no output.weight: the embedding doubles as the output head
  bool qkv_bias = false;         // qwen2's attention biases
};

struct ModelPreset {
  std::string_view name;
  std::string_view description;
  ModelShape shape;
};

// A llama-architecture shape with the defaults of ModelShape for everything else.
ModelShape llama_shape(int layers, int dim, int ffn, int heads, int kv_heads, int vocab, int context = 4096);

std::span<const ModelPreset> model_presets();
const ModelPreset* find_preset(std::string_view name);  // case-insensitive
std::string preset_names();

// Parameters of a shape, counted the way the file will hold them.
std::uint64_t parameter_count(const ModelShape& shape);

struct GenerateOptions {
  ModelShape shape;
  std::string quant = "Q4_0";  // a weight format (F16, Q8_0, ...) or a recipe (Q4_K_M, Q5_K_M)
  std::uint64_t seed = 1;
  std::string name = "infercast synthetic";
  unsigned threads = 1;
};

struct GenerateResult {
  std::uint64_t parameters = 0;
  std::uint64_t file_bytes = 0;
};

// Checks the shape and the quantization (UsageError with the reason) without writing anything.
void validate(const GenerateOptions& options);

// Writes the model atomically to `path`. `progress` (may be empty) gets the fraction done.
GenerateResult generate_model(const GenerateOptions& options, const std::string& path,
                              const std::function<void(double)>& progress = {});

}  // namespace infercast
