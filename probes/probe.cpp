#include "probes/probe.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>

#include "probes/error.h"
#include "probes/memory.h"
#include "probes/thread_team.h"
#include "probes/timer.h"
#include "probes/units.h"

namespace infercast {
namespace {

using nlohmann::json;

std::uint64_t round_up_pow2(std::uint64_t x) {
  std::uint64_t p = 1;
  while (p < x) p <<= 1;
  return p;
}

// The least working set the probe counts as DRAM.
std::uint64_t dram_threshold(std::uint64_t llc_bytes) { return std::max(4 * llc_bytes, kDramFloorBytes); }

json or_null(std::optional<double> v) { return v ? json(*v) : json(nullptr); }

// Points of one kernel and thread count at DRAM-sized working sets.
std::vector<const BandwidthPoint*> dram_points(const ProbeResults& r, const std::string& kernel,
                                               unsigned threads) {
  std::vector<const BandwidthPoint*> out;
  for (const auto& p : r.bandwidth) {
    // Kernels of several arrays round each array down to whole blocks: 1% of slack keeps
    // their largest size (e.g. triad's) among the DRAM points.
    if (p.kernel == kernel && p.threads == threads && p.bytes >= r.plan.dram_bytes - r.plan.dram_bytes / 100) out.push_back(&p);
  }
  return out;
}

// A kernel's DRAM figure at one thread count: the median over DRAM-sized points of each
// point's best sample (best-of-N per point, robust across points).
std::optional<double> dram_gbs(const ProbeResults& r, const std::string& kernel, unsigned threads) {
  std::vector<double> values;
  for (const auto* p : dram_points(r, kernel, threads)) values.push_back(p->gbs.best);
  if (values.empty()) return std::nullopt;
  return median_of(values);
}

std::pair<std::optional<double>, unsigned> best_dram(const ProbeResults& r, const std::string& kernel) {
  std::optional<double> best;
  unsigned best_threads = 0;
  for (unsigned t : r.plan.thread_counts) {
    const auto v = dram_gbs(r, kernel, t);
    if (v && (!best || *v > *best)) {
      best = v;
      best_threads = t;
    }
  }
  return {best, best_threads};
}

std::optional<double> plateau_value(const std::vector<Plateau>& plateaus, const std::string& level) {
  for (const auto& p : plateaus) {
    if (p.level == level) return p.value;
  }
  return std::nullopt;
}

std::optional<double> peak_at_all_cores(const ProbeResults& r, std::initializer_list<const char*> kernels) {
  const unsigned all = r.plan.thread_counts.back();
  std::optional<double> best;
  for (const auto& p : r.compute) {
    if (p.threads != all) continue;
    for (const char* k : kernels) {
      if (p.kernel == k && (!best || p.gops.best > *best)) best = p.gops.best;
    }
  }
  return best;
}

std::vector<Plateau> read_sweep_plateaus(const ProbeResults& r, unsigned threads, const Topology& topo) {
  std::vector<SweepSample> sweep;
  for (const auto& p : r.bandwidth) {
    if (p.kernel == "read" && p.threads == threads) sweep.push_back({p.bytes_per_thread, p.gbs.best});
  }
  return label_plateaus(find_plateaus(sweep), topo, threads);
}

json summary_json(const Summary& s) {
  return {{"best", s.best}, {"median", s.median}, {"worst", s.worst}, {"cv", s.cv}, {"samples", s.samples}};
}

json plateaus_json(const std::vector<Plateau>& plateaus) {
  json out = json::array();
  for (const auto& p : plateaus) {
    out.push_back({{"level", p.level}, {"from_bytes", p.from_bytes}, {"to_bytes", p.to_bytes},
                   {"value", p.value}, {"samples", p.samples}});
  }
  return out;
}

}  // namespace

ProbePlan plan_probe(const ProbeOptions& options, const Topology& topo, const CpuFeatures& cpu) {
  ProbePlan plan;
  const unsigned cores = std::max(topo.cores, 1U);
  if (options.threads > cores) {
    throw UsageError(fmt::format("--threads {} exceeds the {} physical cores of this machine",
                                 options.threads, cores));
  }
  const unsigned max_threads = options.threads == 0 ? cores : options.threads;
  for (unsigned t = 1; t <= max_threads; ++t) {
    // Quick runs measure one thread and all threads; full runs every count in between.
    if (!options.quick || t == 1 || t == max_threads) plan.thread_counts.push_back(t);
  }

  const std::uint64_t available = available_memory_bytes();
  const CacheLevel* llc = topo.last_level_cache();
  const std::uint64_t llc_bytes = llc != nullptr ? llc->size_bytes : (32ULL << 20);
  if (options.max_memory > 0) {
    if (options.max_memory > available) {
      throw UsageError(fmt::format("--max-memory {} exceeds the {} of memory available now",
                                   format_size(options.max_memory), format_size(available)));
    }
    if (options.max_memory < (1ULL << 20)) {
      throw UsageError("--max-memory must be at least 1 MiB to measure anything");
    }
    plan.max_bytes = options.max_memory;
  } else {
    // STREAM's rule, DRAM working sets at least 4x the last-level cache, and never below a
    // small model's weights (kDramFloorBytes: caches this host does not report sped up 256 MiB);
    // leave half the available memory to everything else. The full run goes one octave further,
    // so the DRAM figure is the median of several sizes: one size alone caught a quiet minute
    // of a shared host (40 GB/s at 128 MiB beside 25-30 at the sizes around it).
    plan.max_bytes = std::min(round_up_pow2(dram_threshold(llc_bytes)) * (options.quick ? 1 : 2), available / 2);
  }
  plan.dram_bytes = std::min(dram_threshold(llc_bytes), plan.max_bytes);
  plan.latency_max_bytes = std::min(round_up_pow2(4 * llc_bytes) * (options.quick ? 1 : 2), plan.max_bytes);
  plan.latency_dram_bytes = std::min(4 * llc_bytes, plan.latency_max_bytes);
  plan.level = choose_level(cpu, options.isa);

  const double min_time = options.min_time > 0 ? options.min_time : (options.quick ? 0.003 : 0.006);
  auto& bw = plan.bandwidth;
  bw.thread_counts = plan.thread_counts;
  bw.min_bytes = 4096;
  bw.max_bytes = plan.max_bytes;
  bw.points_per_octave = options.quick ? 1 : 3;
  bw.sparse_stride = 3;
  bw.min_time = min_time;
  bw.samples = options.quick ? 3 : 5;
  bw.level = plan.level;

  auto& lat = plan.latency;
  lat.sizes = sweep_sizes(4096, plan.latency_max_bytes, 2, 4096);
  if (options.quick) {
    // Every second octave, always keeping the largest (DRAM) size.
    std::vector<std::uint64_t> sparse;
    const std::size_t last = lat.sizes.size() - 1;
    for (std::size_t i = last % 4; i <= last; i += 4) sparse.push_back(lat.sizes[i]);
    lat.sizes = sparse;
  }
  lat.min_time = options.quick ? min_time : 3 * min_time;
  lat.samples = options.quick ? 2 : 3;

  auto& loaded = plan.loaded;
  loaded.bytes = plan.dram_bytes / max_threads;
  loaded.threads = max_threads;
  loaded.delays_ns = options.quick ? std::vector<double>{0} : std::vector<double>{0, 500, 2000, 10000};
  loaded.seconds_per_point = options.quick ? 0.15 : 0.4;
  loaded.level = plan.level;

  auto& comp = plan.compute;
  comp.thread_counts = plan.thread_counts;
  comp.min_time = options.quick ? 3 * min_time : 8 * min_time;
  comp.samples = options.quick ? 1 : 2;
  comp.rounds = options.quick ? 2 : 3;
  comp.level = plan.level;
  return plan;
}

ProbeResults run_probe(const ProbePlan& plan, const Topology& topo, const CpuFeatures& cpu,
                       const ProbeOptions& options) {
  ProbeResults r;
  r.plan = plan;
  const double start = now_seconds();
  // Each stage reports into its own slice of the progress bar, roughly its share of the time.
  auto stage_progress = [&](double from, double to) -> ProgressFn {
    if (!options.progress) return {};
    return [&, from, to](const std::string& what, double f) { options.progress(what, from + (to - from) * f); };
  };
  if (options.progress) options.progress("frequency", 0.0);
  r.core_ghz = measure_frequency_ghz(0.05);

  ProbePlan p = plan;
  p.bandwidth.progress = stage_progress(0.0, 0.6);
  r.bandwidth = run_bandwidth_sweep(p.bandwidth, topo);
  for (unsigned t : plan.thread_counts) r.read_plateaus[t] = read_sweep_plateaus(r, t, topo);

  if (options.counters) {
    if (options.progress) options.progress("hardware counters", 0.6);
    // One DRAM-sized read pass on this thread, counted where counters exist.
    const std::size_t n = plan.dram_bytes / 4 / kBandwidthBlock * kBandwidthBlock;
    pin_current_thread_to_core(0);
    PageBuffer buffer(n * 4);
    std::fill_n(buffer.as<std::uint32_t>(), n, 1U);
    const StreamKernels& k = stream_kernels_for(plan.level);
    r.counters = observe_counters(
        [&] {
          const std::uint32_t sum = k.read(buffer.as<std::uint32_t>(), n, 1, 8);
          if (sum != static_cast<std::uint32_t>(n)) throw std::runtime_error("counter read probe computed wrong results");
          return static_cast<double>(n) * 4;
        },
        topo.last_level_cache() != nullptr ? topo.last_level_cache()->line_bytes : 64);
  }

  p.latency.progress = stage_progress(0.62, 0.8);
  r.latency = run_latency_sweep(p.latency);
  std::vector<SweepSample> lat_sweep;
  for (const auto& l : r.latency) lat_sweep.push_back({l.bytes, l.ns});
  r.latency_plateaus = label_plateaus(find_plateaus(lat_sweep, 0.2), topo, 1);

  if (options.progress) options.progress("loaded latency", 0.8);
  r.loaded_latency = run_loaded_latency(p.loaded);

  p.compute.progress = stage_progress(0.85, 1.0);
  r.compute = run_compute_peaks(p.compute, cpu);
  r.seconds = now_seconds() - start;
  if (options.progress) options.progress("done", 1.0);
  return r;
}

json summarize(const ProbeResults& r) {
  json s;
  const auto [read_gbs, read_threads] = best_dram(r, "read");
  s["dram_read_gbs"] = or_null(read_gbs);
  s["dram_copy_gbs"] = or_null(best_dram(r, "copy").first);
  s["dram_triad_gbs"] = or_null(best_dram(r, "triad").first);
  s["dram_write_nt_gbs"] = or_null(best_dram(r, "write_nt").first);
  const auto one = r.read_plateaus.find(1);
  const std::vector<Plateau> none;
  const auto& single = one != r.read_plateaus.end() ? one->second : none;
  s["l1_read_gbs_per_core"] = or_null(plateau_value(single, "L1"));
  s["l2_read_gbs_per_core"] = or_null(plateau_value(single, "L2"));
  s["l3_read_gbs_per_core"] = or_null(plateau_value(single, "L3"));
  std::vector<double> dram_ns;
  for (const auto& l : r.latency) {
    if (l.bytes >= r.plan.latency_dram_bytes) dram_ns.push_back(l.ns);
  }
  s["dram_latency_ns"] = dram_ns.empty() ? json(nullptr) : json(median_of(dram_ns));
  s["l1_latency_ns"] = or_null(plateau_value(r.latency_plateaus, "L1"));
  s["peak_fp32_gflops"] = or_null(peak_at_all_cores(r, {"fp32_fma_avx512", "fp32_fma_avx2"}));
  // The 256-bit FMA peak on its own: on cores that split 512-bit instructions in two (Zen 4)
  // it is the 512-bit peak, not half of it, and the AVX2 kernels are judged against it.
  s["peak_fp32_avx2_gflops"] = or_null(peak_at_all_cores(r, {"fp32_fma_avx2"}));
  s["peak_bf16_gflops"] = or_null(peak_at_all_cores(r, {"bf16_dot_avx512"}));
  s["peak_int8_vnni_gops"] = or_null(peak_at_all_cores(r, {"int8_vnni_avx512", "int8_avx_vnni"}));
  s["peak_int8_avx2_gops"] = or_null(peak_at_all_cores(r, {"int8_avx2"}));
  s["peak_amx_int8_gops"] = or_null(peak_at_all_cores(r, {"amx_int8"}));
  s["peak_amx_bf16_gflops"] = or_null(peak_at_all_cores(r, {"amx_bf16"}));
  s["best_threads_for_bandwidth"] = read_gbs ? json(read_threads) : json(nullptr);
  s["core_ghz"] = r.core_ghz;
  return s;
}

json profile_json(const ProbeResults& r, const Topology& topo, const CpuFeatures& cpu) {
  json j;
  j["schema"] = kProfileSchema;
  j["isa_level"] = std::string(to_string(r.plan.level));
  j["probe_seconds"] = r.seconds;

  json caches = json::array();
  for (const auto& c : topo.caches) {
    caches.push_back({{"level", c.level}, {"type", c.type}, {"size_bytes", c.size_bytes},
                      {"line_bytes", c.line_bytes}, {"instances", c.instances},
                      {"cores_sharing", c.cores_sharing}, {"threads_sharing", c.threads_sharing}});
  }
  j["topology"] = {
      {"packages", topo.packages}, {"numa_nodes", topo.numa_nodes}, {"cores", topo.cores},
      {"threads", topo.threads}, {"caches", caches},
      {"total_memory_bytes", topo.total_memory_bytes},
      {"available_memory_bytes", topo.available_memory_bytes},
      {"huge_pages",
       {{"transparent", topo.huge_pages.transparent_mode},
        {"hugetlb_page_bytes", topo.huge_pages.hugetlb_page_bytes},
        {"hugetlb_total", topo.huge_pages.hugetlb_total},
        {"hugetlb_free", topo.huge_pages.hugetlb_free}}}};

  j["cpu"] = {{"vendor", cpu.vendor}, {"brand", cpu.brand}, {"hypervisor", cpu.hypervisor},
              {"features", cpu.usable_names()}, {"amx_usable", cpu.amx_usable},
              {"amx_reason", cpu.amx_reason.empty() ? json(nullptr) : json(cpu.amx_reason)},
              {"max_isa_level", std::string(to_string(max_supported_level(cpu)))}};

  j["settings"] = {{"thread_counts", r.plan.thread_counts},
                   {"max_bytes", r.plan.max_bytes},
                   {"dram_bytes", r.plan.dram_bytes},
                   {"latency_max_bytes", r.plan.latency_max_bytes},
                   {"latency_dram_bytes", r.plan.latency_dram_bytes},
                   {"min_time_s", r.plan.bandwidth.min_time},
                   {"samples", r.plan.bandwidth.samples},
                   {"compute_rounds", r.plan.compute.rounds},
                   {"compute_samples_per_round", r.plan.compute.samples},
                   {"stream_prefetch", std::string(to_string(active_prefetch_hint()))},
                   {"units", "GB/s = 1e9 bytes/s; bytes exclude write-allocate traffic"}};

  json kernels = json::array();
  for (const auto& c : all_stream_contracts()) {
    kernels.push_back({{"name", c.name}, {"arrays", c.arrays}, {"bytes_read_per_element", c.bytes_read},
                       {"bytes_written_per_element", c.bytes_written}, {"stores", c.stores}});
  }
  json points = json::array();
  for (const auto& p : r.bandwidth) {
    points.push_back({{"kernel", p.kernel}, {"threads", p.threads}, {"bytes", p.bytes},
                      {"bytes_per_thread", p.bytes_per_thread}, {"streams", p.streams},
                      {"passes", p.passes}, {"gbs", summary_json(p.gbs)}});
  }
  json plateaus = json::object();
  for (const auto& [t, ps] : r.read_plateaus) plateaus[std::to_string(t)] = plateaus_json(ps);
  j["bandwidth"] = {{"kernels", kernels}, {"points", points}, {"read_plateaus_by_threads", plateaus}};

  json lat = json::array();
  for (const auto& l : r.latency) {
    lat.push_back({{"bytes", l.bytes}, {"ns", l.ns}, {"best_ns", l.best_ns},
                   {"cycles", l.ns * r.core_ghz}, {"huge_pages", l.huge_pages}});
  }
  json loaded = json::array();
  for (const auto& l : r.loaded_latency) {
    loaded.push_back({{"delay_ns", l.delay_ns}, {"stream_threads", l.stream_threads},
                      {"stream_gbs", l.stream_gbs}, {"latency_ns", l.latency_ns}});
  }
  j["latency"] = {{"points", lat}, {"plateaus", plateaus_json(r.latency_plateaus)},
                  {"loaded", loaded},
                  {"loaded_unavailable_reason",
                   r.loaded_latency.empty() ? json("needs at least two cores: one to chase, one to load")
                                            : json(nullptr)}};

  json peaks = json::array();
  for (const auto& p : r.compute) {
    json sweep = json::array();
    for (const auto& [acc, g] : p.accumulator_sweep) sweep.push_back({{"accumulators", acc}, {"gops", g}});
    peaks.push_back({{"kernel", p.kernel}, {"unit", p.unit}, {"threads", p.threads},
                     {"gops", summary_json(p.gops)}, {"ghz", p.ghz},
                     {"ops_per_cycle_per_core", p.ops_per_cycle_per_core},
                     {"accumulators", p.accumulators == 0 ? json(nullptr) : json(p.accumulators)},
                     {"accumulator_sweep", sweep}});
  }
  json unavailable = json::array();
  for (const auto& k : compute_kernels(cpu, r.plan.level)) {
    if (!k.available) unavailable.push_back({{"kernel", k.name}, {"reason", k.reason}});
  }
  j["compute"] = {{"peaks", peaks}, {"unavailable", unavailable}};

  if (r.counters) {
    json backends = json::array();
    for (const auto& b : r.counters->backends) {
      json readings = json::object();
      for (const auto& x : b.readings) readings[x.event] = x.value;
      backends.push_back({{"backend", b.name}, {"available", b.available},
                          {"reason", b.reason.empty() ? json(nullptr) : json(b.reason)},
                          {"readings", readings}});
    }
    j["counters"] = {{"backends", backends},
                     {"timed_bytes", or_null(r.counters->timed_bytes)},
                     {"counted_bytes", or_null(r.counters->counted_bytes)}};
  } else {
    j["counters"] = {{"backends", json::array()}, {"skipped", true}};
  }
  j["summary"] = summarize(r);
  return j;
}

}  // namespace infercast
