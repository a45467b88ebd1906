#pragma once
// The optimized forward pass: one call runs the model over a set of tokens from any number of
// sequences (a prompt's tokens for prefill, one token per sequence for batched decode), so every
// weight matrix is read once per step for all of them.
//
//   Engine engine(model, {.threads = 2});
//   int s = engine.add_sequence();
//   engine.step(tokens_of(s, prompt), logits);    // prefill
//   engine.step({{s, next}}, logits);             // decode
//
// KV cache: a pool of fixed-size blocks (F16 or F32) shared by all sequences; each sequence has
// a block table, so sequences of any lengths share one allocation and a finished sequence's
// blocks go straight to the next one.
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/model.h"
#include "engine/placement.h"
#include "kernels/aligned_buffer.h"
#include "kernels/gemm.h"
#include "probes/memory.h"
#include "kernels/vec.h"

namespace infercast {

struct EngineOptions {
  unsigned threads = 1;
  GgmlType kv_type = GgmlType::f16;    // f16 or f32
  std::size_t kv_tokens = 4096;        // pool capacity, tokens over all sequences
  std::optional<IsaLevel> isa;         // default: the active level
  // Tokens per step to prepare for (a prompt's chunk, the decode batch): the step's buffers,
  // the kernels' activation buffers and the KV pool are sized and touched at construction, so
  // the first steps of these sizes take no page faults. Empty: buffers grow as steps need them.
  std::vector<std::size_t> step_sizes;
};

struct StepToken {
  int sequence = 0;
  int token = 0;
  bool logits = true;  // whether this token's logits are wanted
};

// Thread-team starts one step over `tokens` tokens makes: each product call (Q, K and V share
// one, as do gate and up), attention, the per-token work between them (inline for one token),
// and the output head when `logits` are wanted. A MoE layer starts its router's product, and
// when its tokens touch any expert (`experts_touched` per MoE layer) one call for every touched
// expert's gate and up and one for their down. Each start costs a wake-up
// and a barrier whatever the step's size, so the forecast counts them (Engine counts its own;
// a test holds the two together).
double parallel_operations(int dense_layers, int moe_layers, double tokens, double experts_touched, bool logits);

// The kinds of weight product in a step. A step's products summed by kind (over its layers)
// tell where its matrix time goes, and let each be set beside the kernel sweep's figure for the
// same format and size.
enum class ProductRole { attention_qkv, attention_output, ffn_gate_up, ffn_down, router, expert_gate_up, expert_down, output };
std::string_view to_string(ProductRole role);

struct ProductTime {
  ProductRole role = ProductRole::attention_qkv;
  std::string formats;  // the weight format, or the formats of matrices sharing a call ("Q4_K+Q6_K")
  int calls = 0;
  std::uint64_t bytes = 0;  // weight bytes read
  std::uint64_t rows = 0;   // output rows computed, per call summed
  double seconds = 0;
};

// One call of `role` over the matrices `ws` (several when they share the call) that took `seconds`.
ProductTime product_time(ProductRole role, std::span<const WeightView> ws, double seconds);

// Adds `more` into `into`, product kind by product kind (kinds new to `into` appended).
void accumulate(std::vector<ProductTime>& into, const ProductTime& more);
void accumulate(std::vector<ProductTime>& into, const std::vector<ProductTime>& more);

inline constexpr int kKvBlockTokens = 16;
static_assert(kKvBlockTokens == kKeyBlock, "a KV block is one block of keys for dot_keys");

// Attention runs one task per token and KV head. With fewer such `whole_tasks` than threads (one
// user of a model with few KV heads), a token's cache of `positions` is cut into this many
// parts, each of at least kMinAttentionPart positions, which threads take apart and merge after.
// Parts of 64 positions still paid here: one user of a one-KV-head model at 300 positions spent
// 0.71 of the attention time with parts of 64 that it did with none (docs/PERFORMANCE.md).
inline constexpr std::size_t kMinAttentionPart = 64;
std::size_t attention_parts(std::size_t whole_tasks, std::size_t positions, unsigned threads);

// A prompt's consecutive tokens attend in runs of up to this many (attend_tokens), each block of
// keys and values loaded once for the run, where there are enough runs to keep every thread busy.
inline constexpr std::size_t kAttentionRunTokens = 4;

class Engine {
 public:
  Engine(const Model& model, const EngineOptions& options);

