#pragma once
// What `infercast run` measures: prefill of a prompt per sequence, then greedy decode of C
// sequences together, one token each per step, like llama-bench's pp/tg but with concurrency.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/model.h"
#include "engine/placement.h"
#include "engine/tokenizer.h"

namespace infercast {

struct RunOptions {
  unsigned threads = 1;
  int prompt_tokens = 128;   // ignored when prompt text is given
  int gen_tokens = 32;
  int concurrency = 1;
  std::optional<std::string> prompt;  // text, encoded with the model's tokenizer, for every sequence
  // The synthetic prompts: sequence c draws its own from seed + c x a large odd constant
  // (sequence 0 from the seed itself), as distinct users send distinct prompts. Copies of one
  // prompt would decode the same tokens and, in a MoE model, route every sequence to the same
  // experts: a batch of C would read the weights of one user.
  std::uint64_t seed = 1;
  GgmlType kv_type = GgmlType::f16;
  std::optional<IsaLevel> isa;
  int max_batch = 512;                // prompt tokens per prefill step
  // Measure the DRAM read (the probe's kernel) just before and after the run: on a shared host
  // the read moves by tens of percent between minutes, and decode is judged against it.
  bool check_read = false;
};

struct RunReport {
  int prompt_tokens = 0;
  int gen_tokens = 0;
  int concurrency = 0;
  unsigned threads = 0;
  std::string isa;
  std::string decode_kernel;
  std::string prefill_kernel;
  double prefill_seconds = 0;
  double decode_seconds = 0;
  double prefill_tps = 0;         // prompt tokens of all sequences / prefill time
  double decode_tps = 0;          // generated tokens of all sequences / decode time
  double decode_tps_per_seq = 0;
  double ttft_ms = 0;             // first sequence: prompt in to first token out
  double prefill_gops = 0;        // 2 x parameters x prompt tokens / prefill time
  std::uint64_t weight_bytes = 0;            // the whole file's tensors
  std::uint64_t decode_bytes_per_step = 0;   // weight bytes one decode step read (mean)
  double decode_weight_gbs = 0;
  double prefill_gemm_seconds = 0;  // of prefill_seconds, in weight-matrix products
  double decode_gemm_seconds = 0;   // of decode_seconds, likewise
  // decode_gemm_seconds by kind of product and format, summed over the decode's steps.
  std::vector<ProductTime> decode_products;
  double prefill_attention_seconds = 0;  // of prefill_seconds, in attention over the KV cache
  double decode_attention_seconds = 0;   // of decode_seconds, likewise
  // Of each, in the per-token work between products and attention (Engine::last_step_token_seconds).
  double prefill_token_seconds = 0;
  double decode_token_seconds = 0;
  std::uint64_t kv_cache_bytes = 0;
  std::uint64_t peak_rss_bytes = 0;
  double dram_read_before_gbs = 0;  // with check_read; 0 otherwise
  double dram_read_after_gbs = 0;
  double decode_read_fraction = 0;  // decode_weight_gbs / the mean of the two reads
  NumaPlacement numa;                        // where the weights' pages were placed
  std::vector<std::vector<int>> tokens;      // generated, per sequence
  std::vector<std::string> text;             // the same decoded, when there is a tokenizer
};

// Throws UsageError for impossible options (too many tokens for the context, etc.).
RunReport run_model(const Model& model, const RunOptions& options, const Tokenizer* tokenizer);

// A measurement repeated on one loaded model, as llama-bench repeats a test: on a shared host one
// decode run differs from the next by 13-15% (standard deviation, docs/PERFORMANCE.md), so a
// single run is a sample, not a figure.
struct RunSeries {
  // Every timed figure (rates, seconds, GB/s, the reads, each product's seconds) the median of
  // the runs' own, each taken apart; tokens and text are the first run's (every run generates the same); peak RSS the
  // largest.
  RunReport report;
  // Each measured run's figures, in order.
  std::vector<double> prefill_tps;
  std::vector<double> decode_tps;
  std::vector<double> ttft_ms;
  bool warmed_up = false;  // a first run was made and dropped
};
// `repetitions` measured runs; with more than one, a warm-up run before them is dropped (the
// first run after a load pays for the KV pool's first touch and the threads' first start).
// Throws UsageError unless 1 <= repetitions <= 100, and for what run_model refuses.
RunSeries run_series(const Model& model, const RunOptions& options, const Tokenizer* tokenizer, int repetitions);

// Index of the largest logit (the lowest index among ties): greedy decoding, as
// Engine::greedy_token gives it with the vector kernels.
int argmax(const float* logits, int vocab);

std::uint64_t peak_rss_bytes();

}  // namespace infercast
