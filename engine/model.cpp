#include "engine/model.h"

#include <fmt/format.h>

#include <atomic>
#include <exception>
#include <filesystem>
#include <limits>
#include <mutex>
#include <system_error>
#include <thread>

#include "kernels/formats.h"
#include "probes/error.h"
#include "probes/topology.h"

namespace infercast {
namespace {

std::string tensor_name(int layer, const char* suffix) { return fmt::format("blk.{}.{}", layer, suffix); }

const GgufTensorInfo& require(const GgufFile& f, const std::string& name) {
  const GgufTensorInfo* t = f.find_tensor(name);
  if (t == nullptr) throw UsageError(fmt::format("tensor '{}' is missing", name));
  return *t;
}

void check_dims(const GgufTensorInfo& t, std::initializer_list<std::uint64_t> expected) {
  const std::vector<std::uint64_t> want(expected);
  if (t.dims != want) {
    throw UsageError(fmt::format("tensor '{}' has shape [{}], expected [{}]", t.name, fmt::join(t.dims, ", "),
                                 fmt::join(want, ", ")));
  }
}

const float* vector_of(const GgufFile& f, const std::string& name, std::uint64_t n, bool optional = false) {
  const GgufTensorInfo* t = f.find_tensor(name);
  if (t == nullptr) {
    if (optional) return nullptr;
    throw UsageError(fmt::format("tensor '{}' is missing", name));
  }
  check_dims(*t, {n});
  if (t->type != GgmlType::f32) throw UsageError(fmt::format("tensor '{}' must be F32", name));
  // Offsets are multiples of the alignment (>= 32 by default), so the floats are aligned; a
  // file declaring a smaller alignment could still misalign them.
  if (reinterpret_cast<std::uintptr_t>(t->data) % alignof(float) != 0) throw UsageError(fmt::format("tensor '{}' is misaligned", name));
  return reinterpret_cast<const float*>(t->data);
}

void require_kernels(const GgufTensorInfo& t) {
  if (is_known_type(static_cast<std::uint32_t>(t.type))) return;
  const GgmlTypeGeometry* g = ggml_type_geometry(t.type);
  throw UsageError(fmt::format("tensor '{}' is {}, a format infercast has no kernels for (supported: {}); `infercast predict` "
                               "still forecasts the file",
                               t.name, g != nullptr ? std::string(g->name) : fmt::format("ggml type {}", static_cast<std::uint32_t>(t.type)),
                               weight_format_names()));
}

WeightView matrix_of(const GgufTensorInfo& t, std::uint64_t cols, std::uint64_t rows) {
  check_dims(t, {cols, rows});
  require_kernels(t);
  WeightView w = make_weight_view(t.type, t.data, rows, cols);
  validate_weights(w);
  return w;
}

WeightView experts_of(const GgufTensorInfo& t, std::uint64_t cols, std::uint64_t rows, std::uint64_t experts) {
  check_dims(t, {cols, rows, experts});
  require_kernels(t);
  WeightView w = make_weight_view(t.type, t.data, rows * experts, cols);
  validate_weights(w);
  return w;
}

std::uint64_t view_bytes(const WeightView& w) { return w.rows * w.row_bytes; }

}  // namespace

namespace {
WeightLoading default_loading(const std::string& path) {
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(path, ec);
  if (ec) return WeightLoading::map;  // open() reports the problem
  return bytes + bytes / 4 <= available_memory_bytes() ? WeightLoading::copy : WeightLoading::map;
}
}  // namespace

Model Model::load(const std::string& path, std::optional<WeightLoading> loading, std::optional<IsaLevel> kernels) {
  try {
    Model m = from(GgufFile::open(path, loading ? *loading : default_loading(path)));
    m.relayout_for(kernels ? *kernels : active_level());
    return m;
  } catch (const UsageError& e) {
    const std::string what = e.what();
    if (what.starts_with(path)) throw;
    throw UsageError(fmt::format("{}: {}", path, what));
  }
}

Model Model::from(GgufFile file) {
  Model m(std::move(file));
  const GgufFile& f = m.file_;
  const ModelConfig c = read_model_config(f);
  m.config_ = c;
  const auto dim = static_cast<std::uint64_t>(c.dim);
  const auto qd = static_cast<std::uint64_t>(c.q_dim());
  const auto kvd = static_cast<std::uint64_t>(c.kv_dim());
  const auto ffn = static_cast<std::uint64_t>(c.ffn);
  const auto experts = static_cast<std::uint64_t>(c.experts);

  m.embedding_ = f.find_tensor("token_embd.weight");
  check_dims(*m.embedding_, {dim, static_cast<std::uint64_t>(c.vocab)});
  if (!is_known_type(static_cast<std::uint32_t>(m.embedding_->type))) throw UsageError("tensor 'token_embd.weight' is in an unsupported format");
  m.output_norm_ = vector_of(f, "output_norm.weight", dim);
  // Tied embeddings (qwen2.5 small models) use the embedding matrix as the output head.
  const GgufTensorInfo* out = f.find_tensor("output.weight");
  m.output_ = matrix_of(out != nullptr ? *out : *m.embedding_, dim, static_cast<std::uint64_t>(c.vocab));

  for (int l = 0; l < c.layers; ++l) {
    LayerWeights w;
    w.attn_norm = vector_of(f, tensor_name(l, "attn_norm.weight"), dim);
    w.wq = matrix_of(require(f, tensor_name(l, "attn_q.weight")), dim, qd);
    w.wk = matrix_of(require(f, tensor_name(l, "attn_k.weight")), dim, kvd);
    w.wv = matrix_of(require(f, tensor_name(l, "attn_v.weight")), dim, kvd);
    w.wo = matrix_of(require(f, tensor_name(l, "attn_output.weight")), qd, dim);
    w.bq = vector_of(f, tensor_name(l, "attn_q.bias"), qd, true);
    w.bk = vector_of(f, tensor_name(l, "attn_k.bias"), kvd, true);
    w.bv = vector_of(f, tensor_name(l, "attn_v.bias"), kvd, true);
    w.ffn_norm = vector_of(f, tensor_name(l, "ffn_norm.weight"), dim);
    if (c.is_moe()) {
      w.router = matrix_of(require(f, tensor_name(l, "ffn_gate_inp.weight")), dim, experts);
      w.gate_exps = experts_of(require(f, tensor_name(l, "ffn_gate_exps.weight")), dim, ffn, experts);
      w.up_exps = experts_of(require(f, tensor_name(l, "ffn_up_exps.weight")), dim, ffn, experts);
      w.down_exps = experts_of(require(f, tensor_name(l, "ffn_down_exps.weight")), ffn, dim, experts);
    } else {
      w.gate = matrix_of(require(f, tensor_name(l, "ffn_gate.weight")), dim, ffn);
      w.up = matrix_of(require(f, tensor_name(l, "ffn_up.weight")), dim, ffn);
      w.down = matrix_of(require(f, tensor_name(l, "ffn_down.weight")), ffn, dim);
    }
    m.layers_.push_back(w);
  }
  for (const auto& t : f.tensors()) {
    m.weight_bytes_ += t.bytes;
    m.parameters_ += t.elements();
  }
  return m;
}

void Model::relayout_for(IsaLevel level) {
  std::vector<WeightView*> todo;
  const auto consider = [&](WeightView& w) {
    if (w.data == nullptr || preferred_layout(w.type, level) == w.layout) return;
    // Mapped weights keep the file's layout, which every level reads.
    if (file_.writable(static_cast<const std::uint8_t*>(w.data)) != nullptr) todo.push_back(&w);
  };
  for (auto& l : layers_) {
    for (WeightView* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.gate, &l.up, &l.down, &l.router, &l.gate_exps, &l.up_exps, &l.down_exps}) {
      consider(*w);
    }
  }
  consider(output_);
  // About 1 GB/s per core: matrices are dealt to one thread per core.
  std::atomic<std::size_t> next{0};
  std::exception_ptr failed;
  std::mutex failed_lock;
  const auto work = [&] {
    try {
      for (std::size_t i = next++; i < todo.size(); i = next++) {
        WeightView& w = *todo[i];
        w = relayout(w, file_.writable(static_cast<const std::uint8_t*>(w.data)), preferred_layout(w.type, level));
      }
    } catch (...) {  // rethrown below, on the loading thread
      const std::lock_guard lock(failed_lock);
      failed = std::current_exception();
      next = todo.size();
    }
  };
  std::vector<std::jthread> helpers;
  for (unsigned t = 1; t < std::min<std::size_t>(host_topology().cores, todo.size()); ++t) helpers.emplace_back(work);
  work();
  helpers.clear();
  if (failed) std::rethrow_exception(failed);
  relaid_ = todo.size();
}

