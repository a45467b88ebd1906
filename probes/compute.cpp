#include "probes/compute.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <fmt/format.h>
#include <functional>
#include <map>
#include <stdexcept>

#include "probes/compute_kernels.h"
#include "probes/thread_team.h"
#include "probes/timer.h"

namespace infercast {
namespace {

struct KernelSpec {
  const char* name;
  const char* unit;
  IsaLevel level;
  bool (*supported)(const CpuFeatures&);
  double ops_per_iteration;  // per call iteration (per accumulator tile for AMX)
  bool (*run)(std::uint64_t);
  bool (*run_tiles)(std::uint64_t, int);
};

const std::vector<KernelSpec>& specs() {
  static const std::vector<KernelSpec> table = {
      {"fp32_fma_avx2", "GFLOPS", IsaLevel::avx2,
       [](const CpuFeatures& c) { return c.avx2 && c.fma; }, kernels_avx2::kFmaOpsPerIteration,
       kernels_avx2::fp32_fma, nullptr},
      {"int8_avx2", "GOPS", IsaLevel::avx2, [](const CpuFeatures& c) { return c.avx2; },
       kernels_avx2::kInt8OpsPerIteration, kernels_avx2::int8_avx2, nullptr},
      {"int8_avx_vnni", "GOPS", IsaLevel::avx2, [](const CpuFeatures& c) { return c.avx_vnni; },
       kernels_avx2::kVnniOpsPerIteration, kernels_avx2::int8_avx_vnni, nullptr},
      {"fp32_fma_avx512", "GFLOPS", IsaLevel::avx512,
       [](const CpuFeatures& c) { return c.avx512f; }, kernels_avx512::kFmaOpsPerIteration,
       kernels_avx512::fp32_fma, nullptr},
      {"bf16_dot_avx512", "GFLOPS", IsaLevel::avx512,
       [](const CpuFeatures& c) { return c.avx512_bf16; }, kernels_avx512::kBf16OpsPerIteration,
       kernels_avx512::bf16_dot, nullptr},
      {"int8_vnni_avx512", "GOPS", IsaLevel::avx512,
       [](const CpuFeatures& c) { return c.avx512_vnni; }, kernels_avx512::kVnniOpsPerIteration,
       kernels_avx512::int8_vnni, nullptr},
      {"amx_int8", "GOPS", IsaLevel::amx,
       [](const CpuFeatures& c) { return c.amx_int8 && c.amx_usable; },
       kernels_amx::kInt8OpsPerTile, nullptr, kernels_amx::int8_tiles},
      {"amx_bf16", "GFLOPS", IsaLevel::amx,
       [](const CpuFeatures& c) { return c.amx_bf16 && c.amx_usable; },
       kernels_amx::kBf16OpsPerTile, nullptr, kernels_amx::bf16_tiles},
  };
  return table;
}

std::string unavailable_reason(const KernelSpec& k, const CpuFeatures& cpu, IsaLevel level) {
  if (!k.supported(cpu) || max_supported_level(cpu) < k.level) {
    if (k.level == IsaLevel::amx && !cpu.amx_reason.empty()) return cpu.amx_reason;
    return "the CPU or OS does not support it";
  }
  if (level < k.level) return fmt::format("ISA level limited to {}", to_string(level));
  return {};
}

// Runs `iterations` in calls of at most kMaxComputeIterations; false if any call's check fails.
bool run_iterations(const KernelSpec& k, std::uint64_t iterations, int accumulators) {
  bool ok = true;
  while (iterations > 0) {
    const std::uint64_t chunk = std::min(iterations, kMaxComputeIterations);
    ok = (k.run_tiles != nullptr ? k.run_tiles(chunk, accumulators) : k.run(chunk)) && ok;
    iterations -= chunk;
  }
  return ok;
}

struct Measured {
  std::vector<double> gops;  // one rate per sample, all threads together
  double ghz = 0;
};

Measured measure(ThreadTeam& team, const KernelSpec& k, int accumulators,
                 const ComputeOptions& options) {
  const double ops_per_iteration = k.ops_per_iteration * std::max(accumulators, 1);
  std::atomic<bool> ok{true};
  // Calibrate on member 0 alone, then run every member for the same iteration count.
  std::uint64_t iterations = 1024;
  for (;;) {
    const double t0 = now_seconds();
    if (!run_iterations(k, iterations, accumulators)) ok = false;
    const double t = now_seconds() - t0;
    if (t >= options.min_time / 2 || iterations > (1ULL << 40)) break;
    iterations = static_cast<std::uint64_t>(static_cast<double>(iterations) *
                                            std::min(100.0, options.min_time / std::max(t, 1e-6)));
  }
  std::vector<double> times(static_cast<std::size_t>(options.samples + 1));
  double ghz = 0;
  team.run([&](unsigned m) {
    for (std::size_t s = 0; s < times.size(); ++s) {
      team.barrier();
      const double t0 = m == 0 ? now_seconds() : 0.0;
      if (!run_iterations(k, iterations, accumulators)) ok = false;
      team.barrier();
      if (m == 0) times[s] = now_seconds() - t0;
    }
    // The clock right after the kernel, while the licence frequency still holds.
    if (m == 0) ghz = measure_frequency_ghz(0.002);
  });
  if (!ok) throw std::runtime_error(fmt::format("compute kernel '{}' computed wrong results", k.name));
  times.erase(times.begin());
  std::vector<double> rates;
  const double ops = ops_per_iteration * static_cast<double>(iterations) * team.size();
  for (double t : times) rates.push_back(ops / t / 1e9);
  return {rates, ghz};
}

// One kernel at one thread count (and, for AMX, one accumulator count), over every round.
struct Samples {
  std::vector<double> gops;
  std::vector<double> ghz;