  int add_sequence();
  void remove_sequence(int sequence);
  [[nodiscard]] int length(int sequence) const;

  // Appends each token to its sequence (in order) and runs the model once over all of them.
  // `logits` receives vocab floats per token that asked for them, in token order.
  void step(std::span<const StepToken> tokens, std::vector<float>& logits);

  [[nodiscard]] std::uint64_t kv_cache_bytes() const { return kv_pool_bytes_; }
  // Weight bytes the last step read (MoE: only the experts its tokens were routed to).
  [[nodiscard]] std::uint64_t last_step_weight_bytes() const { return step_weight_bytes_; }
  // Seconds the last step spent in weight-matrix products; the rest of a step is attention,
  // norms, RoPE and the cache (what the forecast calls the engine's overheads).
  [[nodiscard]] double last_step_gemm_seconds() const { return step_gemm_seconds_; }
  // The same seconds, bytes and rows by kind of product and format, in the order first met.
  [[nodiscard]] const std::vector<ProductTime>& last_step_products() const { return step_products_; }
  // Seconds the last step spent in attention over the KV cache (scores, softmax, weighted sum).
  [[nodiscard]] double last_step_attention_seconds() const { return step_attention_seconds_; }
  // Seconds the last step spent in its per-token work between those: norms, RoPE and the cache
  // writes, SwiGLU, residuals, MoE routing and combining. What is left of a step is its set-up
  // (embeddings, RoPE angles, the attention plan) and the output norm.
  [[nodiscard]] double last_step_token_seconds() const { return step_token_seconds_; }
  // Thread-team starts of the last step (see parallel_operations), and the experts its MoE
  // layers' tokens were routed to, summed over those layers.
  [[nodiscard]] int last_step_parallel_operations() const { return step_parallel_operations_; }
  [[nodiscard]] int last_step_experts_touched() const { return step_experts_touched_; }
  [[nodiscard]] GemmContext& context() { return ctx_; }
  // Greedy decoding: the token of the largest of a token's vocab logits (argmax in run.h, with
  // the vector kernels).
  [[nodiscard]] int greedy_token(const float* logits) const;
  // Where the weights' pages were placed for this engine's threads (NUMA machines).
  [[nodiscard]] const NumaPlacement& numa() const { return numa_; }
  // The kernel a product of `w` with `batch` activation rows runs on.
  [[nodiscard]] std::string_view kernel_name(const WeightView& w, std::size_t batch) const;

 private:
  struct Sequence {
    bool live = false;
    int length = 0;
    std::vector<int> blocks;
  };

  void gemm(ProductRole role, const WeightView& w, const float* x, std::size_t batch, float* y);
  // Matrices sharing one input: one activation packing and one start of the threads.
  void gemm_shared(ProductRole role, std::initializer_list<WeightView> ws, const float* x, std::size_t batch,
                   std::initializer_list<float*> ys);
  // Matrices of different inputs and batches (a MoE layer's experts) in one start of the threads.
  void gemm_jobs(ProductRole role, std::span<const GemmContext::Job> jobs);
  // Adds one product call, timed, to the step's counts (team starts, time, bytes, by kind).
  void count_product(const ProductTime& p);
  // One KV head's keys (or values) for the kKvBlockTokens tokens of a block, contiguous, so
  // attention over one head streams whole cache lines: values token by token, keys element by
  // element (the column layout of VecOps::dot_keys).
  std::uint8_t* kv_rows(int block, int layer, bool value, int kv_head);
  void store_token(int layer, const StepToken& token, int position, std::size_t t);
  void attention(int layer, std::span<const StepToken> tokens, const std::vector<int>& positions);
  // Fills attention_tasks_ (and attention_merges_ for caches cut into parts) for a step; every
  // layer runs the same tasks.
  void plan_attention(std::span<const StepToken> tokens, const std::vector<int>& positions);
  void feed_forward(const LayerWeights& w, std::size_t n);
  void mixture(const LayerWeights& w, std::size_t n);
  // Sizes and touches every buffer a step over `tokens` tokens uses (see EngineOptions).
  void prepare(std::size_t tokens);
  void parallel_for(std::size_t n, const std::function<void(std::size_t begin, std::size_t end, unsigned member)>& body);

