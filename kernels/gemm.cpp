#include "kernels/gemm.h"

#include <fmt/format.h>

#include "kernels/formats.h"
#include "kernels/gemm_kernels.h"
#include "probes/error.h"

namespace infercast {

WeightView make_weight_view(GgmlType type, const void* data, std::size_t rows, std::size_t cols) {
  return WeightView{type, data, rows, cols, format_info(type).row_bytes(cols)};
}

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
}

GemmContext::GemmContext(unsigned threads, std::optional<IsaLevel> level)
    : GemmContext(threads, level ? level : std::optional<IsaLevel>(active_level()), host_cpu()) {}

GemmContext::GemmContext(unsigned threads, std::optional<IsaLevel> level, const CpuFeatures& features)
    : pool_(threads == 0 ? 1 : threads),
      level_(choose_level(features, level)),
      features_(features),
      scratch_(pool_.size()) {}

GemmContext::~GemmContext() = default;

const GemmKernel& GemmContext::select(GgmlType type, std::size_t batch, std::size_t cols) const {
  const CpuFeatures& cpu = features_;
  const GemmKernel* k = nullptr;
  if (level_ >= IsaLevel::amx && batch >= kAmxMinBatch && cols % 32 == 0) k = amx_gemm_kernel(type, batch);
  if (k == nullptr && level_ >= IsaLevel::avx512) k = avx512_gemm_kernel(type, cpu);
  if (k == nullptr && level_ >= IsaLevel::avx2) k = avx2_gemm_kernel(type, cpu);
  if (k == nullptr) k = scalar_gemm_kernel(type);
  if (k == nullptr) throw UsageError(fmt::format("no kernel for {}", format_info(type).name));
  return *k;
}

std::string_view GemmContext::kernel_name(GgmlType type, std::size_t batch, std::size_t cols) const {
  return select(type, batch, cols).name;
}

void GemmContext::gemm(const WeightView& w, const float* x, std::size_t ldx, std::size_t batch, float* y,
                       std::size_t ldy) {
  validate_weights(w);
  if (batch == 0) return;
  const GemmKernel& k = select(w.type, batch, w.cols);
  GemmCall call{static_cast<const std::uint8_t*>(w.data), w.row_bytes, w.rows, w.cols, x, ldx, batch, y, ldy, nullptr};
  const std::size_t packed = k.packed_bytes != nullptr ? k.packed_bytes(batch, w.cols) : 0;
  if (packed > 0) call.packed = packed_.reserve(packed);
  const std::size_t scratch = k.scratch_bytes != nullptr ? k.scratch_bytes(w.cols) : 0;
  for (auto& s : scratch_) s.reserve(scratch);

  const unsigned members = pool_.size();
  pool_.run([&](unsigned member) {
    if (packed > 0) {
      const RowRange a = split_rows(batch, k.pack_step, member, members);
      if (a.begin < a.end) k.pack(call, a.begin, a.end);
      pool_.barrier();
    }
    const RowRange r = split_rows(w.rows, k.row_step, member, members);
    if (r.begin < r.end) k.rows(call, r.begin, r.end, scratch_[member].data());
  });
}

}  // namespace infercast
