#include "kernels/gemm.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>

#include "kernels/formats.h"
#include "kernels/gemm_kernels.h"
#include "kernels/interleave.h"
#include "probes/error.h"

namespace infercast {

WeightView make_weight_view(GgmlType type, const void* data, std::size_t rows, std::size_t cols) {
  return WeightView{type, data, rows, cols, format_info(type).row_bytes(cols)};
}

WeightLayout preferred_layout(GgmlType type, IsaLevel level) {
  // The interleaved kernels beat the row kernels at GEMV and at batches of 4 to 256 for Q4_0,
  // Q8_0, Q4_K and Q6_K on the Zen 5 host, and at batches 1-16 on the AMX host, where the AMX
  // tiles read the interleaved rows too from amx_x8_min_batch on (docs/PERFORMANCE.md); Q5_K's
  // AVX-512 interleaved kernel was measured against the AVX2 interleaved one only.
  return level != IsaLevel::scalar && has_interleaved_layout(type) ? WeightLayout::interleaved8 : WeightLayout::gguf;
}

WeightView relayout(const WeightView& w, std::uint8_t* data, WeightLayout layout) {
  if (layout == w.layout || !has_interleaved_layout(w.type)) return w;
  if (w.layout != WeightLayout::gguf || data != w.data) throw UsageError("only a writable GGUF-layout matrix can be interleaved");
  validate_weights(w);
  interleave_rows(w.type, data, w.rows, w.cols, w.row_bytes);
  WeightView out = w;
  out.layout = layout;
  return out;
}

const std::uint8_t* gguf_row(const WeightView& w, std::size_t r, std::vector<std::uint8_t>& scratch) {
  const auto* data = static_cast<const std::uint8_t*>(w.data);
  if (w.layout == WeightLayout::gguf) return data + r * w.row_bytes;
  scratch.resize(w.row_bytes);
  copy_gguf_row(w.type, data, w.rows, w.cols, w.row_bytes, r, scratch.data());
  return scratch.data();
}

std::size_t row_split_step(const WeightView& w) { return w.layout == WeightLayout::interleaved8 ? kInterleave : 1; }

void validate_weights(const WeightView& w) {
  const auto& f = format_info(w.type);
  if (w.type == GgmlType::q8_k) throw UsageError("Q8_K is an activation format, not a weight format");
  if (w.cols == 0 || w.rows == 0) throw UsageError("weight matrix has no rows or columns");
  if (w.cols % static_cast<std::size_t>(f.block_elems) != 0) {
    throw UsageError(fmt::format("{} needs the row length to be a multiple of {}, got {}", f.name, f.block_elems, w.cols));
  }
  if (w.row_bytes < f.row_bytes(w.cols)) {
    throw UsageError(fmt::format("{} row of {} elements needs {} bytes, stride is {}", f.name, w.cols,
                                 f.row_bytes(w.cols), w.row_bytes));
  }
  if (w.data == nullptr) throw UsageError("weight matrix has no data");
  if (w.layout == WeightLayout::interleaved8 && !has_interleaved_layout(w.type)) {
    throw UsageError(fmt::format("{} has no interleaved layout", f.name));
  }
}

namespace {

// Guided self-scheduling: a thread takes half its share of the rows left, in whole steps,
// never less than 64 KiB of weights (a run of rows restarts the kernel's streams, and the
// shared counter costs a cache-line transfer per take).
class GuidedRows {
 public:
  GuidedRows(std::size_t rows, std::size_t step, std::size_t row_bytes, unsigned members)
      : rows_(rows),
        step_(step),
        least_(std::max<std::size_t>(1, (std::size_t{64} << 10) / std::max<std::size_t>(1, row_bytes))),
        divisor_(2 * std::size_t{members}) {}
  // The end of the run a thread takes from `begin`.
  [[nodiscard]] std::size_t end_of(std::size_t begin) const {
    return std::min(rows_, begin + round_up(std::max(least_, (rows_ - begin) / divisor_), step_));
  }

 private:
  std::size_t rows_;
  std::size_t step_;
  std::size_t least_;
  std::size_t divisor_;
};

}  // namespace

bool guided_rows_pay(std::size_t weight_bytes, std::size_t batch, unsigned threads) {
  return threads > 1 && (batch >= kGuidedLeastBatch || weight_bytes / threads >= kGuidedLeastShare);
}

// One product as the threads run it: packed_at is its activations' offset in packed_, shared
// by the products whose kernels pack alike; packers are the entries that do the packing.
struct GemmContext::Plan {
  static constexpr std::size_t kNoPacking = ~std::size_t{0};
  struct Product {
    const GemmKernel* kernel;
    GemmCall call;
    std::size_t packed_at;
  };
  std::vector<Product> products;
  std::vector<std::size_t> packers;
  // Per product, the first row no thread has taken yet (guided scheduling).
  std::unique_ptr<std::atomic<std::size_t>[]> next;
  std::size_t next_capacity = 0;
  // The guided schedule's split of the products that take no runs.
  SpeedSplit speeds;

