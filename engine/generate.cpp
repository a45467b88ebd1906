#include "engine/generate.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <set>
#include <vector>

#include "engine/gguf.h"
#include "kernels/formats.h"
#include "kernels/recipes.h"
#include "kernels/thread_pool.h"
#include "probes/error.h"
#include "probes/random.h"
#include "probes/topology.h"
#include "probes/units.h"

namespace infercast {
namespace {

ModelShape shape(std::string arch, int layers, int dim, int ffn, int heads, int kv_heads, int vocab, int context,
                 float rope_base, float eps, bool tied = false, bool bias = false, int experts = 0, int active = 0) {
  return ModelShape{.architecture = std::move(arch), .layers = layers, .dim = dim, .ffn = ffn, .heads = heads,
                    .kv_heads = kv_heads, .vocab = vocab, .experts = experts, .active_experts = active,
                    .context = context, .rope_base = rope_base, .norm_eps = eps, .tied_embeddings = tied,
                    .qkv_bias = bias};
}

}  // namespace

ModelShape llama_shape(int layers, int dim, int ffn, int heads, int kv_heads, int vocab, int context) {
  return ModelShape{.layers = layers, .dim = dim, .ffn = ffn, .heads = heads, .kv_heads = kv_heads, .vocab = vocab, .context = context};
}

namespace {

// Shapes as the public model configurations give them.
const std::vector<ModelPreset>& presets() {
  static const std::vector<ModelPreset> kPresets = {
      {"tinyllama-1.1b", "TinyLlama 1.1B (llama, GQA 32/4)", shape("llama", 22, 2048, 5632, 32, 4, 32000, 2048, 10000, 1e-5F)},
      {"llama-2-7b", "Llama 2 7B (llama, MHA)", shape("llama", 32, 4096, 11008, 32, 32, 32000, 4096, 10000, 1e-5F)},
      {"llama-3.1-8b", "Llama 3.1 8B (llama, GQA 32/8, 128k vocabulary)", shape("llama", 32, 4096, 14336, 32, 8, 128256, 131072, 500000, 1e-5F)},
      {"mistral-7b", "Mistral 7B v0.2 (llama, GQA 32/8)", shape("llama", 32, 4096, 14336, 32, 8, 32000, 32768, 1e6F, 1e-5F)},
      {"qwen2.5-0.5b", "Qwen2.5 0.5B (qwen2, tied embeddings, QKV bias)", shape("qwen2", 24, 896, 4864, 14, 2, 151936, 32768, 1e6F, 1e-6F, true, true)},
      {"qwen2.5-1.5b", "Qwen2.5 1.5B (qwen2, tied embeddings, QKV bias)", shape("qwen2", 28, 1536, 8960, 12, 2, 151936, 32768, 1e6F, 1e-6F, true, true)},
      {"qwen2.5-7b", "Qwen2.5 7B (qwen2, QKV bias)", shape("qwen2", 28, 3584, 18944, 28, 4, 152064, 32768, 1e6F, 1e-6F, false, true)},
      {"mixtral-8x7b", "Mixtral 8x7B (llama, 8 experts, 2 active)", shape("llama", 32, 4096, 14336, 32, 8, 32000, 32768, 1e6F, 1e-5F, false, false, 8, 2)},
      {"moe-mini", "A 1.2B-parameter Mixtral-style MoE (8 experts, 2 active) that fits a small machine",
       shape("llama", 16, 1024, 2816, 16, 4, 32000, 4096, 1e6F, 1e-5F, false, false, 8, 2)},
  };
  return kPresets;
}

std::uint64_t fnv1a(std::string_view s) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  return h;
}

// How a tensor's values are drawn: Gaussian with a deviation, plus a constant (norms near 1).
struct Distribution {
  float deviation;
  float mean;
};

// A tensor of `rows` rows of `cols` values, row r drawn from its own seeded stream so any thread
// can produce any row and the file does not depend on the thread count.
void fill_tensor(std::span<std::uint8_t> out, GgmlType type, std::uint64_t rows, std::uint64_t cols, Distribution dist,
                 std::uint64_t seed, ThreadPool& pool) {
  const auto& f = format_info(type);
  const std::size_t row_bytes = f.row_bytes(cols);
  pool.run([&](unsigned member) {
    std::vector<float> row(cols);
    const RowRange range = split_rows(rows, 1, member, pool.size());
    for (std::size_t r = range.begin; r < range.end; ++r) {
      SeededRng rng(seed ^ (0x9E3779B97F4A7C15ULL * (r + 1)));
      for (auto& v : row) v = dist.mean + dist.deviation * rng.gaussian();
      f.quantize(row.data(), out.data() + r * row_bytes, cols);
    }
  });
}

// A SentencePiece-style vocabulary: control tokens, the 256 byte tokens, then printable pieces
// (single characters, then common words with every prefix, so merges can reach them), then
// numbered filler pieces up to the vocabulary size.
struct Vocabulary {
  std::vector<GgufValue> tokens, scores, types;
};

Vocabulary make_vocabulary(int size) {
  Vocabulary v;
  std::set<std::string> seen;
  const auto add = [&](const std::string& piece, int type) {
    if (static_cast<int>(v.tokens.size()) >= size || !seen.insert(piece).second) return;
    v.scores.push_back(GgufValue::make_f32(type == 1 ? -static_cast<float>(v.tokens.size()) : 0.0F));
    v.tokens.push_back(GgufValue::make_string(piece));
    v.types.push_back(GgufValue::make_i32(type));
  };
  add("<unk>", 2);
  add("<s>", 3);
  add("</s>", 3);
  for (int b = 0; b < 256; ++b) add(fmt::format("<0x{:02X}>", b), 6);
  const std::string space = "\xE2\x96\x81";  // U+2581, SentencePiece's word boundary
  add(space, 1);
  for (char c = 33; c < 127; ++c) add(std::string(1, c), 1);
  for (char c = 'a'; c <= 'z'; ++c) add(space + c, 1);
  static constexpr std::array<std::string_view, 64> kWords = {
      "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on", "not",
      "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an", "had", "they", "you", "were", "their",
      "one", "all", "we", "can", "her", "has", "there", "been", "if", "more", "when", "will", "would", "who", "so", "no",
      "model", "token", "machine", "memory", "fast", "serve", "large", "language", "hello", "world", "what", "how", "many", "users"};
  for (std::string_view w : kWords) {
    for (std::size_t n = 2; n <= w.size(); ++n) {
      add(space + std::string(w.substr(0, n)), 1);
      add(std::string(w.substr(0, n)), 1);
    }
  }
  for (int i = 0; static_cast<int>(v.tokens.size()) < size; ++i) add(fmt::format("{}w{}", space, i), 1);
  return v;
}

}  // namespace

