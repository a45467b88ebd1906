#include "engine/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>

#include "engine/ops.h"
#include "kernels/formats.h"
#include "probes/error.h"

namespace infercast {
namespace {

std::size_t kv_element_bytes(GgmlType type) {
  if (type == GgmlType::f16) return 2;
  if (type == GgmlType::f32) return 4;
  throw UsageError("the KV cache holds F16 or F32");
}

std::uint64_t bytes_of(const WeightView& w) { return static_cast<std::uint64_t>(w.rows) * w.row_bytes; }

// Seconds `call` takes.
template <typename Call>
double timed(Call&& call) {
  const auto start = std::chrono::steady_clock::now();
  call();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Sizes a step buffer for `n` values without ever shrinking it: a prompt's buffers stay for the
// next prompt, and decode's one-token steps neither free nor zero them again.
void fit(std::vector<float>& v, std::size_t n) {
  if (v.size() < n) v.resize(n);
}

}  // namespace

Engine::Engine(const Model& model, const EngineOptions& options)
    : model_(model),
      cfg_(model.config()),
      ctx_(options.threads == 0 ? 1 : options.threads, options.isa),
      numa_(place_weights(model, ctx_.threads())),
      vec_(vec_ops(ctx_.level())),
      kv_type_(options.kv_type),
      kv_elem_bytes_(kv_element_bytes(options.kv_type)),
      kv_block_bytes_(static_cast<std::size_t>(cfg_.layers) * 2 * kKvBlockTokens * static_cast<std::size_t>(cfg_.kv_dim()) *
                      kv_elem_bytes_) {
  if (options.kv_tokens == 0) throw UsageError("the KV cache needs room for at least one token");
  ctx_.set_row_schedule(row_schedule_for(numa_));
  const std::size_t blocks = (options.kv_tokens + kKvBlockTokens - 1) / kKvBlockTokens;
  kv_blocks_ = blocks;
  kv_pool_bytes_ = static_cast<std::uint64_t>(blocks) * kv_block_bytes_;
  kv_pool_ = PageBuffer(kv_pool_bytes_);
  free_blocks_.resize(blocks);
  // Hand out low block numbers first: a sequence's blocks then lie in order (see kv_blocks_).
  std::iota(free_blocks_.rbegin(), free_blocks_.rend(), 0);
  scores_.resize(ctx_.threads());
  run_q_.resize(ctx_.threads());
  run_out_.resize(ctx_.threads());
  for (std::size_t tokens : options.step_sizes) prepare(tokens);
  if (!options.step_sizes.empty()) kv_pool_.first_touch();
}

void Engine::prepare(std::size_t n) {
  if (n == 0) return;
  const auto dim = static_cast<std::size_t>(cfg_.dim);
  const auto ffn = static_cast<std::size_t>(cfg_.ffn);
  for (auto* v : {&x_, &xn_}) fit(*v, n * dim);
  for (auto* v : {&q_, &att_}) fit(*v, n * static_cast<std::size_t>(cfg_.q_dim()));
  for (auto* v : {&k_, &v_}) fit(*v, n * static_cast<std::size_t>(cfg_.kv_dim()));
  for (auto* v : {&rope_cos_, &rope_sin_}) fit(*v, n * static_cast<std::size_t>(cfg_.head_dim / 2));
  if (cfg_.is_moe()) {
    const std::size_t routed = n * static_cast<std::size_t>(cfg_.active_experts);
    for (auto* v : {&expert_in_, &expert_out_}) fit(*v, routed * dim);
    fit(expert_gate_, routed * ffn);
    fit(expert_up_, routed * ffn);
    fit(router_, n * static_cast<std::size_t>(cfg_.experts));
    choice_expert_.reserve(routed);
    choice_row_.reserve(routed);
    choice_weight_.reserve(routed);
  } else {
    fit(gate_, n * ffn);
    fit(up_, n * ffn);
  }
  // Attention's scores: a run's query groups over the longest sequence the pool or the model
  // allows.
  const std::size_t longest = std::min(kv_blocks_ * kKvBlockTokens, static_cast<std::size_t>(cfg_.context));
  fit_attention_scratch(std::min(n, kAttentionRunTokens), longest);
  const auto prepare_call = [&](std::initializer_list<WeightView> ws) { ctx_.prepare(std::span(ws.begin(), ws.size()), n); };
  for (const LayerWeights& w : model_.layers()) {
    prepare_call({w.wq, w.wk, w.wv});
    prepare_call({w.wo});
    if (cfg_.is_moe()) {
      prepare_call({w.router});
      // A call's experts share the packed buffer: sized here for all of the step's routed rows,
      // however they fall among the experts.
      const std::size_t routed = n * static_cast<std::size_t>(cfg_.active_experts);
      for (const WeightView* e : {&w.gate_exps, &w.down_exps}) {
        const WeightView first = expert_slice(*e, cfg_.experts, 0);
        ctx_.prepare(std::span(&first, 1), routed, static_cast<std::size_t>(cfg_.experts));
      }
    } else {
      prepare_call({w.gate, w.up});
      prepare_call({w.down});
    }
  }
  prepare_call({model_.output()});
}

int Engine::add_sequence() {
  for (std::size_t i = 0; i < sequences_.size(); ++i) {
    if (!sequences_[i].live) {
      sequences_[i] = Sequence{true, 0, {}};
      return static_cast<int>(i);
    }
  }
  sequences_.push_back(Sequence{true, 0, {}});
  return static_cast<int>(sequences_.size() - 1);
}

void Engine::remove_sequence(int sequence) {
  Sequence& s = sequences_.at(static_cast<std::size_t>(sequence));
  free_blocks_.insert(free_blocks_.end(), s.blocks.rbegin(), s.blocks.rend());
  s = Sequence{};
}

int Engine::length(int sequence) const { return sequences_.at(static_cast<std::size_t>(sequence)).length; }

std::string_view Engine::kernel_name(const WeightView& w, std::size_t batch) const {
  return ctx_.kernel_name(w.type, batch, w.cols, w.layout);
}

std::uint8_t* Engine::kv_rows(int block, int layer, bool value, int kv_head) {
  const std::size_t part = (static_cast<std::size_t>(layer) * 2 + (value ? 1 : 0)) * static_cast<std::size_t>(cfg_.kv_heads) +
                           static_cast<std::size_t>(kv_head);
  const std::size_t head_block = kKvBlockTokens * static_cast<std::size_t>(cfg_.head_dim) * kv_elem_bytes_;
  return kv_pool_.as<std::uint8_t>() + (part * kv_blocks_ + static_cast<std::size_t>(block)) * head_block;
}

namespace {

// A task's keys and values asked for at once, at most this many bytes: beyond it they would no
// longer fit in L2 beside the next task's.
constexpr std::size_t kPrefetchBytes = 256 * 1024;

// Asks for every cache line of [p, p + bytes) into L2. Attention's keys and values were written
// one step ago and the weight stream has since pushed them out of cache; loaded on demand, each
// block's lines arrive one latency after another, which made attention a tenth of a decode step.
void prefetch_to_l2(const std::uint8_t* p, std::size_t bytes) {
  for (std::size_t i = 0; i < bytes; i += 64) __builtin_prefetch(p + i, 0, 2);
}

// How many tokens from t on attend as one run: consecutive positions of t's sequence, at most
// kAttentionRunTokens.
std::size_t run_length(std::span<const StepToken> tokens, const std::vector<int>& positions, std::size_t t) {
  std::size_t n = 1;
  while (n < kAttentionRunTokens && t + n < tokens.size() && tokens[t + n].sequence == tokens[t].sequence &&
         positions[t + n] == positions[t + n - 1] + 1) {
    ++n;
  }
  return n;
}

}  // namespace

std::size_t attention_parts(std::size_t whole_tasks, std::size_t positions, unsigned threads) {
  if (whole_tasks == 0 || whole_tasks >= threads) return 1;
  const std::size_t wanted = (threads + whole_tasks - 1) / whole_tasks;
  return std::clamp<std::size_t>(positions / kMinAttentionPart, 1, wanted);
}

double parallel_operations(int dense_layers, int moe_layers, double tokens, double experts_touched, bool logits) {
  const bool batched = tokens > 1;
  // Per layer: Q/K/V, attention, the output projection; RMSNorm, the cache writes and the
  // residual with the second RMSNorm as per-token work.
  const double shared = 3.0 + (batched ? 3.0 : 0.0);
  // Dense FFN: gate/up, down, and SwiGLU and the residual as per-token work. MoE: the router,
  // then gate and up of every touched expert in one call, and their down in another; the
  // routing, the gathering of rows, SwiGLU and the combine as per-token work.
  const double dense = shared + 2.0 + (batched ? 2.0 : 0.0);
  const double moe = shared + 1.0 + (experts_touched > 0 ? 2.0 : 0.0) + (batched ? 4.0 : 0.0);
  return dense_layers * dense + moe_layers * moe + (logits ? 1.0 : 0.0);
}

std::string_view to_string(ProductRole role) {
  switch (role) {
    case ProductRole::attention_qkv: return "attn_qkv";
    case ProductRole::attention_output: return "attn_output";
    case ProductRole::ffn_gate_up: return "ffn_gate_up";
    case ProductRole::ffn_down: return "ffn_down";
    case ProductRole::router: return "router";
    case ProductRole::expert_gate_up: return "expert_gate_up";
    case ProductRole::expert_down: return "expert_down";
    case ProductRole::output: return "output";
  }
  return "?";
}

ProductTime product_time(ProductRole role, std::span<const WeightView> ws, double seconds) {
  ProductTime p{role, {}, 1, 0, 0, seconds};
  for (const WeightView& w : ws) {
    p.bytes += bytes_of(w);
    p.rows += static_cast<std::uint64_t>(w.rows);
    // Short names fit the string's own buffer: no allocation per product.
    if (!p.formats.empty()) p.formats += '+';
    p.formats += format_info(w.type).name;
  }
  return p;
}

void accumulate(std::vector<ProductTime>& into, const ProductTime& p) {
  auto it = std::find_if(into.begin(), into.end(), [&](const ProductTime& q) { return q.role == p.role && q.formats == p.formats; });
  if (it == into.end()) {
    into.push_back(p);
    return;
  }
  it->calls += p.calls;
  it->bytes += p.bytes;
  it->rows += p.rows;
  it->seconds += p.seconds;
}

void accumulate(std::vector<ProductTime>& into, const std::vector<ProductTime>& more) {
  for (const ProductTime& p : more) accumulate(into, p);
}

void Engine::gemm(ProductRole role, const WeightView& w, const float* x, std::size_t batch, float* y) {
  gemm_shared(role, {w}, x, batch, {y});
}

void Engine::gemm_shared(ProductRole role, std::initializer_list<WeightView> ws, const float* x, std::size_t batch,
                         std::initializer_list<float*> ys) {
  const double seconds = timed([&] { ctx_.gemm_shared(std::span(ws.begin(), ws.size()), x, batch, std::span(ys.begin(), ys.size())); });
  count_product(product_time(role, std::span(ws.begin(), ws.size()), seconds));
}

void Engine::count_product(const ProductTime& p) {
  ++step_parallel_operations_;
  step_gemm_seconds_ += p.seconds;
  step_weight_bytes_ += p.bytes;
  accumulate(step_products_, p);
}

void Engine::gemm_jobs(ProductRole role, std::span<const GemmContext::Job> jobs) {
  if (jobs.empty()) return;
  const double seconds = timed([&] { ctx_.gemm_jobs(jobs); });
  // Named by the distinct formats among the matrices ("Q4_K", or "Q4_K+Q6_K"), not one name
  // per expert.
  ProductTime p{role, {}, 1, 0, 0, seconds};
  std::vector<GgmlType>& named = job_formats_;
  named.clear();
  for (const auto& j : jobs) {
    p.bytes += bytes_of(j.w);
    p.rows += static_cast<std::uint64_t>(j.w.rows);
    if (std::find(named.begin(), named.end(), j.w.type) != named.end()) continue;
    named.push_back(j.w.type);
    if (!p.formats.empty()) p.formats += '+';
    p.formats += format_info(j.w.type).name;
  }
  count_product(p);
}

int Engine::greedy_token(const float* logits) const {
  return static_cast<int>(vec_.argmax(logits, static_cast<std::size_t>(cfg_.vocab)));
}

void Engine::parallel_for(std::size_t n, const std::function<void(std::size_t, std::size_t, unsigned)>& body) {
  step_token_seconds_ += timed([&] {
    if (n == 1) {  // one token: not worth waking the team (the caller is member 0)
      body(0, 1, 0);
      return;
    }
    ++step_parallel_operations_;
    const unsigned members = ctx_.threads();
    ctx_.pool().run([&](unsigned m) {
      const RowRange r = split_rows(n, 1, m, members);
      if (r.begin < r.end) body(r.begin, r.end, m);
    });
  });
}

void Engine::step(std::span<const StepToken> tokens, std::vector<float>& logits) {
  const std::size_t n = tokens.size();
  logits.clear();
  step_weight_bytes_ = 0;
  step_gemm_seconds_ = 0;
  step_products_.clear();
  step_attention_seconds_ = 0;
  step_token_seconds_ = 0;
  step_parallel_operations_ = 0;
  step_experts_touched_ = 0;
  if (n == 0) return;
  const auto dim = static_cast<std::size_t>(cfg_.dim);
  const auto qd = static_cast<std::size_t>(cfg_.q_dim());
  const auto kvd = static_cast<std::size_t>(cfg_.kv_dim());
  const auto half = static_cast<std::size_t>(cfg_.head_dim / 2);

  // Positions, and KV blocks for them, before anything is computed: a full pool fails the step
  // cleanly instead of leaving a sequence half-advanced.
  std::vector<int> positions(n);
  std::vector<int> grown(sequences_.size(), 0);
  std::size_t blocks_needed = 0;
  for (std::size_t t = 0; t < n; ++t) {
    const auto s = static_cast<std::size_t>(tokens[t].sequence);
    if (s >= sequences_.size() || !sequences_[s].live) throw UsageError(fmt::format("sequence {} does not exist", tokens[t].sequence));
    if (tokens[t].token < 0 || tokens[t].token >= cfg_.vocab) throw UsageError(fmt::format("token {} is outside the vocabulary of {}", tokens[t].token, cfg_.vocab));
    positions[t] = sequences_[s].length + grown[s]++;
    if (positions[t] % kKvBlockTokens == 0 && static_cast<std::size_t>(positions[t] / kKvBlockTokens) >= sequences_[s].blocks.size()) ++blocks_needed;
  }
  if (blocks_needed > free_blocks_.size()) {
    throw UsageError(fmt::format("KV cache full: {} more blocks of {} tokens needed, {} free", blocks_needed, kKvBlockTokens, free_blocks_.size()));
  }
  for (std::size_t t = 0; t < n; ++t) {
    Sequence& s = sequences_[static_cast<std::size_t>(tokens[t].sequence)];
    if (static_cast<std::size_t>(positions[t] / kKvBlockTokens) >= s.blocks.size()) {
      s.blocks.push_back(free_blocks_.back());
      free_blocks_.pop_back();
    }
  }

  fit(x_, n * dim);
  fit(xn_, n * dim);
  fit(q_, n * qd);
  fit(k_, n * kvd);
  fit(v_, n * kvd);
  fit(att_, n * qd);
  fit(rope_cos_, n * half);
  fit(rope_sin_, n * half);
  for (std::size_t t = 0; t < n; ++t) {
    model_.embedding_row(tokens[t].token, &x_[t * dim]);
    rope_angles(positions[t], cfg_.head_dim, cfg_.rope_base, &rope_cos_[t * half], &rope_sin_[t * half]);
  }
  step_weight_bytes_ += model_.embedding().bytes / static_cast<std::uint64_t>(cfg_.vocab) * n;
  plan_attention(tokens, positions);

  for (int l = 0; l < cfg_.layers; ++l) {
    const LayerWeights& w = model_.layers()[static_cast<std::size_t>(l)];
    // Per-token work between the products runs on the team too: at a batch of eight it was a
    // tenth of a decode step on one thread while the others waited.
    parallel_for(n, [&](std::size_t begin, std::size_t end, unsigned) {
      for (std::size_t t = begin; t < end; ++t) rms_norm(&x_[t * dim], w.attn_norm, &xn_[t * dim], dim, cfg_.norm_eps);
    });
    gemm_shared(ProductRole::attention_qkv, {w.wq, w.wk, w.wv}, xn_.data(), n, {q_.data(), k_.data(), v_.data()});
    parallel_for(n, [&](std::size_t begin, std::size_t end, unsigned) {
      for (std::size_t t = begin; t < end; ++t) store_token(l, tokens[t], positions[t], t);
    });
    const auto attention_start = std::chrono::steady_clock::now();
    attention(l, tokens, positions);
    step_attention_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - attention_start).count();
    gemm(ProductRole::attention_output, w.wo, att_.data(), n, xn_.data());
    parallel_for(n, [&](std::size_t begin, std::size_t end, unsigned) {
      for (std::size_t t = begin; t < end; ++t) {
        for (std::size_t i = t * dim; i < (t + 1) * dim; ++i) x_[i] += xn_[i];
        rms_norm(&x_[t * dim], w.ffn_norm, &xn_[t * dim], dim, cfg_.norm_eps);
      }
    });
    if (cfg_.is_moe()) {
      mixture(w, n);
    } else {
      feed_forward(w, n);
    }
  }

