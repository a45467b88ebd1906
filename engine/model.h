#pragma once
// A llama-family model read from a GGUF file: its architecture parameters and views of its
// weights inside the mapping (nothing is copied). Covers llama, mistral and mixtral (GGUF
// architecture "llama", experts when llama.expert_count is set) and qwen2.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/gguf.h"
#include "kernels/gemm.h"

namespace infercast {

enum class RopeStyle {
  interleaved,  // rotate pairs (2i, 2i+1): llama, mistral, mixtral
  neox,         // rotate pairs (i, i + d/2): qwen2
};

// The largest attention head a model may have (the engine keeps a head's row on the stack).
inline constexpr int kMaxHeadDim = 1024;

struct ModelConfig {
  std::string architecture;
  int layers = 0;
  int dim = 0;          // hidden size
  int ffn = 0;          // feed-forward size (per expert for MoE)
  int heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int vocab = 0;
  int experts = 0;          // 0: dense
  int active_experts = 0;
  int context = 0;
  float norm_eps = 1e-5F;
  float rope_base = 10000.0F;
  RopeStyle rope = RopeStyle::interleaved;

  [[nodiscard]] int q_dim() const { return heads * head_dim; }
  [[nodiscard]] int kv_dim() const { return kv_heads * head_dim; }
  [[nodiscard]] bool is_moe() const { return experts > 0; }
};

// Reads and checks the architecture keys; throws UsageError naming the missing or bad key.
ModelConfig read_model_config(const GgufFile& file);

struct LayerWeights {
  const float* attn_norm = nullptr;
  WeightView wq, wk, wv, wo;
  const float* bq = nullptr;  // qwen2's attention biases, null when absent
  const float* bk = nullptr;
  const float* bv = nullptr;
  const float* ffn_norm = nullptr;
  // Dense FFN.
  WeightView gate, up, down;
  // MoE: the router and every expert's matrices stacked (expert e is rows [e*R, (e+1)*R)).
  WeightView router;
  WeightView gate_exps, up_exps, down_exps;
};

class Model {
 public:
  // Opens and checks the file: every tensor present with the shape the config implies.
  // Without a loading mode: copied into huge pages when the file fits in the available memory
  // with a quarter to spare, else mapped. Copied matrices are then rewritten in place into the
  // layout the kernels of `kernels` (default: the active level) read fastest; mapped ones keep
  // the file's layout, which every level reads too.
  static Model load(const std::string& path, std::optional<WeightLoading> loading = std::nullopt,
                    std::optional<IsaLevel> kernels = std::nullopt);
  static Model from(GgufFile file);

  [[nodiscard]] const ModelConfig& config() const { return config_; }
  [[nodiscard]] const GgufFile& file() const { return file_; }
  [[nodiscard]] const std::vector<LayerWeights>& layers() const { return layers_; }
  [[nodiscard]] const GgufTensorInfo& embedding() const { return *embedding_; }
  [[nodiscard]] const float* output_norm() const { return output_norm_; }
  [[nodiscard]] const WeightView& output() const { return output_; }
  // Bytes of all weights, and of those one token reads (MoE: only the active experts).
  [[nodiscard]] std::uint64_t weight_bytes() const { return weight_bytes_; }
  [[nodiscard]] std::uint64_t active_weight_bytes_per_token() const;
  [[nodiscard]] std::uint64_t parameters() const { return parameters_; }
  // How many matrices were rewritten at load into another layout than the file's.
  [[nodiscard]] std::size_t relaid_matrices() const { return relaid_; }
  // Token embedding row `token` as floats; reads the output head when the two are tied and
  // the head was rewritten.
  void embedding_row(int token, float* out) const;

 private:
  explicit Model(GgufFile file) : file_(std::move(file)) {}
  void relayout_for(IsaLevel level);
  GgufFile file_;
  ModelConfig config_;
  std::vector<LayerWeights> layers_;
  const GgufTensorInfo* embedding_ = nullptr;
  const float* output_norm_ = nullptr;
  WeightView output_;
  std::uint64_t weight_bytes_ = 0;
  std::uint64_t parameters_ = 0;
  std::size_t relaid_ = 0;
};

// Expert e's slice of a stacked expert matrix.
WeightView expert_slice(const WeightView& stacked, int experts, int e);


}  // namespace infercast