  explicit Plan(unsigned members) : speeds(members) {}
};

GemmContext::GemmContext(unsigned threads, std::optional<IsaLevel> level)
    : GemmContext(threads, level ? level : std::optional<IsaLevel>(active_level()), host_cpu()) {}

GemmContext::GemmContext(unsigned threads, std::optional<IsaLevel> level, const CpuFeatures& features)
    : pool_(threads == 0 ? 1 : threads),
      level_(choose_level(features, level)),
      features_(features),
      scratch_(pool_.size()),
      plan_(std::make_unique<Plan>(pool_.size())) {}

GemmContext::~GemmContext() = default;

const GemmKernel& GemmContext::select(GgmlType type, WeightLayout layout, std::size_t batch, std::size_t cols) const {
  const CpuFeatures& cpu = features_;
  if (layout == WeightLayout::interleaved8) {
    // Whichever level the context runs at, only these read the interleaved bytes.
    const GemmKernel* k = nullptr;
    if (level_ >= IsaLevel::amx && batch >= amx_x8_min_batch(type) && cols % 32 == 0) k = amx_x8_gemm_kernel(type, batch);
    if (k == nullptr && level_ >= IsaLevel::avx512 && cpu.avx512_vnni) k = avx512_x8_gemm_kernel(type, batch);
    if (k == nullptr) k = level_ >= IsaLevel::avx2 ? avx2_x8_gemm_kernel(type) : scalar_x8_gemm_kernel(type);
    if (k == nullptr) throw UsageError(fmt::format("no kernel for interleaved {}", format_info(type).name));
    return *k;
  }
  const GemmKernel* k = nullptr;
  if (level_ >= IsaLevel::amx && batch >= kAmxMinBatch && cols % 32 == 0) k = amx_gemm_kernel(type, batch);
  if (k == nullptr && level_ >= IsaLevel::avx512) k = avx512_gemm_kernel(type, cpu, batch);
  if (k == nullptr && level_ >= IsaLevel::avx2) k = avx2_gemm_kernel(type, cpu, batch);
  if (k == nullptr) k = scalar_gemm_kernel(type);
  if (k == nullptr) throw UsageError(fmt::format("no kernel for {}", format_info(type).name));
  return *k;
}

std::string_view GemmContext::kernel_name(GgmlType type, std::size_t batch, std::size_t cols, WeightLayout layout) const {
  return select(type, layout, batch, cols).name;
}

void GemmContext::gemm(const WeightView& w, const float* x, std::size_t ldx, std::size_t batch, float* y,
                       std::size_t ldy) {
  const Product p{&w, x, ldx, y, ldy, batch};
  run_products(std::span<const Product>(&p, 1));
}

void GemmContext::gemm_shared(std::span<const WeightView> ws, const float* x, std::size_t batch,
                              std::span<float* const> ys) {
  if (ws.size() != ys.size()) throw UsageError("gemm_shared needs one output per matrix");
  share_input(ws, x, batch, ys);
  run_products(shared_);
}

void GemmContext::gemm_jobs(std::span<const Job> jobs) {
  shared_.clear();
  for (const Job& j : jobs) shared_.push_back({&j.w, j.x, j.w.cols, j.y, j.w.rows, j.batch});
  run_products(shared_);
}

std::pair<std::size_t, std::size_t> GemmContext::plan_products(std::span<const Product> products) {
  Plan& plan = *plan_;
  plan.products.clear();
  plan.packers.clear();
  std::size_t packed_total = 0;
  std::size_t scratch = 0;
  for (const Product& p : products) {
    const std::size_t batch = p.batch;
    if (batch == 0) continue;
    const WeightView& w = *p.w;
    validate_weights(w);
    const GemmKernel& k = select(w.type, w.layout, batch, w.cols);
    Plan::Product planned{&k, {static_cast<const std::uint8_t*>(w.data), w.row_bytes, w.rows, w.cols, p.x, p.ldx, batch, p.y, p.ldy, nullptr},
                          Plan::kNoPacking};
    if (k.packed_bytes != nullptr && k.packed_bytes(batch, w.cols) > 0) {
      for (std::size_t first : plan.packers) {
        const Plan::Product& f = plan.products[first];
        if (f.kernel->pack == k.pack && f.call.x == p.x && f.call.ldx == p.ldx && f.call.cols == w.cols && f.call.batch == batch) {
          planned.packed_at = f.packed_at;
        }
      }
      if (planned.packed_at == Plan::kNoPacking) {
        planned.packed_at = packed_total;
        plan.packers.push_back(plan.products.size());
        packed_total += round_up(k.packed_bytes(batch, w.cols), 64);
      }
    }
    if (k.scratch_bytes != nullptr) scratch = std::max(scratch, k.scratch_bytes(w.cols));
    plan.products.push_back(planned);
  }
  return {packed_total, scratch};
}

void GemmContext::share_input(std::span<const WeightView> ws, const float* x, std::size_t batch, std::span<float* const> ys) {
  shared_.clear();
  for (std::size_t i = 0; i < ws.size(); ++i) {
    if (ws[i].cols != ws.front().cols) throw UsageError("gemm_shared needs matrices of one row length");
    shared_.push_back({&ws[i], x, ws[i].cols, ys.empty() ? nullptr : ys[i], ws[i].rows, batch});
  }
}

void GemmContext::prepare(std::span<const WeightView> ws, std::size_t batch, std::size_t parts) {
  if (batch == 0 || ws.empty()) return;
  share_input(ws, nullptr, batch, {});  // never read or written here
  auto [packed_total, scratch] = plan_products(shared_);
  if (parts > 1) {
    // Split into parts, each product picks its kernel by its own batch and packs its rows
    // rounded up to that kernel's step, 64-byte aligned. A kernel packs ceil(b / g) units of
    // c bytes, no more than b x (its bytes per row at `batch`) + c, so every split fits in
    // batch x the most bytes per row + parts x (the largest unit + 64).
    std::size_t per_row = 0;
    std::size_t unit = 0;
    const GemmKernel* last = nullptr;
    for (const WeightView& w : ws) {
      for (std::size_t b = 1; b <= batch; ++b) {
        const GemmKernel& k = select(w.type, w.layout, b, w.cols);
        if (&k == last) continue;
        last = &k;
        if (k.scratch_bytes != nullptr) scratch = std::max(scratch, k.scratch_bytes(w.cols));
        if (k.packed_bytes == nullptr) continue;
        per_row = std::max(per_row, (k.packed_bytes(batch, w.cols) + batch - 1) / batch);
        unit = std::max(unit, k.packed_bytes(1, w.cols));
      }
    }
    packed_total = std::max(packed_total, batch * per_row + std::min(parts, batch) * (unit + 64));
  }
  if (packed_total > packed_.capacity()) std::memset(packed_.reserve(packed_total), 0, packed_total);
  // Each thread touches its own scratch: on a NUMA machine its pages land on its node.
  pool_.run([&, scratch = scratch](unsigned member) {
    AlignedBuffer& s = scratch_[member];
    if (scratch > s.capacity()) std::memset(s.reserve(scratch), 0, scratch);
  });
}

void GemmContext::run_products(std::span<const Product> products) {
  Plan& plan = *plan_;
  const auto [packed_total, scratch] = plan_products(products);
  if (plan.products.empty()) return;
  std::uint8_t* packed = packed_total > 0 ? packed_.reserve(packed_total) : nullptr;
  for (Plan::Product& p : plan.products) {
    if (p.packed_at != Plan::kNoPacking) p.call.packed = packed + p.packed_at;
  }
  for (auto& s : scratch_) s.reserve(scratch);

  const unsigned members = pool_.size();
  const bool guided = members > 1 && schedule_ == RowSchedule::guided;
  if (guided) {
    // The split of this call's short products follows the speeds the last call measured.
    plan.speeds.update();
    if (plan.next_capacity < plan.products.size()) {
      plan.next = std::make_unique<std::atomic<std::size_t>[]>(plan.products.size());
      plan.next_capacity = plan.products.size();
    }
    for (std::size_t i = 0; i < plan.products.size(); ++i) plan.next[i].store(0, std::memory_order_relaxed);
  }
  pool_.run([&](unsigned member) {
    if (!plan.packers.empty()) {
      for (std::size_t first : plan.packers) {
        const Plan::Product& p = plan.products[first];
        const RowRange a = split_rows(p.call.batch, p.kernel->pack_step, member, members);
        if (a.begin < a.end) p.kernel->pack(p.call, a.begin, a.end);
      }
      pool_.barrier();
    }
    for (std::size_t i = 0; i < plan.products.size(); ++i) {
      const Plan::Product& p = plan.products[i];
      if (!guided) {
        const RowRange r = split_rows(p.call.rows, p.kernel->row_step, member, members);
        if (r.begin < r.end) p.kernel->rows(p.call, r.begin, r.end, scratch_[member].data());
        continue;
      }
      if (!guided_rows_pay(p.call.rows * p.call.row_bytes, p.call.batch, members)) {
        const RowRange r = plan.speeds.range(p.call.rows, p.kernel->row_step, member);
        if (r.begin == r.end) continue;
        const auto start = std::chrono::steady_clock::now();
        p.kernel->rows(p.call, r.begin, r.end, scratch_[member].data());
        const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
        plan.speeds.record(member, static_cast<double>((r.end - r.begin) * p.call.row_bytes), took.count());
        continue;
      }
      const GuidedRows chunks{p.call.rows, p.kernel->row_step, p.call.row_bytes, members};
      std::size_t begin = plan.next[i].load(std::memory_order_relaxed);
      while (begin < p.call.rows) {
        const std::size_t end = chunks.end_of(begin);
        if (plan.next[i].compare_exchange_weak(begin, end, std::memory_order_relaxed)) {
          p.kernel->rows(p.call, begin, end, scratch_[member].data());
          begin = end;
        }
      }
    }
  });
}

}  // namespace infercast
