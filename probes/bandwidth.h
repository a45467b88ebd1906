#pragma once
// The bandwidth probe: streaming kernels over a working-set sweep from inside L1 to far beyond
// the last-level cache, for several thread counts. Every thread is pinned, first-touches its
// own memory, and the time of a sample is that of the slowest thread.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "probes/bandwidth_kernels.h"
#include "probes/stats.h"
#include "probes/topology.h"

namespace infercast {

struct BandwidthPoint {
  std::string kernel;
  unsigned threads = 0;
  std::uint64_t bytes = 0;             // working set of all threads and arrays
  std::uint64_t bytes_per_thread = 0;
  unsigned streams = 1;                // concurrent streams per thread (read only)
  std::uint64_t passes = 0;            // passes per sample, calibrated to the minimum time
  Summary gbs;                         // 1e9 bytes/s over the samples
};

// Called with a short description and the fraction of the probe done.
using ProgressFn = std::function<void(const std::string& what, double fraction)>;

struct BandwidthOptions {
  std::vector<unsigned> thread_counts{1};
  std::vector<StreamKernel> kernels{StreamKernel::read, StreamKernel::write,
                                    StreamKernel::write_nt, StreamKernel::copy,
                                    StreamKernel::triad};
  std::uint64_t min_bytes = 4096;
  std::uint64_t max_bytes = 64ULL << 20;
  int points_per_octave = 2;
  // Thread counts other than 1 and the largest run only every `sparse_stride`-th size, enough
  // to find the best thread count without multiplying the run time by the core count.
  int sparse_stride = 1;
  double min_time = 0.01;  // seconds per sample (a sample repeats passes to reach it)
  int samples = 3;         // kept samples; one more warm-up sample is discarded
  IsaLevel level = IsaLevel::scalar;
  ProgressFn progress;
};

// Geometric sweep of total working-set sizes, `per_octave` points per doubling, each rounded
// to a multiple of `granularity` bytes and strictly increasing.
std::vector<std::uint64_t> sweep_sizes(std::uint64_t min_bytes, std::uint64_t max_bytes,
                                       int per_octave, std::uint64_t granularity);

// How many concurrent streams the read kernel uses for a per-thread working set: one while it
// fits the L1 (loop overhead dominates), four in L2, eight beyond (prefetch streams dominate).
unsigned read_streams_for(std::uint64_t bytes_per_thread, const Topology& topo);

std::vector<BandwidthPoint> run_bandwidth_sweep(const BandwidthOptions& options,
                                                const Topology& topo);

// The least working set measured as DRAM: a small model's weights. A host can keep part of a
// smaller one in caches it does not report: on a Zen 5 guest reporting a 32 MiB L3, GEMV over
// 256 MiB of weights ran 7-23% faster than over 2 GiB and the read 3-5% faster (medians), while
// 1 GiB ran within 6% of 2 GiB (docs/PERFORMANCE.md, twenty-ninth session). The engine streams
// gigabytes.
inline constexpr std::uint64_t kDramFloorBytes = std::uint64_t{1} << 30;
// Where memory is short, no buffer goes below this.
inline constexpr std::uint64_t kDramLeastBytes = std::uint64_t{256} << 20;

// A working set counted as DRAM: `cache_multiple` times the whole last-level cache, at least
// kDramFloorBytes, and no more than a quarter of the available memory unless that is below
// kDramLeastBytes.
std::uint64_t dram_working_set(const Topology& topo, std::uint64_t cache_multiple);

// A buffer no cache serves a useful part of: dram_working_set at twice the last-level cache.
// Less misleads on a large L3: the 300 MiB L3 of one 16-core Xeon streamed a 256 MiB buffer at
// 143 GB/s and a 512 MiB one at 96 (DRAM).
std::uint64_t dram_buffer_bytes(const Topology& topo);

// The probe's read kernel on `bytes` (0: dram_buffer_bytes of this host) at `threads` threads:
// the median GB/s of five samples. A quick same-minute ceiling for a measurement judged against
// DRAM.
double measure_dram_read_gbs(unsigned threads, IsaLevel level, std::uint64_t bytes = 0);

// Bytes one pass moves for a kernel over n elements per thread, by the kernel's contract.
std::uint64_t bytes_per_pass(StreamKernel kernel, std::uint64_t elements);

}  // namespace infercast
