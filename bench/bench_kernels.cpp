// Google Benchmark targets for the kernels: every weight format x ISA level x batch at a
// 4096x4096 projection, all cores. Bytes/s is weight bytes streamed; `gops` counts 2 ops per
// multiply-add. For DRAM-resident figures against the roofline use `infercast kernels`, which
// cycles through weights far larger than the last-level cache. Also one attention task per ISA
// level (the vector primitives of kernels/vec.h on one thread, cache-resident): what a decode
// step pays per KV head and token once the cache lines have arrived.
#include <benchmark/benchmark.h>

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "kernels/formats.h"
#include "kernels/gemm.h"
#include "kernels/half.h"
#include "kernels/vec.h"
#include "probes/topology.h"

namespace infercast {
namespace {

constexpr std::size_t kRows = 4096;
constexpr std::size_t kCols = 4096;

// The matrix of one format in one layout, built once.
struct Matrix {
  std::vector<std::uint8_t> bytes;
  WeightView view;
};

const Matrix& weights(GgmlType type, WeightLayout layout) {
  static std::vector<Matrix> cache(128);
  Matrix& m = cache[static_cast<std::size_t>(type) * 2 + static_cast<std::size_t>(layout)];
  if (m.bytes.empty()) {
    const auto& f = format_info(type);
    std::vector<float> row(kCols);
    for (std::size_t k = 0; k < kCols; ++k) row[k] = 0.02F * static_cast<float>((k * 2654435761U) % 2001) / 1000.0F - 0.02F;
    m.bytes.resize(f.row_bytes(kCols) * kRows);
    for (std::size_t r = 0; r < kRows; ++r) f.quantize(row.data(), m.bytes.data() + r * f.row_bytes(kCols), kCols);
    m.view = relayout(make_weight_view(type, m.bytes.data(), kRows, kCols), m.bytes.data(), layout);
  }
  return m;
}

GemmContext& context(IsaLevel level) {
  static std::vector<std::unique_ptr<GemmContext>> contexts(4);
  auto& c = contexts[static_cast<std::size_t>(level)];
  if (!c) c = std::make_unique<GemmContext>(host_topology().cores, level);
  return *c;
}

void run_gemm(benchmark::State& state, GgmlType type, IsaLevel level, WeightLayout layout, std::size_t batch) {
  const Matrix& w = weights(type, layout);
  GemmContext& ctx = context(level);
  const WeightView& view = w.view;
  std::vector<float> x(batch * kCols, 0.5F);
  std::vector<float> y(batch * kRows);
  for (auto _ : state) {
    ctx.gemm(view, x.data(), batch, y.data());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * w.bytes.size()));
  state.counters["gops"] = benchmark::Counter(2.0 * kRows * kCols * static_cast<double>(batch) * static_cast<double>(state.iterations()) / 1e9,
                                              benchmark::Counter::kIsRate);
  state.SetLabel(std::string(ctx.kernel_name(type, batch, kCols, view.layout)));
}

// One (token, KV head) task as the engine runs it: eight query heads of size 64 against `len`
// cached positions in F16, keys in the column layout, values in rows, block by block.
void run_attention(benchmark::State& state, IsaLevel level, std::size_t len) {
  const VecOps& ops = vec_ops(level);
  constexpr std::size_t kHeads = 8;
  constexpr std::size_t kDim = 64;
  const std::size_t blocks = (len + kKeyBlock - 1) / kKeyBlock;
  std::vector<std::uint16_t> keys(blocks * kKeyBlock * kDim), values(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) {
    keys[i] = fp32_to_fp16(0.01F * static_cast<float>(i % 97) - 0.5F);
    values[i] = fp32_to_fp16(0.02F * static_cast<float>(i % 89) - 0.9F);
  }
  std::vector<float> q(kHeads * kDim, 0.03F), scores(kHeads * len), out(kHeads * kDim);
  const auto block = [](const std::vector<std::uint16_t>& cache) {
    return [&cache](std::size_t b) { return &cache[b * kKeyBlock * kDim]; };
  };
  for (auto _ : state) {
    attend<std::uint16_t>(ops, q.data(), kHeads, kDim, len, 0.125F, block(keys), block(values), scores.data(), out.data());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  // Scores and the weighted sum: 2 x 2 x heads x positions x head size.
  state.counters["gflops"] = benchmark::Counter(4.0 * kHeads * kDim * static_cast<double>(len) * static_cast<double>(state.iterations()) / 1e9,
                                                benchmark::Counter::kIsRate);
}

void register_all() {
  for (int l = 0; l <= static_cast<int>(max_supported_level(host_cpu())); ++l) {
    const auto level = static_cast<IsaLevel>(l);
    for (std::size_t len : {128, 512, 2048}) {
      benchmark::RegisterBenchmark(fmt::format("attention/{}/positions:{}", to_string(level), len).c_str(),
                                   [=](benchmark::State& s) { run_attention(s, level, len); })
          ->Unit(benchmark::kMicrosecond);
    }
  }
  const IsaLevel best = max_supported_level(host_cpu());
  for (GgmlType type : weight_formats()) {
    for (int l = 0; l <= static_cast<int>(best); ++l) {
      const auto level = static_cast<IsaLevel>(l);
      // The GGUF layout at every level, and the interleaved one where the level prefers it.
      std::vector<WeightLayout> layouts{WeightLayout::gguf};
      if (preferred_layout(type, level) != WeightLayout::gguf) layouts.push_back(preferred_layout(type, level));
      for (WeightLayout layout : layouts) {
        for (std::size_t batch : {1, 2, 4, 8, 16, 32, 64}) {
          if (level == IsaLevel::scalar && batch > 1) continue;  // the reference is for GEMV only
          benchmark::RegisterBenchmark(fmt::format("gemm/{}/{}{}/batch:{}", format_info(type).name, to_string(level),
                                                   layout == WeightLayout::gguf ? "" : "_x8", batch)
                                           .c_str(),
                                       [=](benchmark::State& s) { run_gemm(s, type, level, layout, batch); })
              ->Unit(benchmark::kMicrosecond)
              ->UseRealTime();
        }
      }
    }
  }
}

}  // namespace
}  // namespace infercast

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  infercast::register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