  const Model& model_;
  const ModelConfig& cfg_;
  GemmContext ctx_;
  NumaPlacement numa_;  // the engine owns the thread-to-core pinning the placement follows
  const VecOps& vec_;
  GgmlType kv_type_;
  std::size_t kv_elem_bytes_;
  std::size_t kv_block_bytes_;  // one block: every layer's K and V for kKvBlockTokens tokens
  // The pool is laid out [layer][K, V][KV head][block][16 tokens' elements]: a sequence's blocks,
  // handed out in order, lie one after another for each head, so attention reads one long run
  // per head that the hardware prefetcher follows. Block by block, each head's 2 KiB were a
  // separate short run, and at this host's 250-470 ns DRAM latency a decode step at batch 8
  // spent a sixth of its time waiting for them.
  std::size_t kv_blocks_ = 0;
  std::uint64_t kv_pool_bytes_ = 0;
  // Huge pages: attention visits every block of every sequence each step, and on 4 KiB pages
  // each block would be a TLB miss of its own.
  PageBuffer kv_pool_;
  std::vector<int> free_blocks_;
  std::vector<Sequence> sequences_;
  std::uint64_t step_weight_bytes_ = 0;
  double step_gemm_seconds_ = 0;
  std::vector<ProductTime> step_products_;
  double step_attention_seconds_ = 0;
  double step_token_seconds_ = 0;
  int step_parallel_operations_ = 0;
  int step_experts_touched_ = 0;

  // Activations of the current step, T rows each.
  std::vector<float> x_, xn_, q_, k_, v_, att_, gate_, up_, router_;
  std::vector<float> rope_cos_, rope_sin_;
  std::vector<std::vector<float>> scores_;  // per thread
  // A run's query heads gathered, and its outputs before they are scattered: per thread.
  std::vector<std::vector<float>> run_q_, run_out_;
  // Attention's tasks: positions [first, last) of a token's KV head, into att_ when whole, else
  // into part `part` of the part_ buffers, which a merge of the token and head then combines;
  // or, whole, `tokens` consecutive tokens of one sequence from `token` on (a run), the last
  // of them over [first, last).
  static constexpr std::uint32_t kWholeTask = ~0U;
  struct AttentionTask {
    std::uint32_t token, kv_head, first, last, part, tokens;
  };
  std::size_t attention_run_tokens_ = 1;  // the longest run of this step
  void fit_attention_scratch(std::size_t run, std::size_t positions);
  void attend_run(int layer, const AttentionTask& a, const Sequence& s, const std::vector<int>& positions, float scale,
                  unsigned member);
  void attend_cache(int layer, const Sequence& s, int g, std::size_t block0, const float* q, std::size_t tokens,
                    const std::size_t* lens, float scale, float* scores, float* out, float* top = nullptr,
                    float* sum = nullptr);
  struct AttentionMerge {
    std::uint32_t token, kv_head, first_part, parts;
  };
  std::vector<AttentionTask> attention_tasks_;
  std::vector<AttentionMerge> attention_merges_;
  std::vector<float> part_out_, part_max_, part_sum_;  // per part: group x head_dim; group; group
  // A MoE layer's routed rows, expert after expert (k rows per token).
  std::vector<float> expert_in_, expert_gate_, expert_up_, expert_out_;
  // Token t's choices are c = t x k + i: the expert, its weight and the row it was gathered to.
  std::vector<std::uint32_t> choice_expert_, choice_row_;
  std::vector<float> choice_weight_;
  std::vector<std::uint32_t> expert_first_row_, expert_next_row_;  // per expert (and one past)
  std::vector<GemmContext::Job> expert_jobs_, down_jobs_;  // gate and up of each touched expert; down
  std::vector<GgmlType> job_formats_;  // the formats a call of jobs has met so far
};

}  // namespace infercast