std::span<const ModelPreset> model_presets() { return presets(); }

const ModelPreset* find_preset(std::string_view name) {
  for (const auto& p : presets()) {
    if (iequals(p.name, name)) return &p;
  }
  return nullptr;
}

std::string preset_names() {
  std::string names;
  for (const auto& p : presets()) names += (names.empty() ? "" : ", ") + std::string(p.name);
  return names;
}

std::uint64_t parameter_count(const ModelShape& s) {
  const auto dim = static_cast<std::uint64_t>(s.dim);
  const auto head_dim = dim / static_cast<std::uint64_t>(s.heads);
  const auto kvd = head_dim * static_cast<std::uint64_t>(s.kv_heads);
  const auto ffn = static_cast<std::uint64_t>(s.ffn);
  const std::uint64_t experts = s.experts > 0 ? static_cast<std::uint64_t>(s.experts) : 1;
  std::uint64_t layer = dim * (2 * dim + 2 * kvd) + 3 * dim * ffn * experts + 2 * dim;
  if (s.experts > 0) layer += dim * experts;
  if (s.qkv_bias) layer += dim + 2 * kvd;
  const std::uint64_t embed = static_cast<std::uint64_t>(s.vocab) * dim;
  return layer * static_cast<std::uint64_t>(s.layers) + embed * (s.tied_embeddings ? 1 : 2) + dim;
}

