#include "engine/reference.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "engine/ops.h"
#include "kernels/formats.h"

namespace infercast {
namespace {

// y[r] = dot(row r of w, x)
void matvec(const WeightView& w, const float* x, float* y, ReferenceMath math) {
  const auto& f = format_info(w.type);
  if (math == ReferenceMath::as_kernels && f.activation != GgmlType::f32) {
    const auto& a = format_info(f.activation);
    std::vector<std::uint8_t> xq(a.row_bytes(w.cols));
    a.quantize(x, xq.data(), w.cols);
    std::vector<std::uint8_t> scratch;
    for (std::size_t r = 0; r < w.rows; ++r) y[r] = f.dot(gguf_row(w, r, scratch), xq.data(), w.cols);
    return;
  }
  std::vector<float> row(w.cols);
  std::vector<std::uint8_t> scratch;
  for (std::size_t r = 0; r < w.rows; ++r) {
    f.dequantize(gguf_row(w, r, scratch), row.data(), w.cols);
    double sum = 0;
    for (std::size_t k = 0; k < w.cols; ++k) sum += static_cast<double>(row[k]) * static_cast<double>(x[k]);
    y[r] = static_cast<float>(sum);
  }
}

void add_bias(float* v, const float* bias, std::size_t n) {
  if (bias == nullptr) return;
  for (std::size_t i = 0; i < n; ++i) v[i] += bias[i];
}

void swiglu_ffn(const WeightView& gate, const WeightView& up, const WeightView& down, const float* x, float* out,
                ReferenceMath math) {
  std::vector<float> g(gate.rows);
  std::vector<float> u(up.rows);
  matvec(gate, x, g.data(), math);
  matvec(up, x, u.data(), math);
  swiglu(g.data(), u.data(), g.size());
  matvec(down, g.data(), out, math);
}

}  // namespace

std::vector<float> reference_logits(const Model& model, std::span<const int> tokens, ReferenceMath math) {
  const ModelConfig& c = model.config();
  const auto dim = static_cast<std::size_t>(c.dim);
  const auto qd = static_cast<std::size_t>(c.q_dim());
  const auto kvd = static_cast<std::size_t>(c.kv_dim());
  const auto hd = static_cast<std::size_t>(c.head_dim);
  const auto vocab = static_cast<std::size_t>(c.vocab);
  const std::size_t n = tokens.size();
  // cache[layer] holds K then V rows for every position so far.
  std::vector<std::vector<float>> k_cache(static_cast<std::size_t>(c.layers), std::vector<float>(n * kvd));
  std::vector<std::vector<float>> v_cache(static_cast<std::size_t>(c.layers), std::vector<float>(n * kvd));
  std::vector<float> logits(n * vocab);
  std::vector<float> x(dim), xn(dim), q(qd), att(qd), tmp(dim), cos_a(hd / 2), sin_a(hd / 2);

  for (std::size_t p = 0; p < n; ++p) {
    model.embedding_row(tokens[p], x.data());
    rope_angles(static_cast<int>(p), c.head_dim, c.rope_base, cos_a.data(), sin_a.data());
    for (int l = 0; l < c.layers; ++l) {
      const LayerWeights& w = model.layers()[static_cast<std::size_t>(l)];
      float* k = &k_cache[static_cast<std::size_t>(l)][p * kvd];
      float* v = &v_cache[static_cast<std::size_t>(l)][p * kvd];
      rms_norm(x.data(), w.attn_norm, xn.data(), dim, c.norm_eps);
      matvec(w.wq, xn.data(), q.data(), math);
      matvec(w.wk, xn.data(), k, math);
      matvec(w.wv, xn.data(), v, math);
      add_bias(q.data(), w.bq, qd);
      add_bias(k, w.bk, kvd);
      add_bias(v, w.bv, kvd);
      rope_rotate(q.data(), c.heads, c.head_dim, cos_a.data(), sin_a.data(), c.rope);
      rope_rotate(k, c.kv_heads, c.head_dim, cos_a.data(), sin_a.data(), c.rope);
      const int group = c.heads / c.kv_heads;
      std::vector<float> scores(p + 1);
      for (int h = 0; h < c.heads; ++h) {
        const float* qh = &q[static_cast<std::size_t>(h) * hd];
        const std::size_t kv_off = static_cast<std::size_t>(h / group) * hd;
        for (std::size_t j = 0; j <= p; ++j) {
          double s = 0;
          for (std::size_t i = 0; i < hd; ++i) s += static_cast<double>(qh[i]) * static_cast<double>(k_cache[static_cast<std::size_t>(l)][j * kvd + kv_off + i]);
          scores[j] = static_cast<float>(s / std::sqrt(static_cast<double>(hd)));
        }
        softmax(scores.data(), p + 1);
        for (std::size_t i = 0; i < hd; ++i) {
          double s = 0;
          for (std::size_t j = 0; j <= p; ++j) s += static_cast<double>(scores[j]) * static_cast<double>(v_cache[static_cast<std::size_t>(l)][j * kvd + kv_off + i]);
          att[static_cast<std::size_t>(h) * hd + i] = static_cast<float>(s);
        }
      }
      matvec(w.wo, att.data(), tmp.data(), math);
      for (std::size_t i = 0; i < dim; ++i) x[i] += tmp[i];
      rms_norm(x.data(), w.ffn_norm, xn.data(), dim, c.norm_eps);
      if (c.is_moe()) {
        std::vector<float> r(static_cast<std::size_t>(c.experts));
        matvec(w.router, xn.data(), r.data(), math);
        std::vector<std::size_t> order(r.size());
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return r[a] > r[b]; });
        const auto active = static_cast<std::size_t>(c.active_experts);
        std::vector<float> weights(active);
        for (std::size_t i = 0; i < active; ++i) weights[i] = r[order[i]];
        softmax(weights.data(), active);
        for (std::size_t i = 0; i < active; ++i) {
          const int e = static_cast<int>(order[i]);
          swiglu_ffn(expert_slice(w.gate_exps, c.experts, e), expert_slice(w.up_exps, c.experts, e),
                     expert_slice(w.down_exps, c.experts, e), xn.data(), tmp.data(), math);
          for (std::size_t j = 0; j < dim; ++j) x[j] += weights[i] * tmp[j];
        }
      } else {
        swiglu_ffn(w.gate, w.up, w.down, xn.data(), tmp.data(), math);
        for (std::size_t i = 0; i < dim; ++i) x[i] += tmp[i];
      }
    }
    rms_norm(x.data(), model.output_norm(), xn.data(), dim, c.norm_eps);
    matvec(model.output(), xn.data(), &logits[p * vocab], math);
  }
  return logits;
}

}  // namespace infercast