  // Logits only for the tokens that want them (a prompt's last token, every decode token).
  std::vector<std::size_t> wanted;
  for (std::size_t t = 0; t < n; ++t) {
    if (tokens[t].logits) wanted.push_back(t);
  }
  for (std::size_t i = 0; i < wanted.size(); ++i) {
    rms_norm(&x_[wanted[i] * dim], model_.output_norm(), &xn_[i * dim], dim, cfg_.norm_eps);
  }
  logits.resize(wanted.size() * static_cast<std::size_t>(cfg_.vocab));
  if (!wanted.empty()) gemm(ProductRole::output, model_.output(), xn_.data(), wanted.size(), logits.data());

  for (std::size_t t = 0; t < n; ++t) sequences_[static_cast<std::size_t>(tokens[t].sequence)].length = positions[t] + 1;
}

// Biases and RoPE on token t's query and key, then its key and value into the cache, before
// attention runs: a prompt's tokens attend to each other.
void Engine::store_token(int l, const StepToken& token, int position, std::size_t t) {
  const LayerWeights& w = model_.layers()[static_cast<std::size_t>(l)];
  const auto qd = static_cast<std::size_t>(cfg_.q_dim());
  const auto kvd = static_cast<std::size_t>(cfg_.kv_dim());
  const auto half = static_cast<std::size_t>(cfg_.head_dim / 2);
  float* q = &q_[t * qd];
  float* k = &k_[t * kvd];
  float* v = &v_[t * kvd];
  if (w.bq != nullptr) {
    for (std::size_t i = 0; i < qd; ++i) q[i] += w.bq[i];
  }
  if (w.bk != nullptr) {
    for (std::size_t i = 0; i < kvd; ++i) k[i] += w.bk[i];
  }
  if (w.bv != nullptr) {
    for (std::size_t i = 0; i < kvd; ++i) v[i] += w.bv[i];
  }
  rope_rotate(q, cfg_.heads, cfg_.head_dim, &rope_cos_[t * half], &rope_sin_[t * half], cfg_.rope);
  rope_rotate(k, cfg_.kv_heads, cfg_.head_dim, &rope_cos_[t * half], &rope_sin_[t * half], cfg_.rope);
  const Sequence& s = sequences_[static_cast<std::size_t>(token.sequence)];
  const int block = s.blocks[static_cast<std::size_t>(position / kKvBlockTokens)];
  const int slot = position % kKvBlockTokens;
  const auto hd = static_cast<std::size_t>(cfg_.head_dim);
  const std::size_t at = static_cast<std::size_t>(slot) * hd * kv_elem_bytes_;  // the value row's offset
  for (int g = 0; g < cfg_.kv_heads; ++g) {
    std::uint8_t* kb = kv_rows(block, l, false, g);
    std::uint8_t* vc = kv_rows(block, l, true, g) + at;
    const float* kg = k + static_cast<std::size_t>(g) * hd;
    const float* vg = v + static_cast<std::size_t>(g) * hd;
    // Keys go in column by column (element i of every key of the block side by side, as
    // dot_keys reads them), values row by row.
    if (kv_type_ == GgmlType::f32) {
      auto* kf = reinterpret_cast<float*>(kb) + slot;
      for (std::size_t i = 0; i < hd; ++i) kf[i * kKvBlockTokens] = kg[i];
      std::memcpy(vc, vg, hd * sizeof(float));
    } else {
      // Converted with the vector kernels: one at a time, the conversions took 1.4% of a
      // TinyLlama decode's samples at eight users.
      auto* kh = reinterpret_cast<std::uint16_t*>(kb) + slot;
      std::uint16_t key[kMaxHeadDim];
      vec_.to_f16(kg, key, hd);
      vec_.to_f16(vg, reinterpret_cast<std::uint16_t*>(vc), hd);
      for (std::size_t i = 0; i < hd; ++i) kh[i * kKvBlockTokens] = key[i];
    }
  }
}

void Engine::plan_attention(std::span<const StepToken> tokens, const std::vector<int>& positions) {
  const auto kv_heads = static_cast<std::uint32_t>(cfg_.kv_heads);
  const unsigned members = ctx_.threads();
  attention_tasks_.clear();
  attention_merges_.clear();
  // Runs of a prompt's consecutive tokens, where they leave every thread a task: with fewer,
  // single tokens whose long caches are cut into parts spread the work better.
  attention_run_tokens_ = 1;
  std::size_t runs = 0;
  for (std::size_t t = 0; t < tokens.size(); t += run_length(tokens, positions, t)) ++runs;
  const bool in_runs = runs < tokens.size() && runs * kv_heads >= members;
  std::uint32_t parts_so_far = 0;
  for (std::uint32_t t = 0; t < tokens.size();) {
    const auto run = static_cast<std::uint32_t>(in_runs ? run_length(tokens, positions, t) : 1);
    const std::uint32_t last_token = t + run - 1;
    const auto len = static_cast<std::uint32_t>(positions[last_token] + 1);
    attention_run_tokens_ = std::max<std::size_t>(attention_run_tokens_, run);
    const std::size_t parts = run > 1 ? 1 : attention_parts(tokens.size() * kv_heads, len, members);
    // Parts of whole blocks, so that each starts at a block of keys.
    const auto step = static_cast<std::uint32_t>((len / parts + kKvBlockTokens - 1) / kKvBlockTokens * kKvBlockTokens);
    for (std::uint32_t g = 0; g < kv_heads; ++g) {
      if (parts == 1) {
        attention_tasks_.push_back({t, g, 0, len, kWholeTask, run});
        continue;
      }
      attention_merges_.push_back({t, g, parts_so_far, 0});
      for (std::uint32_t first = 0; first < len; first += step) {
        attention_tasks_.push_back({t, g, first, std::min(len, first + step), parts_so_far++, 1});
        ++attention_merges_.back().parts;
      }
    }
    t += run;
  }
  const auto group = static_cast<std::size_t>(cfg_.heads / cfg_.kv_heads);
  fit(part_out_, parts_so_far * group * static_cast<std::size_t>(cfg_.head_dim));
  fit(part_max_, parts_so_far * group);
  fit(part_sum_, parts_so_far * group);
}

void Engine::attention(int layer, std::span<const StepToken> tokens, const std::vector<int>& positions) {
  const auto qd = static_cast<std::size_t>(cfg_.q_dim());
  const auto hd = static_cast<std::size_t>(cfg_.head_dim);
  const auto group = static_cast<std::size_t>(cfg_.heads / cfg_.kv_heads);
  const float scale = 1.0F / std::sqrt(static_cast<float>(cfg_.head_dim));
  const int max_len = *std::max_element(positions.begin(), positions.end()) + 1;
  fit_attention_scratch(attention_run_tokens_, static_cast<std::size_t>(max_len));
  // A task is a token (or a run of a prompt's tokens), a KV head and a run of its positions
  // (planned once per step): its query heads share every key and value it loads. Tasks are
  // dealt round-robin because a prompt's later tokens attend to more positions.
  const std::size_t tasks = attention_tasks_.size();
  const unsigned members = ctx_.threads();
  const std::size_t block_bytes = kKvBlockTokens * hd * kv_elem_bytes_;
  // Longer tasks than kPrefetchBytes covers stream behind the hardware prefetcher.
  const auto prefetch_task = [&](std::size_t task) {
    const AttentionTask& a = attention_tasks_[task];
    const Sequence& s = sequences_[static_cast<std::size_t>(tokens[a.token].sequence)];
    const int g = static_cast<int>(a.kv_head);
    const std::size_t first = a.first / kKvBlockTokens;
    const std::size_t last = (a.last + kKvBlockTokens - 1) / kKvBlockTokens;
    const std::size_t end = std::min(last, first + kPrefetchBytes / (2 * block_bytes));
    for (std::size_t b = first; b < end; ++b) {
      prefetch_to_l2(kv_rows(s.blocks[b], layer, false, g), block_bytes);
      prefetch_to_l2(kv_rows(s.blocks[b], layer, true, g), block_bytes);
    }
  };
  ++step_parallel_operations_;
  ctx_.pool().run([&](unsigned member) {
    float* scores = scores_[member].data();
    if (member < tasks) prefetch_task(member);
    for (std::size_t task = member; task < tasks; task += members) {
      // The next task's cache lines arrive while this one computes.
      if (task + members < tasks) prefetch_task(task + members);
      const AttentionTask& a = attention_tasks_[task];
      const int g = static_cast<int>(a.kv_head);
      const Sequence& s = sequences_[static_cast<std::size_t>(tokens[a.token].sequence)];
      if (a.tokens > 1) {
        attend_run(layer, a, s, positions, scale, member);
        continue;
      }
      const std::size_t block0 = a.first / kKvBlockTokens;
      const float* q = &q_[a.token * qd + static_cast<std::size_t>(g) * group * hd];
      const bool whole = a.part == kWholeTask;
      float* out = whole ? &att_[a.token * qd + static_cast<std::size_t>(g) * group * hd] : &part_out_[a.part * group * hd];
      float* top = whole ? nullptr : &part_max_[a.part * group];
      float* sum = whole ? nullptr : &part_sum_[a.part * group];
      const std::size_t len = a.last - a.first;
      attend_cache(layer, s, g, block0, q, 1, &len, scale, scores, out, top, sum);
    }
    if (attention_merges_.empty()) return;
    ctx_.pool().barrier();
    // softmax over all positions = each part's softmax weighted by its share of the exp sum.
    for (std::size_t i = member; i < attention_merges_.size(); i += members) {
      const AttentionMerge& m = attention_merges_[i];
      float* out = &att_[m.token * qd + static_cast<std::size_t>(m.kv_head) * group * hd];
      for (std::size_t h = 0; h < group; ++h) {
        float top = -INFINITY;
        for (std::uint32_t p = m.first_part; p < m.first_part + m.parts; ++p) top = std::max(top, part_max_[p * group + h]);
        // Each part's exp sum rescaled to the common largest score, in place: read once below.
        double total = 0;
        for (std::uint32_t p = m.first_part; p < m.first_part + m.parts; ++p) {
          float& exp_sum = part_sum_[p * group + h];
          exp_sum = static_cast<float>(static_cast<double>(exp_sum) * std::exp(static_cast<double>(part_max_[p * group + h] - top)));
          total += static_cast<double>(exp_sum);
        }
        float* o = out + h * hd;
        std::fill(o, o + hd, 0.0F);
        for (std::uint32_t p = m.first_part; p < m.first_part + m.parts; ++p) {
          const auto share = static_cast<float>(static_cast<double>(part_sum_[p * group + h]) / total);
          const float* part = &part_out_[(p * group + h) * hd];
          for (std::size_t e = 0; e < hd; ++e) o[e] += share * part[e];
        }
      }
    }
  });
}

// Each thread's scores for runs of up to `run` tokens over `positions` cached positions, and
// (for runs) its gathered queries and outputs.
void Engine::fit_attention_scratch(std::size_t run, std::size_t positions) {
  const auto group = static_cast<std::size_t>(cfg_.heads / cfg_.kv_heads);
  for (auto& s : scores_) fit(s, run * group * positions);
  if (run == 1) return;
  for (auto* buffers : {&run_q_, &run_out_}) {
    for (auto& b : *buffers) fit(b, run * group * static_cast<std::size_t>(cfg_.head_dim));
  }
}

// attend_tokens over sequence s's cache of KV head g from block block0 on, F32 or F16.
void Engine::attend_cache(int layer, const Sequence& s, int g, std::size_t block0, const float* q, std::size_t tokens,
                          const std::size_t* lens, float scale, float* scores, float* out, float* top, float* sum) {
  const auto group = static_cast<std::size_t>(cfg_.heads / cfg_.kv_heads);
  const auto hd = static_cast<std::size_t>(cfg_.head_dim);
  const auto run = [&]<class T>(T*) {
    attend_tokens<T>(
        vec_, q, tokens, group, hd, lens, scale,
        [&](std::size_t b) { return reinterpret_cast<const T*>(kv_rows(s.blocks[block0 + b], layer, false, g)); },
        [&](std::size_t b) { return reinterpret_cast<const T*>(kv_rows(s.blocks[block0 + b], layer, true, g)); }, scores, out,
        top, sum);
  };
  if (kv_type_ == GgmlType::f32) {
    run(static_cast<float*>(nullptr));
  } else {
    run(static_cast<std::uint16_t*>(nullptr));
  }
}

// A run's query heads side by side, then their outputs back to each token's place in att_.
void Engine::attend_run(int layer, const AttentionTask& a, const Sequence& s, const std::vector<int>& positions,
                        float scale, unsigned member) {
  const auto qd = static_cast<std::size_t>(cfg_.q_dim());
  const auto hd = static_cast<std::size_t>(cfg_.head_dim);
  const auto group = static_cast<std::size_t>(cfg_.heads / cfg_.kv_heads);
  const std::size_t head0 = static_cast<std::size_t>(a.kv_head) * group * hd;  // the group's first element in a row
  const std::size_t width = group * hd;
  float* q = run_q_[member].data();
  float* out = run_out_[member].data();
  std::array<std::size_t, kAttentionRunTokens> lens{};
  for (std::size_t i = 0; i < a.tokens; ++i) {
    std::copy_n(&q_[(a.token + i) * qd + head0], width, q + i * width);
    lens[i] = static_cast<std::size_t>(positions[a.token + i] + 1);
  }
  attend_cache(layer, s, static_cast<int>(a.kv_head), 0, q, a.tokens, lens.data(), scale, scores_[member].data(), out);
  for (std::size_t i = 0; i < a.tokens; ++i) std::copy_n(out + i * width, width, &att_[(a.token + i) * qd + head0]);
}

void Engine::feed_forward(const LayerWeights& w, std::size_t n) {
  const auto dim = static_cast<std::size_t>(cfg_.dim);
  const auto ffn = static_cast<std::size_t>(cfg_.ffn);
  fit(gate_, n * ffn);
  fit(up_, n * ffn);
  gemm_shared(ProductRole::ffn_gate_up, {w.gate, w.up}, xn_.data(), n, {gate_.data(), up_.data()});
  parallel_for(n, [&](std::size_t begin, std::size_t end, unsigned) { vec_.swiglu(&gate_[begin * ffn], &up_[begin * ffn], (end - begin) * ffn); });
  gemm(ProductRole::ffn_down, w.down, gate_.data(), n, xn_.data());
  parallel_for(n, [&](std::size_t begin, std::size_t end, unsigned) {
    for (std::size_t i = begin * dim; i < end * dim; ++i) x_[i] += xn_[i];
  });
}

namespace {

// Token t's k experts: the k highest router logits (ties to the lower expert), weighted by a
// softmax over those k (Mixtral), then put in expert order, the order the combine adds them in.
void route_token(const float* logits, std::size_t experts, std::size_t k, std::uint32_t* ids, float* weights) {
  std::size_t have = 0;
  for (std::size_t e = 0; e < experts; ++e) {
    const float v = logits[e];
    if (have == k && !(v > logits[ids[k - 1]])) continue;
    std::size_t i = have < k ? have++ : k - 1;
    for (; i > 0 && v > logits[ids[i - 1]]; --i) ids[i] = ids[i - 1];
    ids[i] = static_cast<std::uint32_t>(e);
  }
  for (std::size_t i = 0; i < k; ++i) weights[i] = logits[ids[i]];
  softmax(weights, k);
  for (std::size_t i = 1; i < k; ++i) {
    const std::uint32_t id = ids[i];
    const float weight = weights[i];
    std::size_t j = i;
    for (; j > 0 && ids[j - 1] > id; --j) {
      ids[j] = ids[j - 1];
      weights[j] = weights[j - 1];
    }
    ids[j] = id;
    weights[j] = weight;
  }
}

}  // namespace

void Engine::mixture(const LayerWeights& w, std::size_t n) {
  const auto dim = static_cast<std::size_t>(cfg_.dim);
  const auto ffn = static_cast<std::size_t>(cfg_.ffn);
  const auto experts = static_cast<std::size_t>(cfg_.experts);
  const auto k = static_cast<std::size_t>(cfg_.active_experts);
  const std::size_t routed = n * k;  // a token's k experts are distinct: one row each
  fit(router_, n * experts);
  for (auto* v : {&expert_in_, &expert_out_}) fit(*v, routed * dim);
  fit(expert_gate_, routed * ffn);
  fit(expert_up_, routed * ffn);
  choice_expert_.resize(routed);
  choice_weight_.resize(routed);
  choice_row_.resize(routed);
  gemm(ProductRole::router, w.router, xn_.data(), n, router_.data());
  // The routing, the gathering of rows, SwiGLU and the combine run on the team: on one thread
  // they were a fifth of a 512-token prompt of a 64-expert model (docs/PERFORMANCE.md).
  parallel_for(n, [&](std::size_t begin, std::size_t end, unsigned) {
    for (std::size_t t = begin; t < end; ++t) route_token(&router_[t * experts], experts, k, &choice_expert_[t * k], &choice_weight_[t * k]);
  });

  // Each touched expert's rows lie together, its tokens in order: the row of every choice is
  // known before any is copied.
  expert_first_row_.assign(experts + 1, 0);
  for (const std::uint32_t e : choice_expert_) ++expert_first_row_[e + 1];
  std::partial_sum(expert_first_row_.begin(), expert_first_row_.end(), expert_first_row_.begin());
  expert_next_row_.assign(expert_first_row_.begin(), expert_first_row_.end() - 1);
  for (std::size_t c = 0; c < routed; ++c) choice_row_[c] = expert_next_row_[choice_expert_[c]]++;

  // Gate and up of every touched expert in one call, down in a second. A call per expert and
  // matrix (3 x touched per layer) paid a start of the threads each, which on a many-core
  // machine takes as long as streaming a small expert's matrix.
  expert_jobs_.clear();
  down_jobs_.clear();
  for (std::size_t e = 0; e < experts; ++e) {
    const std::size_t row = expert_first_row_[e];
    const std::size_t m = expert_first_row_[e + 1] - row;
    if (m == 0) continue;  // an expert no token chose is never read
    ++step_experts_touched_;
    const int ei = static_cast<int>(e);
    const float* in = &expert_in_[row * dim];
    float* gate = &expert_gate_[row * ffn];
    expert_jobs_.push_back({expert_slice(w.gate_exps, cfg_.experts, ei), in, m, gate});
    expert_jobs_.push_back({expert_slice(w.up_exps, cfg_.experts, ei), in, m, &expert_up_[row * ffn]});
    // Down reads what SwiGLU leaves in the gate rows.
    down_jobs_.push_back({expert_slice(w.down_exps, cfg_.experts, ei), gate, m, &expert_out_[row * dim]});
  }
  parallel_for(n, [&](std::size_t begin, std::size_t end, unsigned) {
    for (std::size_t c = begin * k; c < end * k; ++c) std::memcpy(&expert_in_[choice_row_[c] * dim], &xn_[c / k * dim], dim * sizeof(float));
  });
  gemm_jobs(ProductRole::expert_gate_up, expert_jobs_);
  // Rows, not tokens, are split here: n x k of them, whoever's they are.
  parallel_for(n, [&](std::size_t begin, std::size_t end, unsigned) {
    vec_.swiglu(&expert_gate_[begin * k * ffn], &expert_up_[begin * k * ffn], (end - begin) * k * ffn);
  });
  gemm_jobs(ProductRole::expert_down, down_jobs_);
  parallel_for(n, [&](std::size_t begin, std::size_t end, unsigned) {
    for (std::size_t t = begin; t < end; ++t) {
      float* x = &x_[t * dim];
      for (std::size_t c = t * k; c < (t + 1) * k; ++c) {
        const float* out = &expert_out_[choice_row_[c] * dim];
        const float weight = choice_weight_[c];
        for (std::size_t j = 0; j < dim; ++j) x[j] += weight * out[j];
      }
    }
  });
}

}  // namespace infercast
