#include "engine/run.h"

#include <sys/resource.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "kernels/vec.h"
#include "probes/bandwidth.h"
#include "probes/error.h"
#include "probes/random.h"
#include "probes/stats.h"
#include "probes/topology.h"
#include "probes/units.h"

namespace infercast {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Sequence c's synthetic prompt: BOS, then tokens drawn past the control tokens.
std::vector<int> synthetic_prompt(const ModelConfig& cfg, const RunOptions& o, int c, const Tokenizer* tokenizer) {
  SeededRng rng(o.seed + static_cast<std::uint64_t>(c) * 0x9E3779B97F4A7C15ULL);
  std::vector<int> prompt{tokenizer != nullptr ? tokenizer->bos() : 1 % cfg.vocab};
  const auto drawn = static_cast<std::uint64_t>(std::max(1, cfg.vocab - 3));
  while (static_cast<int>(prompt.size()) < o.prompt_tokens) prompt.push_back(3 + static_cast<int>(rng.next() % drawn));
  return prompt;
}

}  // namespace

int argmax(const float* logits, int vocab) {
  return static_cast<int>(argmax_reference(logits, static_cast<std::size_t>(vocab)));
}

std::uint64_t peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<std::uint64_t>(u.ru_maxrss) * 1024;  // Linux reports KiB
}

