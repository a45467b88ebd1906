#pragma once
// Compute peaks per instruction family and thread count, with the core frequency measured
// beside each (AVX-512 and AMX run at their own licence clocks).
#include <optional>
#include <string>
#include <vector>

#include "probes/bandwidth.h"
#include "probes/cpu_features.h"

namespace infercast {

struct ComputeKernelInfo {
  std::string name;       // e.g. "fp32_fma_avx512"
  std::string unit;       // "GFLOPS" or "GOPS"
  IsaLevel level;         // dispatch level the kernel needs
  bool available = false;  // CPU, OS and the requested level allow it
  std::string reason;      // why not, when unavailable
};

// Every kernel the probe knows, with whether it can run here at `level`.
std::vector<ComputeKernelInfo> compute_kernels(const CpuFeatures& cpu, IsaLevel level);

struct ComputePeak {
  std::string kernel;
  std::string unit;
  unsigned threads = 0;
  int accumulators = 0;       // AMX only: distinct accumulator tiles of the best run
  Summary gops;               // 1e9 ops/s over samples of every round, all threads together
  double ghz = 0;             // dependent-add frequency right after each round's run, median
  double ops_per_cycle_per_core = 0;  // median gops / threads / ghz
  // AMX only: the accumulator sweep, median GOPS per accumulator count.
  std::vector<std::pair<int, double>> accumulator_sweep;
};

struct ComputeOptions {
  std::vector<unsigned> thread_counts{1};
  double min_time = 0.05;
  int samples = 3;  // per round
  int rounds = 3;   // every kernel once per round; a peak is the best sample of all rounds
  IsaLevel level = IsaLevel::scalar;
  // Only the kernels of these names (compute_kernels' names); every one when empty. A tool that
  // brackets its own runs with one instruction family's rate needs that one alone.
  std::vector<std::string> only;
  ProgressFn progress;
};

std::vector<ComputePeak> run_compute_peaks(const ComputeOptions& options, const CpuFeatures& cpu);

// Core frequency in GHz from a dependent add chain of at least `seconds`, on the calling thread.
double measure_frequency_ghz(double seconds);

}  // namespace infercast