void validate(const GenerateOptions& o) {
  const ModelShape& s = o.shape;
  if (s.architecture != "llama" && s.architecture != "qwen2") throw UsageError(fmt::format("architecture '{}' is not supported (llama, qwen2)", s.architecture));
  const auto positive = [](int v, const char* what, int max) {
    if (v <= 0 || v > max) throw UsageError(fmt::format("{} must be between 1 and {}, got {}", what, max, v));
  };
  positive(s.layers, "--layers", 1024);
  positive(s.dim, "--dim", 65536);
  positive(s.ffn, "--ffn", 262144);
  positive(s.heads, "--heads", 1024);
  positive(s.kv_heads, "--kv-heads", 1024);
  positive(s.vocab, "--vocab", 1 << 20);
  if (s.vocab < 260) throw UsageError("--vocab must be at least 260 (control tokens, 256 byte tokens and a word boundary)");
  if (s.dim % s.heads != 0) throw UsageError(fmt::format("--dim {} is not a multiple of --heads {}", s.dim, s.heads));
  if ((s.dim / s.heads) % 2 != 0) throw UsageError("the head size (--dim / --heads) must be even for RoPE");
  if (s.heads % s.kv_heads != 0) throw UsageError(fmt::format("--heads {} is not a multiple of --kv-heads {}", s.heads, s.kv_heads));
  if (s.dim % kQk != 0 || s.ffn % kQk != 0) throw UsageError("--dim and --ffn must be multiples of 32 (the quantization block)");
  if (s.experts < 0 || s.active_experts < 0 || (s.experts > 0) != (s.active_experts > 0) || s.active_experts > s.experts) {
    throw UsageError("--experts and --active-experts go together, with 1 <= active <= experts");
  }
  parse_quantization(o.quant);
  if (o.threads > host_topology().cores) {
    throw UsageError(fmt::format("--threads must be between 1 and {} (the physical cores)", host_topology().cores));
  }
}