  void add(const Measured& m) {
    gops.insert(gops.end(), m.gops.begin(), m.gops.end());
    ghz.push_back(m.ghz);
  }
};

}  // namespace

std::vector<ComputeKernelInfo> compute_kernels(const CpuFeatures& cpu, IsaLevel level) {
  std::vector<ComputeKernelInfo> out;
  for (const KernelSpec& k : specs()) {
    ComputeKernelInfo info{k.name, k.unit, k.level, false, unavailable_reason(k, cpu, level)};
    info.available = info.reason.empty();
    out.push_back(info);
  }
  return out;
}

double measure_frequency_ghz(double seconds) {
  std::uint64_t iterations = 1 << 16;
  for (;;) {
    const double t0 = now_seconds();
    const std::uint64_t adds = dependent_add_chain(iterations);
    const double t = now_seconds() - t0;
    if (t >= seconds) return static_cast<double>(adds) / t / 1e9;
    iterations *= 2;
  }
}

std::uint64_t dependent_add_chain(std::uint64_t iterations) {
  std::uint64_t x = 0, n = iterations, one = 1;
  // 16 register adds that each wait for the previous one: 16 cycles per iteration at any
  // clock. Register operands, not immediates: recent cores fold immediate adds at rename.
  __asm__ volatile(
      "1:\n\t"
      "add %[one], %[x]\n\tadd %[one], %[x]\n\tadd %[one], %[x]\n\tadd %[one], %[x]\n\t"
      "add %[one], %[x]\n\tadd %[one], %[x]\n\tadd %[one], %[x]\n\tadd %[one], %[x]\n\t"
      "add %[one], %[x]\n\tadd %[one], %[x]\n\tadd %[one], %[x]\n\tadd %[one], %[x]\n\t"
      "add %[one], %[x]\n\tadd %[one], %[x]\n\tadd %[one], %[x]\n\tadd %[one], %[x]\n\t"
      "dec %[n]\n\t"
      "jnz 1b\n\t"
      : [x] "+r"(x), [n] "+r"(n)
      : [one] "r"(one)
      : "cc");
  return x;
}

std::vector<ComputePeak> run_compute_peaks(const ComputeOptions& options, const CpuFeatures& cpu) {
  const auto& table = specs();
  std::vector<const KernelSpec*> runnable;
  for (const KernelSpec& k : table) {
    const bool chosen = options.only.empty() || std::find(options.only.begin(), options.only.end(), k.name) != options.only.end();
    if (chosen && unavailable_reason(k, cpu, options.level).empty()) runnable.push_back(&k);
  }
  const int rounds = std::max(options.rounds, 1);
  // samples[t * runnable.size() + k][accumulators]: 0 accumulators for the kernels without tiles.
  std::vector<std::map<int, Samples>> samples(options.thread_counts.size() * runnable.size());
  const std::size_t total = static_cast<std::size_t>(rounds) * options.thread_counts.size() * runnable.size();
  std::size_t done = 0;
  // Every kernel once per round, the rounds one after another: on a shared host a neighbour's
  // burst of a second or two then lowers one round of a kernel, not all its samples (one probe
  // read the VNNI peak 24% below the others of its day at a CV of 0.2%: its three samples had
  // followed one another within a second).
  for (int round = 0; round < rounds; ++round) {
    for (std::size_t t = 0; t < options.thread_counts.size(); ++t) {
      const unsigned threads = options.thread_counts[t];
      // One team at a time, made again each round: the idle members of a second team would
      // spin on the cores this one measures.
      ThreadTeam team(threads);
      for (std::size_t i = 0; i < runnable.size(); ++i) {
        const KernelSpec& k = *runnable[i];
        if (options.progress) {
          options.progress(fmt::format("compute {} {} thread{}, round {} of {}", k.name, threads, threads > 1 ? "s" : "",
                                       round + 1, rounds),
                           static_cast<double>(done++) / static_cast<double>(std::max<std::size_t>(total, 1)));
        }
        if (k.run_tiles != nullptr) {
          // Sweep the accumulator count: on some parts several distinct accumulators run far
          // slower than one or two, and the kernels' tile blocking should follow the best.
          for (int acc = 1; acc <= kernels_amx::kMaxAccumulators; ++acc)
            samples[t * runnable.size() + i][acc].add(measure(team, k, acc, options));
        } else {
          samples[t * runnable.size() + i][0].add(measure(team, k, 0, options));
        }
      }
    }
  }
  std::vector<ComputePeak> peaks;
  for (std::size_t t = 0; t < options.thread_counts.size(); ++t) {
    for (std::size_t i = 0; i < runnable.size(); ++i) {
      ComputePeak peak;
      peak.kernel = runnable[i]->name;
      peak.unit = runnable[i]->unit;
      peak.threads = options.thread_counts[t];
      for (const auto& [acc, s] : samples[t * runnable.size() + i]) {
        const Summary gops = summarize_rates(s.gops);
        if (acc > 0) peak.accumulator_sweep.emplace_back(acc, gops.median);
        if (gops.median > peak.gops.median) {
          peak.gops = gops;
          peak.ghz = median_of(s.ghz);
          peak.accumulators = acc;
        }
      }
      peak.ops_per_cycle_per_core = peak.ghz > 0 ? peak.gops.median / peak.threads / peak.ghz : 0;
      peaks.push_back(peak);
    }
  }
  return peaks;
}

}  // namespace infercast
