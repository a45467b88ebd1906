#pragma once
// Finds the flat stretches ("plateaus") of a bandwidth or latency sweep and names them after
// the memory level they belong to. The segmentation uses only the measured curve; the cache
// sizes from the topology are used afterwards, to label what the data shows.
#include <cstdint>
#include <string>
#include <vector>

#include "probes/topology.h"

namespace infercast {

struct SweepSample {
  std::uint64_t bytes_per_thread = 0;  // working set one thread touches
  double value = 0;                    // GB/s or ns
};

struct Plateau {
  std::string level;  // "L1", "L2", "L3", "DRAM"
  std::uint64_t from_bytes = 0;  // smallest per-thread working set in the plateau
  std::uint64_t to_bytes = 0;    // largest
  double value = 0;              // median of the plateau's samples
  int samples = 0;
};

// Splits the sweep (sorted by size) into runs whose samples stay within `tolerance` (relative)
// of the run's median; runs of at least `min_samples` samples are plateaus, the samples between
// them are transitions.
std::vector<Plateau> find_plateaus(const std::vector<SweepSample>& sweep, double tolerance = 0.15,
                                   int min_samples = 2);

// Labels plateaus with memory levels: each takes the smallest cache level that holds its largest
// working set (per thread, as seen by one thread's share of the cache); beyond the last-level
// cache it is DRAM. When two plateaus claim one level, the longer one keeps the label and the
// other is dropped (it is a transition shelf).
std::vector<Plateau> label_plateaus(std::vector<Plateau> plateaus, const Topology& topo,
                                    unsigned threads);

}  // namespace infercast
