// infercast_decode_scaling: how a model's aggregate decode rate grows with concurrency, measured
// as `infercast run` measures it, the concurrencies alternated round after round on one loaded
// model. On a shared host one user's decode follows the DRAM read and a quantized batch's the
// rate of its multiply instructions, and each moves by tens of percent between minutes: a ratio
// of runs made apart says little. Each round measures both around its runs, on all threads: the
// probe's DRAM read, and a short sample of the probe's INT8 kernel of the batch kernels'
// instruction family with the clock right after it. The clock alone does not tell: on a guest a
// core's vector units are shared with whatever runs on its other hardware thread. The medians
// over rounds are printed last.
//
//   infercast_decode_scaling --model M.gguf [--rounds 5] [--concurrency 1,8] [--threads N]
//                            [--prompt 16] [--gen 64]
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/tool_main.h"
#include "engine/model.h"
#include "engine/run.h"
#include "probes/bandwidth.h"
#include "probes/compute.h"
#include "probes/cpu_features.h"
#include "probes/error.h"
#include "probes/stats.h"
#include "probes/topology.h"

namespace {

using namespace infercast;

// The instruction family a quantized batch multiplies with: the batch kernels below the AMX
// tiles' batches run on AVX-512 VNNI, AVX-VNNI or AVX2's vpmaddubsw (empty on a scalar host).
std::string int8_family(const CpuFeatures& cpu, IsaLevel level) {
  if (level >= IsaLevel::avx512 && cpu.avx512_vnni) return "int8_vnni_avx512";
  if (level >= IsaLevel::avx2 && cpu.avx_vnni) return "int8_avx_vnni";
  if (level >= IsaLevel::avx2) return "int8_avx2";
  return {};
}

struct HostState {
  double read_gbs = 0;
  double gops = 0;  // the family's rate on every thread together, 0 without one
  double ghz = 0;   // the dependent-add clock right after it (or alone, without a family)
};

HostState host_state(unsigned threads, const std::string& family) {
  HostState s;
  s.read_gbs = measure_dram_read_gbs(threads, active_level());
  if (family.empty()) {
    s.ghz = measure_frequency_ghz(0.02);
    return s;
  }
  // One short sample: a rate at this minute, not a peak.
  ComputeOptions c;
  c.thread_counts = {threads};
  c.min_time = 0.02;
  c.samples = 1;
  c.rounds = 1;
  c.level = active_level();
  c.only = {family};
  const std::vector<ComputePeak> peaks = run_compute_peaks(c, host_cpu());
  if (!peaks.empty()) {
    s.gops = peaks[0].gops.median;
    s.ghz = peaks[0].ghz;
  }
  return s;
}

std::string describe(const HostState& s, const std::string& family) {
  const std::string read = fmt::format("read {:.1f} GB/s", s.read_gbs);
  if (s.gops > 0) return fmt::format("{}, {} {:.0f} GOPS at {:.2f} GHz", read, family, s.gops, s.ghz);
  return fmt::format("{}, clock {:.2f} GHz", read, s.ghz);
}

double decode_tps(const Model& model, const RunOptions& base, int concurrency) {
  RunOptions o = base;
  o.concurrency = concurrency;
  return run_model(model, o, nullptr).decode_tps;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Aggregate decode rate per concurrency, alternated on one loaded model, with the host's read and INT8 rate"};
  std::string path;
  int rounds = 5;
  std::vector<int> concurrencies{1, 8};
  unsigned threads = host_topology().cores;
  int prompt = 16;
  int gen = 64;
  app.add_option("--model", path)->required();
  app.add_option("--rounds", rounds)->check(CLI::Range(1, 100));
  app.add_option("--concurrency", concurrencies)->delimiter(',')->check(CLI::Range(1, 512));
  app.add_option("--threads", threads)->check(CLI::Range(1U, host_topology().cores));
  app.add_option("--prompt", prompt)->check(CLI::Range(1, 1 << 20));
  app.add_option("--gen", gen)->check(CLI::Range(2, 1 << 20));
  return run_tool(app, "infercast_decode_scaling", argc, argv, [&] {
    const Model model = Model::load(path);
    const std::string family = int8_family(host_cpu(), active_level());
    RunOptions o;
    o.threads = threads;
    o.prompt_tokens = prompt;
    o.gen_tokens = gen;
    // The first run after a load pays for first touches: one of each, dropped.
    for (int c : concurrencies) decode_tps(model, o, c);
    std::vector<std::vector<double>> tps(concurrencies.size());
    std::vector<double> ratios;
    for (int r = 0; r < rounds; ++r) {
      const HostState before = host_state(threads, family);
      std::string line = fmt::format("round {}:", r);
      for (std::size_t i = 0; i < concurrencies.size(); ++i) {
        tps[i].push_back(decode_tps(model, o, concurrencies[i]));
        line += fmt::format(" C={} {:.1f}", concurrencies[i], tps[i].back());
      }
      ratios.push_back(tps.back().back() / tps.front().back());
      const HostState after = host_state(threads, family);
      line += fmt::format(" tok/s, C={}/C={} {:.2f}; before {}; after {}", concurrencies.back(), concurrencies.front(),
                          ratios.back(), describe(before, family), describe(after, family));
      std::puts(line.c_str());
      std::fflush(stdout);
    }
    std::string line = fmt::format("median of {} rounds:", rounds);
    for (std::size_t i = 0; i < concurrencies.size(); ++i) line += fmt::format(" C={} {:.1f}", concurrencies[i], median_of(tps[i]));
    const auto [low, high] = std::minmax_element(ratios.begin(), ratios.end());
    line += fmt::format(" tok/s; C={}/C={} {:.2f} (rounds {:.2f}-{:.2f})", concurrencies.back(), concurrencies.front(),
                        median_of(ratios), *low, *high);
    std::puts(line.c_str());
  });
}