// Prefill and decode on an engine that lives only inside this call, so that the DRAM reads
// measured around it share the cores with no spinning team.
void run_engine(const Model& model, const RunOptions& o, const std::vector<std::vector<int>>& prompts, std::size_t length, RunReport& r) {
  const ModelConfig& cfg = model.config();
  EngineOptions eo;
  eo.threads = o.threads;
  eo.kv_type = o.kv_type;
  eo.isa = o.isa;
  eo.kv_tokens = static_cast<std::size_t>(o.concurrency) * (length + kKvBlockTokens);
  // Every buffer sized and touched before the clocks start: a run measures the steady state a
  // server reaches, not its first page faults (the first run in a process took a 0.85B model's
  // prompt 90 ms beyond its products, the next ones 36; docs/PERFORMANCE.md, seventeenth session).
  const std::size_t prompt_length = prompts.front().size();
  eo.step_sizes = {std::min(prompt_length, static_cast<std::size_t>(o.max_batch)), static_cast<std::size_t>(o.concurrency)};
  Engine engine(model, eo);

  r.numa = engine.numa();
  r.prompt_tokens = static_cast<int>(prompt_length);
  r.gen_tokens = o.gen_tokens;
  r.concurrency = o.concurrency;
  r.threads = engine.context().threads();
  r.isa = std::string(to_string(engine.context().level()));
  r.decode_kernel = std::string(engine.kernel_name(model.layers().front().wq, static_cast<std::size_t>(o.concurrency)));
  r.prefill_kernel = std::string(engine.kernel_name(model.layers().front().wq, std::min(prompt_length, static_cast<std::size_t>(o.max_batch))));
  r.weight_bytes = model.weight_bytes();
  r.kv_cache_bytes = engine.kv_cache_bytes();

  // Prefill each sequence in steps of at most max_batch tokens; only the last token's logits.
  std::vector<int> seqs;
  std::vector<int> next(static_cast<std::size_t>(o.concurrency));
  std::vector<float> logits(static_cast<std::size_t>(o.concurrency) * static_cast<std::size_t>(cfg.vocab));
  const auto prefill_start = std::chrono::steady_clock::now();
  for (int c = 0; c < o.concurrency; ++c) {
    const auto seq_start = std::chrono::steady_clock::now();
    const int s = engine.add_sequence();
    seqs.push_back(s);
    const std::vector<int>& prompt = prompts[static_cast<std::size_t>(c) % prompts.size()];
    for (std::size_t begin = 0; begin < prompt.size(); begin += static_cast<std::size_t>(o.max_batch)) {
      const std::size_t end = std::min(prompt.size(), begin + static_cast<std::size_t>(o.max_batch));
      std::vector<StepToken> batch;
      for (std::size_t i = begin; i < end; ++i) batch.push_back({s, prompt[i], i + 1 == prompt.size()});
      engine.step(batch, logits);
      r.prefill_gemm_seconds += engine.last_step_gemm_seconds();
      r.prefill_attention_seconds += engine.last_step_attention_seconds();
      r.prefill_token_seconds += engine.last_step_token_seconds();
    }
    next[static_cast<std::size_t>(c)] = engine.greedy_token(logits.data());
    if (c == 0) r.ttft_ms = 1e3 * seconds_since(seq_start);
  }
  r.prefill_seconds = seconds_since(prefill_start);
  const double prompt_total = static_cast<double>(prompt_length) * o.concurrency;
  r.prefill_tps = prompt_total / r.prefill_seconds;
  r.prefill_gops = 2.0 * static_cast<double>(model.parameters()) * prompt_total / r.prefill_seconds / 1e9;

  // Decode: every sequence advances one token per step; the first token came from prefill.
  r.tokens.assign(static_cast<std::size_t>(o.concurrency), {});
  for (int c = 0; c < o.concurrency; ++c) r.tokens[static_cast<std::size_t>(c)].push_back(next[static_cast<std::size_t>(c)]);
  std::uint64_t decode_bytes = 0;
  const auto decode_start = std::chrono::steady_clock::now();
  for (int g = 1; g < o.gen_tokens; ++g) {
    std::vector<StepToken> batch;
    for (int c = 0; c < o.concurrency; ++c) batch.push_back({seqs[static_cast<std::size_t>(c)], next[static_cast<std::size_t>(c)], true});
    engine.step(batch, logits);
    decode_bytes += engine.last_step_weight_bytes();
    r.decode_gemm_seconds += engine.last_step_gemm_seconds();
    accumulate(r.decode_products, engine.last_step_products());
    r.decode_attention_seconds += engine.last_step_attention_seconds();
    r.decode_token_seconds += engine.last_step_token_seconds();
    for (int c = 0; c < o.concurrency; ++c) {
      next[static_cast<std::size_t>(c)] = engine.greedy_token(&logits[static_cast<std::size_t>(c) * static_cast<std::size_t>(cfg.vocab)]);
      r.tokens[static_cast<std::size_t>(c)].push_back(next[static_cast<std::size_t>(c)]);
    }
  }
  r.decode_seconds = seconds_since(decode_start);
  const int steps = o.gen_tokens - 1;
  if (steps > 0 && r.decode_seconds > 0) {
    r.decode_tps = static_cast<double>(steps) * o.concurrency / r.decode_seconds;
    r.decode_tps_per_seq = static_cast<double>(steps) / r.decode_seconds;
    r.decode_bytes_per_step = decode_bytes / static_cast<std::uint64_t>(steps);
    r.decode_weight_gbs = static_cast<double>(decode_bytes) / r.decode_seconds / 1e9;
  }
}

