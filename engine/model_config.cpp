// Reading a llama-family model's shape from GGUF metadata: its own translation unit, so the
// forecast's parsers (and their fuzz target) use it without the engine's kernels.
#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "engine/model.h"
#include "probes/error.h"

namespace infercast {
namespace {

int positive_int(const GgufFile& f, const std::string& key, std::uint64_t limit) {
  const std::uint64_t v = f.get_uint(key);
  if (v == 0 || v > limit) throw UsageError(fmt::format("metadata '{}' = {} is out of range (1..{})", key, v, limit));
  return static_cast<int>(v);
}

}  // namespace

ModelConfig read_model_config(const GgufFile& f) {
  ModelConfig c;
  c.architecture = f.get_string("general.architecture");
  const std::string& a = c.architecture;
  if (a != "llama" && a != "mistral" && a != "qwen2") {
    throw UsageError(fmt::format("architecture '{}' is not supported (llama, mistral, mixtral as llama, qwen2)", a));
  }
  constexpr std::uint64_t kBig = 1 << 20;
  c.layers = positive_int(f, a + ".block_count", 4096);
  c.dim = positive_int(f, a + ".embedding_length", kBig);
  c.ffn = positive_int(f, a + ".feed_forward_length", kBig);
  c.heads = positive_int(f, a + ".attention.head_count", 4096);
  c.kv_heads = f.find(a + ".attention.head_count_kv") != nullptr ? positive_int(f, a + ".attention.head_count_kv", 4096) : c.heads;
  c.context = static_cast<int>(std::min<std::uint64_t>(f.get_uint_or(a + ".context_length", 4096), kBig));
  c.norm_eps = static_cast<float>(f.get_real_or(a + ".attention.layer_norm_rms_epsilon", 1e-5));
  c.rope_base = static_cast<float>(f.get_real_or(a + ".rope.freq_base", 10000.0));
  c.experts = static_cast<int>(std::min<std::uint64_t>(f.get_uint_or(a + ".expert_count", 0), 4096));
  c.active_experts = static_cast<int>(std::min<std::uint64_t>(f.get_uint_or(a + ".expert_used_count", 0), 4096));
  c.rope = a == "qwen2" ? RopeStyle::neox : RopeStyle::interleaved;
  if (c.dim % c.heads != 0) throw UsageError(fmt::format("embedding length {} is not a multiple of {} heads", c.dim, c.heads));
  c.head_dim = static_cast<int>(f.get_uint_or(a + ".attention.key_length", static_cast<std::uint64_t>(c.dim / c.heads)));
  if (c.head_dim <= 0 || c.head_dim % 2 != 0 || c.head_dim > kMaxHeadDim) {
    throw UsageError(fmt::format("attention head size must be even and at most {}", kMaxHeadDim));
  }
  if (c.heads % c.kv_heads != 0) throw UsageError(fmt::format("{} heads cannot be grouped over {} KV heads", c.heads, c.kv_heads));
  if (c.experts > 0 && (c.active_experts <= 0 || c.active_experts > c.experts)) {
    throw UsageError(fmt::format("{} experts with {} active is not a valid mixture", c.experts, c.active_experts));
  }
  if (!(c.norm_eps > 0) || !(c.rope_base > 0)) throw UsageError("RMS norm epsilon and RoPE base must be positive");
  const GgufTensorInfo* embd = f.find_tensor("token_embd.weight");
  if (embd == nullptr) throw UsageError("tensor 'token_embd.weight' is missing");
  if (embd->dims.size() != 2 || embd->dims[1] > std::numeric_limits<int>::max()) throw UsageError("tensor 'token_embd.weight' must be 2-D");
  c.vocab = static_cast<int>(embd->dims[1]);
  return c;
}

}  // namespace infercast
