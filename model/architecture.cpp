#include "model/architecture.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "engine/model.h"
#include "kernels/formats.h"
#include "model/catalog.h"
#include "model/json_input.h"
#include "probes/error.h"
#include "probes/units.h"

namespace infercast {
namespace {

int positive_int(const nlohmann::json& j, const char* key, const std::string& origin, bool required = true) {
  if (!j.contains(key)) {
    if (!required) return 0;
    throw UsageError(fmt::format("{}: '{}' is missing", origin, key));
  }
  const auto& v = j.at(key);
  if (!v.is_number_integer() || v.get<long long>() < (required ? 1 : 0) || v.get<long long>() > (1LL << 30)) {
    throw UsageError(fmt::format("{}: '{}' must be a {} integer", origin, key, required ? "positive" : "non-negative"));
  }
  return v.get<int>();
}

std::string text_or(const nlohmann::json& j, const char* key, std::string fallback) {
  return j.contains(key) && j.at(key).is_string() ? j.at(key).get<std::string>() : fallback;
}

std::optional<double> number_or_none(const nlohmann::json& j, const char* key) {
  if (j.contains(key) && j.at(key).is_number()) return j.at(key).get<double>();
  return std::nullopt;
}

// Far beyond any published model (Llama 3.1 405B has 126 blocks), and low enough that the
// inventory, a few entries per block, stays small: the fuzzer's 7.8 million blocks took 2 GiB.
constexpr int kMaxLayers = 4096;

void check(const Architecture& a, const std::string& origin) {
  if (a.layers > kMaxLayers) throw UsageError(fmt::format("{}: 'layers' ({}) is more than {}", origin, a.layers, kMaxLayers));
  if (a.heads % a.kv_heads != 0) throw UsageError(fmt::format("{}: heads ({}) must be a multiple of kv_heads ({})", origin, a.heads, a.kv_heads));
  if (a.is_moe()) {
    if (a.moe.active < 1 || a.moe.active > a.moe.experts) throw UsageError(fmt::format("{}: moe.active must be between 1 and moe.experts", origin));
    if (a.moe.expert_ffn < 1) throw UsageError(fmt::format("{}: moe.expert_ffn must be positive", origin));
    if (a.moe.dense_layers >= a.layers) throw UsageError(fmt::format("{}: moe.dense_layers must be fewer than the layers", origin));
  }
}

}  // namespace

namespace {

Architecture parse_architecture(const nlohmann::json& j, const std::string& origin) {
  if (!j.is_object()) throw UsageError(fmt::format("{}: a model description must be a JSON object", origin));
  Architecture a;
  a.name = text_or(j, "name", origin);
  a.display = text_or(j, "display", a.name);
  a.family = text_or(j, "architecture", "llama");
  a.source = text_or(j, "source", origin);
  a.layers = positive_int(j, "layers", origin);
  a.dim = positive_int(j, "dim", origin);
  a.ffn = positive_int(j, "ffn", origin);
  a.heads = positive_int(j, "heads", origin);
  a.kv_heads = positive_int(j, "kv_heads", origin);
  a.head_dim = j.contains("head_dim") ? positive_int(j, "head_dim", origin) : a.dim / a.heads;
  a.vocab = positive_int(j, "vocab", origin);
  a.context = positive_int(j, "context", origin);
  a.tied_embeddings = j.value("tied_embeddings", false);
  a.qkv_bias = j.value("qkv_bias", false);
  a.published_parameters = number_or_none(j, "published_parameters");
  a.published_active_parameters = number_or_none(j, "published_active_parameters");
  if (j.contains("moe")) {
    const auto& m = j.at("moe");
    const std::string where = origin + " moe";
    a.moe.experts = positive_int(m, "experts", where);
    a.moe.active = positive_int(m, "active", where);
    a.moe.expert_ffn = positive_int(m, "expert_ffn", where);
    a.moe.shared_experts = positive_int(m, "shared_experts", where, false);
    a.moe.dense_layers = positive_int(m, "dense_layers", where, false);
  }
  if (j.contains("attention") && text_or(j.at("attention"), "kind", "gqa") == "mla") {
    const auto& m = j.at("attention");
    const std::string where = origin + " attention";
    a.mla = MlaShape{positive_int(m, "q_lora_rank", where), positive_int(m, "kv_lora_rank", where),
                     positive_int(m, "qk_nope_head_dim", where), positive_int(m, "qk_rope_head_dim", where),
                     positive_int(m, "v_head_dim", where)};
  }
  check(a, origin);
  return a;
}

}  // namespace

Architecture architecture_from_json(const nlohmann::json& j, const std::string& origin) {
  return refuse_bad_json(origin, [&] { return parse_architecture(j, origin); });
}

std::vector<Architecture> catalog_models() {
  std::vector<Architecture> out;
  for (const auto& e : model_catalog()) {
    out.push_back(architecture_from_json(nlohmann::json::parse(e.json), fmt::format("catalog model {}", e.name)));
  }
  return out;
}

std::optional<Architecture> find_catalog_model(std::string_view name) {
  for (const auto& e : model_catalog()) {
    if (iequals(e.name, name)) return architecture_from_json(nlohmann::json::parse(e.json), fmt::format("catalog model {}", e.name));
  }
  return std::nullopt;
}

std::string catalog_model_names() {
  std::string names;
  for (const auto& e : model_catalog()) names += (names.empty() ? "" : ", ") + std::string(e.name);
  return names;
}

Architecture architecture_from_gguf(const GgufFile& file, const std::string& name) {
  const ModelConfig c = read_model_config(file);
  Architecture a;
  a.name = name;
  a.display = file.find("general.name") != nullptr && file.find("general.name")->type == GgufType::string
                  ? file.get_string("general.name")
                  : name;
  a.family = c.architecture;
  a.source = name;
  a.layers = c.layers;
  a.dim = c.dim;
  a.ffn = c.ffn;
  a.heads = c.heads;
  a.kv_heads = c.kv_heads;
  a.head_dim = c.head_dim;
  a.vocab = c.vocab;
  a.context = c.context;
  a.tied_embeddings = file.find_tensor("output.weight") == nullptr;
  a.qkv_bias = file.find_tensor("blk.0.attn_q.bias") != nullptr;
  if (c.is_moe()) a.moe = MoeShape{c.experts, c.active_experts, c.ffn, 0, 0};
  return a;
}

std::optional<GgmlType> stand_in_format(GgmlType type) {
  const GgmlTypeGeometry* g = ggml_type_geometry(type);
  if (g == nullptr) return std::nullopt;
  const auto formats = weight_formats();
  if (std::find(formats.begin(), formats.end(), type) != formats.end()) return type;
  return nearest_format(static_cast<int>(g->block_elems), 8.0 * g->block_bytes / g->block_elems, formats);
}

GgmlType MatrixInfo::kernel_type() const {
  const auto t = stand_in_format(type);
  if (!t) throw UsageError(fmt::format("tensor '{}' has unknown ggml type {}", name, static_cast<std::uint32_t>(type)));
  return *t;
}

std::uint64_t MatrixInfo::bytes_per_copy() const {
  const GgmlTypeGeometry* g = ggml_type_geometry(type);
  if (g == nullptr) throw UsageError(fmt::format("tensor '{}' has unknown ggml type {}", name, static_cast<std::uint32_t>(type)));
  return rows * (cols / g->block_elems) * g->block_bytes;
}

std::vector<WeightInventory::StandIn> WeightInventory::stand_ins(const std::function<GgmlType(GgmlType)>& measured_as) const {
  std::vector<StandIn> out;
  double total = 0;
  for (const auto& m : matrices) total += static_cast<double>(m.parameters());
  for (const auto& m : matrices) {
    const GgmlType measured = measured_as ? measured_as(m.kernel_type()) : m.kernel_type();
    if (measured == m.type) continue;
    auto it = std::find_if(out.begin(), out.end(), [&](const StandIn& s) { return s.type == m.type; });
    if (it == out.end()) it = out.insert(out.end(), StandIn{m.type, measured, 0});
    it->parameter_share += static_cast<double>(m.parameters()) / total;
  }
  return out;
}

std::uint64_t WeightInventory::total_bytes() const {
  std::uint64_t b = embedding_bytes + vector_bytes;
  for (const auto& m : matrices) b += m.bytes();
  return b;
}

std::uint64_t WeightInventory::total_parameters() const {
  std::uint64_t p = embedding_parameters + vector_parameters;
  for (const auto& m : matrices) p += m.parameters();
  return p;
}

std::uint64_t WeightInventory::active_matrix_parameters(const Architecture& a) const {
  std::uint64_t p = 0;
  for (const auto& m : matrices) {
    p += m.role == MatrixRole::expert ? m.rows * m.cols * static_cast<std::uint64_t>(a.moe.active) : m.parameters();
  }
  return p;
}

double expected_experts_touched(int experts, int active, double batch) {
  if (experts <= 0) return 0;
  const double miss = 1.0 - static_cast<double>(active) / experts;
  return experts * (1.0 - std::pow(miss, std::max(batch, 0.0)));
}

double WeightInventory::step_weight_bytes(const Architecture& a, double batch) const {
  const double touched = a.is_moe() ? expected_experts_touched(a.moe.experts, a.moe.active, batch) : 0;
  double b = static_cast<double>(vector_bytes);
  if (a.vocab > 0) b += static_cast<double>(embedding_bytes) / a.vocab * batch;
  for (const auto& m : matrices) {
    b += m.role == MatrixRole::expert ? static_cast<double>(m.bytes_per_copy()) * touched : static_cast<double>(m.bytes());
  }
  return b;
}

double WeightInventory::bits_per_weight() const {
  const auto p = total_parameters();
  return p == 0 ? 0 : 8.0 * static_cast<double>(total_bytes()) / static_cast<double>(p);
}

WeightInventory weight_inventory(const Architecture& a, const Quantization& quant) {
  WeightInventory inv;
  const RecipeModel recipe_model{a.layers, a.moe.experts};
  const auto dim = static_cast<std::uint64_t>(a.dim);
  const auto vectors = [&](std::uint64_t n) {
    inv.vector_bytes += 4 * n;
    inv.vector_parameters += n;
  };
  const auto add = [&](std::string name, int layer, std::uint64_t rows, std::uint64_t cols, MatrixRole role, int copies = 1) {
    MatrixInfo m;
    m.type = role == MatrixRole::router ? GgmlType::f32 : matrix_type(quant, name, std::max(layer, 0), recipe_model, cols, Fallback::llama_cpp);
    m.name = std::move(name);
    m.rows = rows;
    m.cols = cols;
    m.copies = copies;
    m.layer = layer;
    m.role = role;
    inv.matrices.push_back(std::move(m));
  };

  const GgmlType embd = embedding_type(quant, a.tied_embeddings, recipe_model, dim, Fallback::llama_cpp);
  inv.embedding_parameters = static_cast<std::uint64_t>(a.vocab) * dim;
  const GgmlTypeGeometry* embd_geometry = ggml_type_geometry(embd);
  inv.embedding_bytes = static_cast<std::uint64_t>(a.vocab) * (dim / embd_geometry->block_elems) * embd_geometry->block_bytes;
  const auto heads = static_cast<std::uint64_t>(a.heads);
  const auto q_dim = heads * static_cast<std::uint64_t>(a.head_dim);
  const auto kv_dim = static_cast<std::uint64_t>(a.kv_heads) * static_cast<std::uint64_t>(a.head_dim);
  for (int l = 0; l < a.layers; ++l) {
    const auto blk = [l](const char* suffix) { return fmt::format("blk.{}.{}", l, suffix); };
    vectors(2 * dim);  // attention and FFN norms
    if (a.mla) {
      const MlaShape& m = *a.mla;
      const auto qk = static_cast<std::uint64_t>(m.qk_nope_head_dim + m.qk_rope_head_dim);
      add(blk("attn_q_a.weight"), l, static_cast<std::uint64_t>(m.q_lora_rank), dim, MatrixRole::attention);
      add(blk("attn_q_b.weight"), l, heads * qk, static_cast<std::uint64_t>(m.q_lora_rank), MatrixRole::attention);
      add(blk("attn_kv_a_mqa.weight"), l, static_cast<std::uint64_t>(m.kv_lora_rank + m.qk_rope_head_dim), dim, MatrixRole::attention);
      add(blk("attn_kv_b.weight"), l, heads * static_cast<std::uint64_t>(m.qk_nope_head_dim + m.v_head_dim),
          static_cast<std::uint64_t>(m.kv_lora_rank), MatrixRole::attention);
      add(blk("attn_output.weight"), l, dim, heads * static_cast<std::uint64_t>(m.v_head_dim), MatrixRole::attention);
      vectors(static_cast<std::uint64_t>(m.q_lora_rank + m.kv_lora_rank));
    } else {
      add(blk("attn_q.weight"), l, q_dim, dim, MatrixRole::attention);
      add(blk("attn_k.weight"), l, kv_dim, dim, MatrixRole::attention);
      add(blk("attn_v.weight"), l, kv_dim, dim, MatrixRole::attention);
      add(blk("attn_output.weight"), l, dim, q_dim, MatrixRole::attention);
      if (a.qkv_bias) vectors(q_dim + 2 * kv_dim);
    }
    if (a.is_moe_layer(l)) {
      const auto e = static_cast<std::uint64_t>(a.moe.expert_ffn);
      add(blk("ffn_gate_inp.weight"), l, static_cast<std::uint64_t>(a.moe.experts), dim, MatrixRole::router);
      add(blk("ffn_gate_exps.weight"), l, e, dim, MatrixRole::expert, a.moe.experts);
      add(blk("ffn_up_exps.weight"), l, e, dim, MatrixRole::expert, a.moe.experts);
      add(blk("ffn_down_exps.weight"), l, dim, e, MatrixRole::expert, a.moe.experts);
      if (a.moe.shared_experts > 0) {
        const auto s = e * static_cast<std::uint64_t>(a.moe.shared_experts);
        add(blk("ffn_gate_shexp.weight"), l, s, dim, MatrixRole::shared_expert);
        add(blk("ffn_up_shexp.weight"), l, s, dim, MatrixRole::shared_expert);
        add(blk("ffn_down_shexp.weight"), l, dim, s, MatrixRole::shared_expert);
      }
    } else {
      const auto f = static_cast<std::uint64_t>(a.ffn);
      add(blk("ffn_gate.weight"), l, f, dim, MatrixRole::ffn);
      add(blk("ffn_up.weight"), l, f, dim, MatrixRole::ffn);
      add(blk("ffn_down.weight"), l, dim, f, MatrixRole::ffn);
    }
  }
  vectors(dim);  // output norm
  if (a.tied_embeddings) {
    // The embedding table doubles as the output head: multiplied once per step, stored once.
    MatrixInfo head{"token_embd.weight", static_cast<std::uint64_t>(a.vocab), dim, 1, -1, MatrixRole::output, embd};
    inv.matrices.push_back(head);
    inv.embedding_bytes = 0;
    inv.embedding_parameters = 0;
  } else {
    add("output.weight", -1, static_cast<std::uint64_t>(a.vocab), dim, MatrixRole::output);
  }
  return inv;
}

bool shares_product_call(const MatrixInfo& m) {
  const std::string_view name = m.name;
  if (m.role == MatrixRole::expert) return name.ends_with(".ffn_up_exps.weight");
  if (m.role != MatrixRole::attention && m.role != MatrixRole::ffn) return false;
  return name.ends_with(".attn_k.weight") || name.ends_with(".attn_v.weight") || name.ends_with(".ffn_up.weight");
}

WeightInventory weight_inventory(const GgufFile& file, const Architecture& a) {
  WeightInventory inv;
  for (const auto& t : file.tensors()) {
    const std::string_view name = t.name;
    if (t.dims.size() < 2) {
      inv.vector_bytes += t.bytes;
      inv.vector_parameters += t.elements();
      continue;
    }
    if (name == "token_embd.weight" && !a.tied_embeddings) {
      inv.embedding_bytes = t.bytes;
      inv.embedding_parameters = t.elements();
      continue;
    }
    MatrixInfo m;
    m.name = t.name;
    m.cols = t.dims[0];
    m.rows = t.dims[1];
    m.copies = t.dims.size() > 2 ? static_cast<int>(t.dims[2]) : 1;
    m.type = t.type;
    int layer = -1;
    if (name.starts_with("blk.")) layer = std::atoi(t.name.c_str() + 4);
    m.layer = layer;
    if (name.find("_exps") != std::string_view::npos) {
      m.role = MatrixRole::expert;
    } else if (name.find("_shexp") != std::string_view::npos) {
      m.role = MatrixRole::shared_expert;
    } else if (name.find("ffn_gate_inp") != std::string_view::npos) {
      m.role = MatrixRole::router;
    } else if (name.find("ffn_") != std::string_view::npos) {
      m.role = MatrixRole::ffn;
    } else if (layer < 0) {
      m.role = MatrixRole::output;
    }
    inv.matrices.push_back(std::move(m));
  }
  return inv;
}

std::uint64_t kv_bytes_per_token(const Architecture& a, std::uint64_t element_bytes) {
  const auto per_layer = a.mla ? static_cast<std::uint64_t>(a.mla->kv_lora_rank + a.mla->qk_rope_head_dim)
                               : 2 * static_cast<std::uint64_t>(a.kv_heads) * static_cast<std::uint64_t>(a.head_dim);
  return per_layer * static_cast<std::uint64_t>(a.layers) * element_bytes;
}

double attention_ops_per_token(const Architecture& a, double context) {
  // Scores and the weighted sum: 2 multiply-adds per head dimension per position, per head.
  // MLA with absorbed projections attends in the latent space (kv_lora + rope wide).
  const double width = a.mla ? 2.0 * a.mla->kv_lora_rank + a.mla->qk_rope_head_dim : 2.0 * a.head_dim;
  return 2.0 * a.heads * width * context * a.layers;
}

}  // namespace infercast
