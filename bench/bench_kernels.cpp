// Google Benchmark targets for the kernels: every weight format x ISA level x batch at a
// 4096x4096 projection, all cores. Bytes/s is weight bytes streamed; `gops` counts 2 ops per
// multiply-add. For DRAM-resident figures against the roofline use `infercast kernels`, which
// cycles through weights far larger than the last-level cache.
#include <benchmark/benchmark.h>

#include <fmt/format.h>

#include <memory>
#include <vector>

#include "kernels/formats.h"
#include "kernels/gemm.h"
#include "probes/topology.h"

namespace infercast {
namespace {

constexpr std::size_t kRows = 4096;
constexpr std::size_t kCols = 4096;

const std::vector<std::uint8_t>& weights(GgmlType type) {
  static std::vector<std::vector<std::uint8_t>> cache(64);
  auto& w = cache[static_cast<std::size_t>(type)];
  if (w.empty()) {
    const auto& f = format_info(type);
    std::vector<float> row(kCols);
    for (std::size_t k = 0; k < kCols; ++k) row[k] = 0.02F * static_cast<float>((k * 2654435761U) % 2001) / 1000.0F - 0.02F;
    w.resize(f.row_bytes(kCols) * kRows);
    for (std::size_t r = 0; r < kRows; ++r) f.quantize(row.data(), w.data() + r * f.row_bytes(kCols), kCols);
  }
  return w;
}

GemmContext& context(IsaLevel level) {
  static std::vector<std::unique_ptr<GemmContext>> contexts(4);
  auto& c = contexts[static_cast<std::size_t>(level)];
  if (!c) c = std::make_unique<GemmContext>(host_topology().cores, level);
  return *c;
}

void run_gemm(benchmark::State& state, GgmlType type, IsaLevel level, std::size_t batch) {
  const auto& w = weights(type);
  GemmContext& ctx = context(level);
  const WeightView view = make_weight_view(type, w.data(), kRows, kCols);
  std::vector<float> x(batch * kCols, 0.5F);
  std::vector<float> y(batch * kRows);
  for (auto _ : state) {
    ctx.gemm(view, x.data(), batch, y.data());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * w.size()));
  state.counters["gops"] = benchmark::Counter(2.0 * kRows * kCols * static_cast<double>(batch) * static_cast<double>(state.iterations()) / 1e9,
                                              benchmark::Counter::kIsRate);
  state.SetLabel(std::string(ctx.kernel_name(type, batch, kCols)));
}

void register_all() {
  const IsaLevel best = max_supported_level(host_cpu());
  for (GgmlType type : weight_formats()) {
    for (int l = 0; l <= static_cast<int>(best); ++l) {
      const auto level = static_cast<IsaLevel>(l);
      for (std::size_t batch : {1, 2, 4, 8, 16, 32, 64}) {
        if (level == IsaLevel::scalar && batch > 1) continue;  // the reference is for GEMV only
        benchmark::RegisterBenchmark(
            fmt::format("gemm/{}/{}/batch:{}", format_info(type).name, to_string(level), batch).c_str(),
            [=](benchmark::State& s) { run_gemm(s, type, level, batch); })
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
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