RunReport run_model(const Model& model, const RunOptions& o, const Tokenizer* tokenizer) {
  const ModelConfig& cfg = model.config();
  if (o.concurrency < 1 || o.concurrency > 4096) throw UsageError("--concurrency must be between 1 and 4096");
  if (o.gen_tokens < 1) throw UsageError("--gen-tokens must be at least 1");
  if (o.max_batch < 1) throw UsageError("the prefill batch must be at least 1");
  if (o.threads == 0 || o.threads > host_topology().cores) {
    throw UsageError(fmt::format("--threads must be between 1 and {} (the physical cores)", host_topology().cores));
  }

  std::vector<std::vector<int>> prompts;  // one per sequence, or one text for all
  if (o.prompt) {
    if (tokenizer == nullptr) throw UsageError("--prompt needs a model with a llama (SentencePiece) vocabulary");
    prompts.push_back(tokenizer->encode(*o.prompt, true));
  } else {
    if (o.prompt_tokens < 1) throw UsageError("--prompt-tokens must be at least 1");
    for (int c = 0; c < o.concurrency; ++c) prompts.push_back(synthetic_prompt(cfg, o, c, tokenizer));
  }
  const std::size_t prompt_length = prompts.front().size();
  const auto length = prompt_length + static_cast<std::size_t>(o.gen_tokens);
  if (length > static_cast<std::size_t>(cfg.context)) {
    throw UsageError(fmt::format("{} prompt + {} generated tokens exceed the model's context of {}", prompt_length, o.gen_tokens, cfg.context));
  }

  // The KV pool is allocated up front: refuse one that cannot fit rather than fail half-way.
  const std::uint64_t kv_bytes = static_cast<std::uint64_t>(o.concurrency) * (length + kKvBlockTokens) *
                                 static_cast<std::uint64_t>(cfg.layers) * 2 * static_cast<std::uint64_t>(cfg.kv_dim()) *
                                 (o.kv_type == GgmlType::f32 ? 4 : 2);
  if (kv_bytes > available_memory_bytes()) {
    throw UsageError(fmt::format("the KV cache for {} sequences of {} tokens needs {}, more than the {} available",
                                 o.concurrency, length, format_size(kv_bytes), format_size(available_memory_bytes())));
  }
  RunReport r;
  const IsaLevel level = o.isa ? std::min(*o.isa, active_level()) : active_level();
  if (o.check_read) r.dram_read_before_gbs = measure_dram_read_gbs(o.threads, level);
  run_engine(model, o, prompts, length, r);
  if (o.check_read) {
    r.dram_read_after_gbs = measure_dram_read_gbs(o.threads, level);
    r.decode_read_fraction = r.decode_weight_gbs / (0.5 * (r.dram_read_before_gbs + r.dram_read_after_gbs));
  }
  if (tokenizer != nullptr) {
    for (const auto& seq : r.tokens) {
      std::string text;
      for (int t : seq) text += tokenizer->decode(t);
      r.text.push_back(std::move(text));
    }
  }
  r.peak_rss_bytes = peak_rss_bytes();
  return r;
}

RunSeries run_series(const Model& model, const RunOptions& o, const Tokenizer* tokenizer, int repetitions) {
  if (repetitions < 1 || repetitions > 100) throw UsageError("--repetitions must be between 1 and 100");
  RunSeries series;
  if (repetitions > 1) {
    run_model(model, o, tokenizer);
    series.warmed_up = true;
  }
  std::vector<RunReport> runs;
  for (int i = 0; i < repetitions; ++i) {
    runs.push_back(run_model(model, o, tokenizer));
    series.prefill_tps.push_back(runs.back().prefill_tps);
    series.decode_tps.push_back(runs.back().decode_tps);
    series.ttft_ms.push_back(runs.back().ttft_ms);
  }
  series.report = runs.front();
  // Each figure's median on its own, as llama-bench summarises its prompt and generation tests
  // apart: a run fast in prefill need not be fast in decode.
  for (double RunReport::*field :
       {&RunReport::prefill_seconds, &RunReport::decode_seconds, &RunReport::prefill_tps, &RunReport::decode_tps,
        &RunReport::decode_tps_per_seq, &RunReport::ttft_ms, &RunReport::prefill_gops, &RunReport::decode_weight_gbs,
        &RunReport::prefill_gemm_seconds, &RunReport::decode_gemm_seconds, &RunReport::prefill_attention_seconds,
        &RunReport::decode_attention_seconds, &RunReport::prefill_token_seconds, &RunReport::decode_token_seconds,
        &RunReport::dram_read_before_gbs, &RunReport::dram_read_after_gbs,
        &RunReport::decode_read_fraction}) {
    std::vector<double> values;
    for (const RunReport& r : runs) values.push_back(r.*field);
    series.report.*field = median_of(values);
  }
  for (ProductTime& p : series.report.decode_products) {
    std::vector<double> values;
    for (const RunReport& r : runs) {
      for (const ProductTime& q : r.decode_products) {
        if (q.role == p.role && q.formats == p.formats) values.push_back(q.seconds);
      }
    }
    p.seconds = median_of(values);
  }
  for (const RunReport& r : runs) series.report.peak_rss_bytes = std::max(series.report.peak_rss_bytes, r.peak_rss_bytes);
  return series;
}

}  // namespace infercast
