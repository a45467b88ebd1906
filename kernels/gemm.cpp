#include "kernels/gemm.h"

#include <fmt/format.h>

#include <algorithm>

#include "kernels/formats.h"
#include "kernels/gemm_kernels.h"
#include "kernels/interleave.h"
#include "probes/error.h"

namespace infercast {

WeightView make_weight_view(GgmlType type, const void* data, std::size_t rows, std::size_t cols) {
  return WeightView{type, data, rows, cols, format_info(type).row_bytes(cols)};
}

WeightLayout preferred_layout(GgmlType type, IsaLevel level) {
  return level == IsaLevel::avx2 && has_interleaved_layout(type) ? WeightLayout::interleaved8 : WeightLayout::gguf;
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

GemmContext::GemmContext(unsigned threads, std::optional<IsaLevel> level)
    : GemmContext(threads, level ? level : std::optional<IsaLevel>(active_level()), host_cpu()) {}

GemmContext::GemmContext(unsigned threads, std::optional<IsaLevel> level, const CpuFeatures& features)
    : pool_(threads == 0 ? 1 : threads),
      level_(choose_level(features, level)),
      features_(features),
      scratch_(pool_.size()) {}

GemmContext::~GemmContext() = default;

const GemmKernel& GemmContext::select(GgmlType type, WeightLayout layout, std::size_t batch, std::size_t cols) const {
  const CpuFeatures& cpu = features_;
  if (layout == WeightLayout::interleaved8) {
    // Whichever level the context runs at, only these read the interleaved bytes.
    const GemmKernel* k = level_ >= IsaLevel::avx2 ? avx2_x8_gemm_kernel(type) : scalar_x8_gemm_kernel(type);
    if (k == nullptr) throw UsageError(fmt::format("no kernel for interleaved {}", format_info(type).name));
    return *k;
  }
  const GemmKernel* k = nullptr;
  if (level_ >= IsaLevel::amx && batch >= kAmxMinBatch && cols % 32 == 0) k = amx_gemm_kernel(type, batch);
  if (k == nullptr && level_ >= IsaLevel::avx512) k = avx512_gemm_kernel(type, cpu);
  if (k == nullptr && level_ >= IsaLevel::avx2) k = avx2_gemm_kernel(type, cpu);
  if (k == nullptr) k = scalar_gemm_kernel(type);
  if (k == nullptr) throw UsageError(fmt::format("no kernel for {}", format_info(type).name));
  return *k;
}

std::string_view GemmContext::kernel_name(GgmlType type, std::size_t batch, std::size_t cols, WeightLayout layout) const {
  return select(type, layout, batch, cols).name;
}

void GemmContext::gemm(const WeightView& w, const float* x, std::size_t ldx, std::size_t batch, float* y,
                       std::size_t ldy) {
  const Product p{&w, x, ldx, y, ldy};
  run_products(std::span<const Product>(&p, 1), batch);
}

void GemmContext::gemm_shared(std::span<const WeightView> ws, const float* x, std::size_t batch,
                              std::span<float* const> ys) {
  if (ws.size() != ys.size()) throw UsageError("gemm_shared needs one output per matrix");
  std::vector<Product> products;
  for (std::size_t i = 0; i < ws.size(); ++i) {
    if (ws[i].cols != ws.front().cols) throw UsageError("gemm_shared needs matrices of one row length");
    products.push_back({&ws[i], x, ws[i].cols, ys[i], ws[i].rows});
  }
  run_products(products, batch);
}

// Every product's kernel, its call and the activation packing it reads. Products whose kernels
// pack the same way (same function, same input) share one packed copy.
void GemmContext::run_products(std::span<const Product> products, std::size_t batch) {
  if (batch == 0 || products.empty()) return;
  constexpr std::size_t kNoPacking = ~std::size_t{0};
  struct Planned {
    const GemmKernel* kernel;
    GemmCall call;
    std::size_t pack_slot;
  };
  std::vector<Planned> plan;
  std::vector<std::size_t> slot_offsets;  // first planned product packing into each slot
  std::size_t packed_total = 0;
  std::size_t scratch = 0;
  for (const Product& p : products) {
    const WeightView& w = *p.w;
    validate_weights(w);
    const GemmKernel& k = select(w.type, w.layout, batch, w.cols);
    GemmCall call{static_cast<const std::uint8_t*>(w.data), w.row_bytes, w.rows, w.cols, p.x, p.ldx, batch, p.y, p.ldy, nullptr};
    std::size_t slot = kNoPacking;
    if (k.packed_bytes != nullptr && k.packed_bytes(batch, w.cols) > 0) {
      for (std::size_t s = 0; s < slot_offsets.size(); ++s) {
        const Planned& first = plan[slot_offsets[s]];
        if (first.kernel->pack == k.pack && first.call.x == p.x && first.call.ldx == p.ldx && first.call.cols == w.cols) slot = s;
      }
      if (slot == kNoPacking) {
        slot = slot_offsets.size();
        slot_offsets.push_back(plan.size());
        packed_total += round_up(k.packed_bytes(batch, w.cols), 64);
      }
    }
    if (k.scratch_bytes != nullptr) scratch = std::max(scratch, k.scratch_bytes(w.cols));
    plan.push_back({&k, call, slot});
  }
  // Slots in order: each slot's packed bytes follow the previous slot's.
  std::uint8_t* packed = packed_total > 0 ? packed_.reserve(packed_total) : nullptr;
  std::vector<std::uint8_t*> slot_data;
  for (std::size_t s = 0; s < slot_offsets.size(); ++s) {
    const Planned& first = plan[slot_offsets[s]];
    slot_data.push_back(packed);
    packed += round_up(first.kernel->packed_bytes(batch, first.call.cols), 64);
  }
  for (Planned& p : plan) {
    if (p.pack_slot != kNoPacking) p.call.packed = slot_data[p.pack_slot];
  }
  for (auto& s : scratch_) s.reserve(scratch);

  const unsigned members = pool_.size();
  pool_.run([&](unsigned member) {
    if (!slot_offsets.empty()) {
      for (std::size_t first : slot_offsets) {
        const Planned& p = plan[first];
        const RowRange a = split_rows(batch, p.kernel->pack_step, member, members);
        if (a.begin < a.end) p.kernel->pack(p.call, a.begin, a.end);
      }
      pool_.barrier();
    }
    for (const Planned& p : plan) {
      const RowRange r = split_rows(p.call.rows, p.kernel->row_step, member, members);
      if (r.begin < r.end) p.kernel->rows(p.call, r.begin, r.end, scratch_[member].data());
    }
  });
}

}  // namespace infercast