std::uint64_t Model::active_weight_bytes_per_token() const {
  // What one decode step reads: every matrix once, MoE experts only active_experts of experts,
  // the output head, and one embedding row.
  std::uint64_t bytes = view_bytes(output_) + embedding_->bytes / static_cast<std::uint64_t>(config_.vocab);
  for (const auto& l : layers_) {
    bytes += view_bytes(l.wq) + view_bytes(l.wk) + view_bytes(l.wv) + view_bytes(l.wo);
    if (config_.is_moe()) {
      const std::uint64_t all = view_bytes(l.gate_exps) + view_bytes(l.up_exps) + view_bytes(l.down_exps);
      bytes += view_bytes(l.router) + all / static_cast<std::uint64_t>(config_.experts) * static_cast<std::uint64_t>(config_.active_experts);
    } else {
      bytes += view_bytes(l.gate) + view_bytes(l.up) + view_bytes(l.down);
    }
  }
  return bytes;
}

WeightView expert_slice(const WeightView& stacked, int experts, int e) {
  WeightView w = stacked;
  w.rows = stacked.rows / static_cast<std::size_t>(experts);
  w.data = static_cast<const std::uint8_t*>(stacked.data) + static_cast<std::size_t>(e) * w.rows * w.row_bytes;
  return w;
}

void Model::embedding_row(int token, float* out) const {
  const auto cols = static_cast<std::size_t>(embedding_->dims[0]);
  const auto& f = format_info(embedding_->type);
  const auto r = static_cast<std::size_t>(token);
  if (output_.data == embedding_->data && output_.layout != WeightLayout::gguf) {
    thread_local std::vector<std::uint8_t> row;  // a row per token per step: reuse the buffer
    f.dequantize(gguf_row(output_, r, row), out, cols);
    return;
  }
  f.dequantize(embedding_->data + r * f.row_bytes(cols), out, cols);
}

}  // namespace infercast
