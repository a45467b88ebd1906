#pragma once
// `infercast probe` as a library call: runs every probe with one set of options and gathers
// the results into a machine profile (JSON schema "infercast.profile/1").
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "probes/bandwidth.h"
#include "probes/compute.h"
#include "probes/counters.h"
#include "probes/cpu_features.h"
#include "probes/latency.h"
#include "probes/plateau.h"
#include "probes/topology.h"

namespace infercast {

inline constexpr const char* kProfileSchema = "infercast.profile/1";

struct ProbeOptions {
  bool quick = false;
  unsigned threads = 0;             // largest thread count; 0 = every physical core
  std::uint64_t max_memory = 0;     // bytes for the largest working set; 0 = automatic
  double min_time = 0;              // seconds per sample; 0 = the mode's default
  std::optional<IsaLevel> isa;      // cap on the dispatch level
  bool counters = true;             // try PAPI/likwid around the DRAM read probe
  ProgressFn progress;
};

// The settings a run resolves from its options and the machine, recorded in the profile.
struct ProbePlan {
  std::vector<unsigned> thread_counts;
  std::uint64_t max_bytes = 0;
  std::uint64_t dram_bytes = 0;  // working sets at least this large count as DRAM
  // The load-latency sweep's own: pointer chases at 4x the last-level cache already miss it, and
  // chasing gigabytes at DRAM latency would take most of a minute.
  std::uint64_t latency_max_bytes = 0;
  std::uint64_t latency_dram_bytes = 0;
  IsaLevel level = IsaLevel::scalar;
  BandwidthOptions bandwidth;
  LatencyOptions latency;
  LoadedLatencyOptions loaded;
  ComputeOptions compute;
};

// Checks options against the machine and resolves them. Throws UsageError for impossible
// requests (zero or too many threads, more memory than is available, too little to measure).
ProbePlan plan_probe(const ProbeOptions& options, const Topology& topo, const CpuFeatures& cpu);

struct ProbeResults {
  ProbePlan plan;
  double seconds = 0;
  double core_ghz = 0;
  std::vector<BandwidthPoint> bandwidth;
  std::map<unsigned, std::vector<Plateau>> read_plateaus;  // by thread count
  std::vector<LatencyPoint> latency;
  std::vector<Plateau> latency_plateaus;
  std::vector<LoadedLatencyPoint> loaded_latency;
  std::vector<ComputePeak> compute;
  std::optional<CounterReport> counters;
};

ProbeResults run_probe(const ProbePlan& plan, const Topology& topo, const CpuFeatures& cpu,
                       const ProbeOptions& options);

// The profile document and its `summary` object (null where a figure could not be measured).
nlohmann::json profile_json(const ProbeResults& results, const Topology& topo,
                            const CpuFeatures& cpu);
nlohmann::json summarize(const ProbeResults& results);

}  // namespace infercast