GenerateResult generate_model(const GenerateOptions& o, const std::string& path, const std::function<void(double)>& progress) {
  validate(o);
  const ModelShape& s = o.shape;
  const Quantization quant = parse_quantization(o.quant);
  const std::string& a = s.architecture;
  const auto dim = static_cast<std::uint64_t>(s.dim);
  const auto head_dim = dim / static_cast<std::uint64_t>(s.heads);
  const auto kvd = head_dim * static_cast<std::uint64_t>(s.kv_heads);
  const auto ffn = static_cast<std::uint64_t>(s.ffn);
  const auto vocab = static_cast<std::uint64_t>(s.vocab);
  const auto experts = static_cast<std::uint64_t>(s.experts);

  GgufWriter w;
  w.set("general.architecture", GgufValue::make_string(a));
  w.set("general.name", GgufValue::make_string(o.name));
  w.set("general.file_type", GgufValue::make_u32(quant.file_type));
  w.set("general.quantization_version", GgufValue::make_u32(2));
  w.set(a + ".context_length", GgufValue::make_u32(static_cast<std::uint32_t>(s.context)));
  w.set(a + ".embedding_length", GgufValue::make_u32(static_cast<std::uint32_t>(s.dim)));
  w.set(a + ".block_count", GgufValue::make_u32(static_cast<std::uint32_t>(s.layers)));
  w.set(a + ".feed_forward_length", GgufValue::make_u32(static_cast<std::uint32_t>(s.ffn)));
  w.set(a + ".attention.head_count", GgufValue::make_u32(static_cast<std::uint32_t>(s.heads)));
  w.set(a + ".attention.head_count_kv", GgufValue::make_u32(static_cast<std::uint32_t>(s.kv_heads)));
  w.set(a + ".attention.layer_norm_rms_epsilon", GgufValue::make_f32(s.norm_eps));
  w.set(a + ".rope.freq_base", GgufValue::make_f32(s.rope_base));
  w.set(a + ".rope.dimension_count", GgufValue::make_u32(static_cast<std::uint32_t>(head_dim)));
  w.set(a + ".vocab_size", GgufValue::make_u32(static_cast<std::uint32_t>(s.vocab)));
  if (s.experts > 0) {
    w.set(a + ".expert_count", GgufValue::make_u32(static_cast<std::uint32_t>(s.experts)));
    w.set(a + ".expert_used_count", GgufValue::make_u32(static_cast<std::uint32_t>(s.active_experts)));
  }
  Vocabulary v = make_vocabulary(s.vocab);
  w.set("tokenizer.ggml.model", GgufValue::make_string("llama"));
  w.set("tokenizer.ggml.tokens", GgufValue::make_array(GgufType::string, std::move(v.tokens)));
  w.set("tokenizer.ggml.scores", GgufValue::make_array(GgufType::f32, std::move(v.scores)));
  w.set("tokenizer.ggml.token_type", GgufValue::make_array(GgufType::i32, std::move(v.types)));
  w.set("tokenizer.ggml.unknown_token_id", GgufValue::make_u32(0));
  w.set("tokenizer.ggml.bos_token_id", GgufValue::make_u32(1));
  w.set("tokenizer.ggml.eos_token_id", GgufValue::make_u32(2));
  w.set("tokenizer.ggml.add_bos_token", GgufValue::make_bool(true));

  ThreadPool pool(o.threads == 0 ? 1 : o.threads);
  std::uint64_t total_bytes = 0;
  std::uint64_t done_bytes = 0;
  std::vector<std::pair<std::string, std::uint64_t>> sizes;
  const auto add = [&](const std::string& name, GgmlType type, std::vector<std::uint64_t> dims, Distribution dist) {
    std::uint64_t rows = 1;
    for (std::size_t i = 1; i < dims.size(); ++i) rows *= dims[i];
    const std::uint64_t cols = dims[0];
    const std::uint64_t seed = o.seed * 0xD1B54A32D192ED03ULL ^ fnv1a(name);
    w.add_tensor(name, type, dims, [&, type, rows, cols, dist, seed](std::span<std::uint8_t> out) {
      fill_tensor(out, type, rows, cols, dist, seed, pool);
      done_bytes += out.size();
      if (progress) progress(static_cast<double>(done_bytes) / static_cast<double>(total_bytes));
    });
  };
  const auto matrix = [&](const std::string& name, int layer, std::vector<std::uint64_t> dims, float deviation) {
    const GgmlType type = matrix_type(quant, name, layer, RecipeModel{s.layers, s.experts}, dims[0], Fallback::computable);
    add(name, type, std::move(dims), {deviation, 0.0F});
  };
  const auto norm = [&](const std::string& name, std::uint64_t n) { add(name, GgmlType::f32, {n}, {0.05F, 1.0F}); };
  const float in_dim = 1.0F / std::sqrt(static_cast<float>(dim));
  const float in_ffn = 1.0F / std::sqrt(static_cast<float>(ffn));

  const GgmlType embd = embedding_type(quant, s.tied_embeddings, RecipeModel{s.layers, s.experts}, dim, Fallback::computable);
  add("token_embd.weight", embd, {dim, vocab}, {1.0F, 0.0F});
  for (int l = 0; l < s.layers; ++l) {
    const auto blk = [&](const char* suffix) { return fmt::format("blk.{}.{}", l, suffix); };
    norm(blk("attn_norm.weight"), dim);
    matrix(blk("attn_q.weight"), l, {dim, dim}, in_dim);
    matrix(blk("attn_k.weight"), l, {dim, kvd}, in_dim);
    matrix(blk("attn_v.weight"), l, {dim, kvd}, in_dim);
    matrix(blk("attn_output.weight"), l, {dim, dim}, in_dim);
    if (s.qkv_bias) {
      add(blk("attn_q.bias"), GgmlType::f32, {dim}, {0.02F, 0.0F});
      add(blk("attn_k.bias"), GgmlType::f32, {kvd}, {0.02F, 0.0F});
      add(blk("attn_v.bias"), GgmlType::f32, {kvd}, {0.02F, 0.0F});
    }
    norm(blk("ffn_norm.weight"), dim);
    if (s.experts > 0) {
      // The router stays F32, as llama.cpp keeps it: it is tiny and routing is sensitive.
      add(blk("ffn_gate_inp.weight"), GgmlType::f32, {dim, experts}, {in_dim, 0.0F});
      matrix(blk("ffn_gate_exps.weight"), l, {dim, ffn, experts}, in_dim);
      matrix(blk("ffn_up_exps.weight"), l, {dim, ffn, experts}, in_dim);
      matrix(blk("ffn_down_exps.weight"), l, {ffn, dim, experts}, in_ffn);
    } else {
      matrix(blk("ffn_gate.weight"), l, {dim, ffn}, in_dim);
      matrix(blk("ffn_up.weight"), l, {dim, ffn}, in_dim);
      matrix(blk("ffn_down.weight"), l, {ffn, dim}, in_ffn);
    }
  }
  norm("output_norm.weight", dim);
  if (!s.tied_embeddings) matrix("output.weight", s.layers - 1, {dim, vocab}, in_dim);

  total_bytes = w.data_bytes();
  w.write(path);
  GenerateResult r;
  r.parameters = parameter_count(s);
  r.file_bytes = total_bytes;
  return r;
}

}  // namespace infercast
