#include <gtest/gtest.h>

#include <algorithm>

#include "probes/error.h"
#include "probes/probe.h"

using namespace infercast;

TEST(ProbePlan, RejectsImpossibleRequests) {
  const Topology& topo = host_topology();
  ProbeOptions o;
  o.threads = topo.cores + 1;
  EXPECT_THROW(plan_probe(o, topo, host_cpu()), UsageError);
  o.threads = 0;
  o.max_memory = available_memory_bytes() * 2 + (1ULL << 30);
  EXPECT_THROW(plan_probe(o, topo, host_cpu()), UsageError);
  o.max_memory = 1000;
  EXPECT_THROW(plan_probe(o, topo, host_cpu()), UsageError);
}

TEST(ProbePlan, DefaultsFollowTheMachine) {
  const Topology& topo = host_topology();
  ProbeOptions o;
  const ProbePlan full = plan_probe(o, topo, host_cpu());
  EXPECT_EQ(full.thread_counts.size(), topo.cores);
  EXPECT_EQ(full.thread_counts.back(), topo.cores);
  if (const CacheLevel* llc = topo.last_level_cache()) {
    // STREAM's rule, unless memory is too scarce for it.
    if (available_memory_bytes() / 2 >= 8 * llc->size_bytes) {
      // An octave past the DRAM threshold, so several sizes count as DRAM.
      EXPECT_GE(full.max_bytes, 2 * full.dram_bytes);
    }
  }
  // DRAM sizes start no lower than a small model's weights, where memory allows.
  EXPECT_GE(full.dram_bytes, std::min<std::uint64_t>(kDramFloorBytes, full.max_bytes));
  EXPECT_LE(full.max_bytes, available_memory_bytes() / 2);
  o.quick = true;
  o.isa = IsaLevel::scalar;
  const ProbePlan quick = plan_probe(o, topo, host_cpu());
  EXPECT_EQ(quick.level, IsaLevel::scalar);
  EXPECT_LT(quick.bandwidth.points_per_octave, full.bandwidth.points_per_octave);
  EXPECT_EQ(quick.latency.sizes.back(), quick.latency_max_bytes / 4096 * 4096);
  EXPECT_LE(quick.latency_max_bytes, quick.max_bytes);
  EXPECT_LE(full.latency_dram_bytes, full.dram_bytes);
}

TEST(Probe, TinyRunProducesACompleteProfile) {
  const Topology& topo = host_topology();
  ProbeOptions o;
  o.quick = true;
  o.max_memory = 8ULL << 20;
  o.min_time = 0.0005;
  o.isa = IsaLevel::scalar;  // also checks that absent ISAs give null peaks
  const ProbePlan plan = plan_probe(o, topo, host_cpu());
  const ProbeResults r = run_probe(plan, topo, host_cpu(), o);
  const auto j = profile_json(r, topo, host_cpu());
  EXPECT_EQ(j["schema"], kProfileSchema);
  EXPECT_EQ(j["isa_level"], "scalar");
  const auto& s = j["summary"];
  for (const char* key : {"dram_read_gbs", "dram_copy_gbs", "dram_triad_gbs", "l1_read_gbs_per_core",
                          "l2_read_gbs_per_core", "l3_read_gbs_per_core", "dram_latency_ns",
                          "peak_fp32_gflops", "peak_fp32_avx2_gflops", "peak_bf16_gflops", "peak_int8_vnni_gops", "peak_int8_avx2_gops",
                          "peak_amx_int8_gops", "peak_amx_bf16_gflops", "best_threads_for_bandwidth"}) {
    EXPECT_TRUE(s.contains(key)) << key;
  }
  EXPECT_GT(s["dram_read_gbs"].get<double>(), 0.0);
  // The hint the DRAM read asked for lines ahead with, the kernels' too.
  EXPECT_EQ(j["settings"]["stream_prefetch"], std::string(to_string(active_prefetch_hint())));
  // Triad's three arrays round down to whole blocks; its largest size still counts as DRAM.
  EXPECT_FALSE(s["dram_triad_gbs"].is_null());
  EXPECT_TRUE(s["peak_fp32_gflops"].is_null());
  EXPECT_TRUE(s["peak_int8_avx2_gops"].is_null());
  EXPECT_TRUE(s["peak_amx_int8_gops"].is_null());
  EXPECT_FALSE(j["compute"]["unavailable"].empty());
  EXPECT_FALSE(j["bandwidth"]["points"].empty());
  EXPECT_FALSE(j["latency"]["points"].empty());
  EXPECT_EQ(j["counters"]["backends"].size(), 2U);
}
