#pragma once
// Matrix products of quantized weights with float activations: y = x W^T for a batch of
// activation rows, the operation behind every linear layer of a transformer.
//
//   GemmContext ctx(threads);                 // persistent pinned threads and scratch
//   ctx.gemm(weights, x, batch, y);           // y[b][r] = dot(weights row r, x[b])
//
// The context picks the kernel for its ISA level (scalar, AVX2, AVX-512, AMX), quantizes the
// activations once per call into the format the weights call for (Q8_0, Q8_K or none), and
// splits output rows across threads.
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "kernels/aligned_buffer.h"
#include "kernels/blocks.h"
#include "kernels/thread_pool.h"
#include "probes/cpu_features.h"

namespace infercast {

// How a matrix's bytes are ordered. `gguf`: row after row, each its blocks, as in the file.
// `interleaved8`: every full group of eight rows interleaved (kernels/interleave.h) in the same
// bytes, for the kernels that read it faster; rows keep their offsets in multiples of eight.
enum class WeightLayout : std::uint8_t { gguf, interleaved8 };

// A row-major weight matrix in one of the weight formats. cols must be a multiple of the
// format's block size; row_bytes is normally format_info(type).row_bytes(cols).
struct WeightView {
  GgmlType type = GgmlType::f32;
  const void* data = nullptr;
  std::size_t rows = 0;
  std::size_t cols = 0;
  std::size_t row_bytes = 0;
  WeightLayout layout = WeightLayout::gguf;
};
WeightView make_weight_view(GgmlType type, const void* data, std::size_t rows, std::size_t cols);

// The layout the kernels of `level` multiply `type` fastest in: interleaved for the block
// formats on AVX2, AVX-512 and AMX (whose row kernels are bound by instructions, not by memory;
// the AMX tiles decode either layout); GGUF for the scalar reference and the float formats.
WeightLayout preferred_layout(GgmlType type, IsaLevel level);
// Rewrites the matrix in place into `layout` (from GGUF; `data` is w.data, writable) and
// returns its view. A no-op for a format without that layout.
WeightView relayout(const WeightView& w, std::uint8_t* data, WeightLayout layout);
// Row r in the GGUF layout: a pointer into the matrix, or the row decoded into `scratch`.
const std::uint8_t* gguf_row(const WeightView& w, std::size_t r, std::vector<std::uint8_t>& scratch);
// Threads split a GEMM's output rows in multiples of this.
std::size_t row_split_step(const WeightView& w);

struct GemmKernel;  // internal: one implementation for one format at one ISA variant

// Whether the guided schedule is worth its runs in a product of `weight_bytes` against `batch`
// activation rows on `threads` threads. Each run restarts a thread's weight streams, and a
// GEMV's runs shrink to 64 KiB, a few microseconds each: where a thread's share is below
// kGuidedLeastShare the restarts cost more than the balance gains, and the product is split
// once, in proportion to the threads' measured speeds (SpeedSplit). Every GEMV of TinyLlama's
// decode split equally against guided, on the Zen 5 guest (docs/PERFORMANCE.md, thirty-first
// session): its 0.3-4.5 MB products ran 1.00-1.18x as fast, Q4_0's and Q4_K's 6.5 MB FFN
// products 1.02-1.06x, Q8_0's 12 MB and F16's 8-23 MB 0.95-0.97x, the 35-66 MB output heads
// 0.94-0.99x. Split by speed instead of equally, decode's products took 0.87-0.99x the time
// (thirty-third session), and so did batches of 2 and 4 against their guided runs (0.88-0.94x;
// Q8_0 at 4 1.01x). Batches of kGuidedLeastBatch rows or more keep their runs: eight users split
// by speed took 1.03x the time, and prefill split equally ran 0.90-0.98x as fast.
inline constexpr std::size_t kGuidedLeastShare = std::size_t{4} << 20;
inline constexpr std::size_t kGuidedLeastBatch = 5;
[[nodiscard]] bool guided_rows_pay(std::size_t weight_bytes, std::size_t batch, unsigned threads);

class GemmContext {
 public:
  // threads >= 1; level defaults to the process's active level (flag, INFERCAST_ISA, machine).
  explicit GemmContext(unsigned threads, std::optional<IsaLevel> level = std::nullopt);
  // The same with some of the host's features masked off (e.g. VNNI), so one machine can run
  // the variants older CPUs would get. `features` must not claim anything the host lacks.
  GemmContext(unsigned threads, std::optional<IsaLevel> level, const CpuFeatures& features);
  ~GemmContext();
  GemmContext(const GemmContext&) = delete;
  GemmContext& operator=(const GemmContext&) = delete;

  [[nodiscard]] unsigned threads() const { return pool_.size(); }

