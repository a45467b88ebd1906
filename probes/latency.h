#pragma once
// Load latency: one dependent pointer chase through a random single-cycle permutation of cache
// lines (Sattolo's algorithm), so neither the prefetchers nor out-of-order execution can overlap
// the loads. Loaded latency repeats the chase at a DRAM-sized working set while the other cores
// stream reads with a configurable pause, as Intel MLC's loaded-latency mode does.
#include <cstdint>
#include <string>
#include <vector>

#include "probes/bandwidth.h"
#include "probes/cpu_features.h"
#include "probes/memory.h"

namespace infercast {

struct LatencyPoint {
  std::uint64_t bytes = 0;
  double ns = 0;      // median over samples, per load
  double best_ns = 0;
  bool huge_pages = false;  // the buffer was (partly) backed by transparent huge pages
};

struct LoadedLatencyPoint {
  double delay_ns = 0;        // pause the streaming cores insert after each 1 MiB block
  unsigned stream_threads = 0;
  double stream_gbs = 0;      // bandwidth the streaming cores achieved meanwhile
  double latency_ns = 0;      // the chase's median latency meanwhile
};

struct LatencyOptions {
  std::vector<std::uint64_t> sizes;
  double min_time = 0.02;  // seconds per sample
  int samples = 3;
  std::uint64_t seed = 0x1f2e3d4c5b6a7988ULL;
  ProgressFn progress;
};

// Fills `lines` cache lines of `buffer` with a single cycle visiting every line once, in random
// order. Each line's first 8 bytes hold the address of the next line.
void build_chase(void* buffer, std::size_t lines, std::uint64_t seed);

// Follows the chain for `loads` loads from `start`; returns where it stopped, so callers can
// check the walk and the compiler cannot drop it.
const void* chase(const void* start, std::uint64_t loads);

std::vector<LatencyPoint> run_latency_sweep(const LatencyOptions& options);

struct LoadedLatencyOptions {
  std::uint64_t bytes = 0;          // chase and per-streamer working set
  unsigned threads = 2;             // total: one chaser plus threads - 1 streamers
  std::vector<double> delays_ns{0};
  double seconds_per_point = 0.3;
  IsaLevel level = IsaLevel::scalar;
};

// Empty when fewer than two threads are available (nothing can load the chaser).
std::vector<LoadedLatencyPoint> run_loaded_latency(const LoadedLatencyOptions& options);

}  // namespace infercast
