// Google Benchmark targets for the probe kernels: every streaming kernel at every runnable ISA
// level at an L1, an L2 and a DRAM working set; the latency chase; the compute peaks.
// Rates are reported as bytes/s (or ops/s) by Google Benchmark's counters.
#include <benchmark/benchmark.h>

#include "probes/bandwidth.h"
#include "probes/compute.h"
#include "probes/compute_kernels.h"
#include "probes/cpu_features.h"
#include "probes/latency.h"
#include "probes/memory.h"

using namespace infercast;

namespace {

bool runnable(IsaLevel level) { return level <= max_supported_level(host_cpu()); }

void stream_kernel(benchmark::State& state, IsaLevel level, StreamKernel kernel) {
  if (!runnable(level)) {
    state.SkipWithError("ISA level not supported on this machine");
    return;
  }
  const StreamKernels& k = stream_kernels_for(level);
  const std::size_t bytes = static_cast<std::size_t>(state.range(0));
  const std::size_t n = bytes / 4 / contract(kernel).arrays / kBandwidthBlock * kBandwidthBlock;
  PageBuffer buf(3 * n * 4 + 8192);
  buf.first_touch();
  auto* a = buf.as<std::uint32_t>();
  auto* b = a + n + 512;
  auto* c = b + n + 512;
  std::fill_n(a, 3 * n + 1024, 1U);
  const unsigned streams = read_streams_for(n * 4, host_topology());
  for (auto _ : state) {
    switch (kernel) {
      case StreamKernel::read: benchmark::DoNotOptimize(k.read(a, n, 1, streams)); break;
      case StreamKernel::write: k.write(a, n, 7, 1); break;
      case StreamKernel::write_nt: k.write_nt(a, n, 7, 1); break;
      case StreamKernel::copy: k.copy(b, a, n, 1); break;
      case StreamKernel::triad:
        k.triad(reinterpret_cast<float*>(a), reinterpret_cast<float*>(b), reinterpret_cast<float*>(c), 3.0F, n, 1);
        break;
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes_per_pass(kernel, n)));
}

void register_stream_benchmarks() {
  for (IsaLevel level : {IsaLevel::scalar, IsaLevel::avx2, IsaLevel::avx512}) {
    for (const auto& c : all_stream_contracts()) {
      const std::string name = "stream/" + std::string(c.name) + "/" + std::string(to_string(level));
      benchmark::RegisterBenchmark(name.c_str(), stream_kernel, level, c.kernel)
          ->Arg(16 << 10)
          ->Arg(512 << 10)
          ->Arg(512 << 20)
          ->Unit(benchmark::kMicrosecond);
    }
  }
}

void latency_chase(benchmark::State& state) {
  const std::size_t bytes = static_cast<std::size_t>(state.range(0));
  PageBuffer buf(bytes);
  build_chase(buf.data(), bytes / 64, 1);
  const void* p = buf.data();
  constexpr std::uint64_t kLoads = 1 << 16;
  for (auto _ : state) {
    p = chase(p, kLoads);
    benchmark::DoNotOptimize(p);
  }
  state.counters["ns_per_load"] = benchmark::Counter(
      static_cast<double>(state.iterations() * kLoads), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(latency_chase)->Arg(16 << 10)->Arg(1 << 20)->Arg(256 << 20)->Unit(benchmark::kMillisecond);

void compute_kernel(benchmark::State& state, IsaLevel level, double ops_per_iteration,
                    bool (*kernel)(std::uint64_t)) {
  if (!runnable(level)) {
    state.SkipWithError("ISA level not supported on this machine");
    return;
  }
  constexpr std::uint64_t kIterations = 1 << 16;
  for (auto _ : state) {
    if (!kernel(kIterations)) state.SkipWithError("wrong result");
  }
  state.counters["ops"] = benchmark::Counter(static_cast<double>(state.iterations() * kIterations) * ops_per_iteration,
                                             benchmark::Counter::kIsRate);
}
BENCHMARK_CAPTURE(compute_kernel, fp32_fma_avx2, IsaLevel::avx2, kernels_avx2::kFmaOpsPerIteration, kernels_avx2::fp32_fma);
BENCHMARK_CAPTURE(compute_kernel, fp32_fma_avx512, IsaLevel::avx512, kernels_avx512::kFmaOpsPerIteration, kernels_avx512::fp32_fma);
BENCHMARK_CAPTURE(compute_kernel, int8_vnni_avx512, IsaLevel::avx512, kernels_avx512::kVnniOpsPerIteration, kernels_avx512::int8_vnni);
BENCHMARK_CAPTURE(compute_kernel, bf16_dot_avx512, IsaLevel::avx512, kernels_avx512::kBf16OpsPerIteration, kernels_avx512::bf16_dot);

void amx_int8(benchmark::State& state) {
  if (!runnable(IsaLevel::amx)) {
    state.SkipWithError("AMX not usable on this machine");
    return;
  }
  const int acc = static_cast<int>(state.range(0));
  constexpr std::uint64_t kIterations = 1 << 14;
  for (auto _ : state) {
    if (!kernels_amx::int8_tiles(kIterations, acc)) state.SkipWithError("wrong result");
  }
  state.counters["ops"] = benchmark::Counter(
      static_cast<double>(state.iterations() * kIterations) * kernels_amx::kInt8OpsPerTile * acc, benchmark::Counter::kIsRate);
}
BENCHMARK(amx_int8)->DenseRange(1, kernels_amx::kMaxAccumulators);

}  // namespace

int main(int argc, char** argv) {
  register_stream_benchmarks();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