  // How a call's output rows reach the threads. `guided` (the default): each thread takes a
  // run of rows at a time, half its share of what is left, down to 64 KiB of weights, so a
  // thread the host slows down leaves its rows to the others (on a shared 2-vCPU guest this
  // ran decode 2-10% faster; docs/PERFORMANCE.md); products too short for that to pay (see
  // guided_rows_pay) are split once, by the threads' speeds in earlier calls. `fixed`: thread
  // m always gets split_rows(rows, step, m, threads), what NUMA placement binds each thread's
  // rows by. Every row is computed alike either way: the results are bit for bit the same.
  enum class RowSchedule { guided, fixed };
  void set_row_schedule(RowSchedule s) { schedule_ = s; }
  [[nodiscard]] RowSchedule row_schedule() const { return schedule_; }
  [[nodiscard]] IsaLevel level() const { return level_; }
  ThreadPool& pool() { return pool_; }

  // y[b * ldy + r] = sum_k W[r][k] * x[b * ldx + k] for b < batch, r < rows.
  void gemm(const WeightView& w, const float* x, std::size_t ldx, std::size_t batch, float* y, std::size_t ldy);
  void gemm(const WeightView& w, const float* x, std::size_t batch, float* y) {
    gemm(w, x, w.cols, batch, y, w.rows);
  }

  // Several matrices of the same row length against one input (a layer's Q, K and V; gate and
  // up): the activations are quantized once per activation format and the threads started
  // once; each matrix's rows are split between them as gemm() would. ys[i] gets batch rows
  // of ws[i].rows outputs.
  void gemm_shared(std::span<const WeightView> ws, const float* x, std::size_t batch, std::span<float* const> ys);

  // One product of a call whose matrices take different inputs and batch sizes: y gets batch
  // rows of w.rows outputs from batch rows of x (w.cols floats each).
  struct Job {
    WeightView w;
    const float* x = nullptr;
    std::size_t batch = 0;
    float* y = nullptr;
  };
  // Every job in one start of the threads: a MoE layer's touched experts, each over its own
  // tokens, which one call apiece would pay a team start for (a few microseconds, as long as
  // streaming a small expert's matrix on a many-core machine). Jobs of one input, row length
  // and batch (an expert's gate and up) quantize it once; a job of batch 0 is skipped.
  void gemm_jobs(std::span<const Job> jobs);

  // Sizes and touches, now, the activation and scratch buffers that a gemm_shared() of `ws` over
  // `batch` rows will need, so that the first call does not take their page faults (on the
  // development host they cost a fresh engine's first prompt tens of milliseconds;
  // docs/PERFORMANCE.md, seventeenth session). Buffers only grow: call it for every shape of
  // call to come. `parts` > 1: the batch's rows may come split among up to that many jobs of
  // each matrix (gemm_jobs over a MoE layer's experts), each packed on its own.
  void prepare(std::span<const WeightView> ws, std::size_t batch, std::size_t parts = 1);

  // The name of the kernel gemm() would use, e.g. "avx512_vnni" or "amx_int8".
  [[nodiscard]] std::string_view kernel_name(GgmlType type, std::size_t batch, std::size_t cols,
                                             WeightLayout layout = WeightLayout::gguf) const;
  [[nodiscard]] WeightLayout preferred_layout(GgmlType type) const { return infercast::preferred_layout(type, level_); }
  // Bytes the packed activations may take before a call has to grow (and fault in) the buffer.
  [[nodiscard]] std::size_t packed_capacity() const { return packed_.capacity(); }

 private:
  struct Product {
    const WeightView* w;
    const float* x;
    std::size_t ldx;
    float* y;
    std::size_t ldy;
    std::size_t batch;
  };
  struct Plan;  // the products of one call as the threads run them (gemm.cpp)
  const GemmKernel& select(GgmlType type, WeightLayout layout, std::size_t batch, std::size_t cols) const;
  void run_products(std::span<const Product> products);
  // shared_ <- one product per matrix of `ws`, all of input x over `batch` rows (outputs ys, or none).
  void share_input(std::span<const WeightView> ws, const float* x, std::size_t batch, std::span<float* const> ys);
  // Fills plan_ for `products` (kernels, packing shared between them; products of batch 0
  // left out) and returns the packed activation bytes and the per-thread scratch bytes they need.
  std::pair<std::size_t, std::size_t> plan_products(std::span<const Product> products);

  ThreadPool pool_;
  IsaLevel level_;
  CpuFeatures features_;
  AlignedBuffer packed_;                // activations in the kernel's format
  std::vector<AlignedBuffer> scratch_;  // per thread, e.g. decoded AMX tiles
  // Reused by every call, so a decode step allocates nothing.
  std::vector<Product> shared_;
  std::unique_ptr<Plan> plan_;
  RowSchedule schedule_ = RowSchedule::guided;
};

// Checks the shape against the format (block multiple, row bytes) and throws UsageError with a
// one-line reason when it does not fit.
void validate_weights(const WeightView& w);

}  // namespace infercast
