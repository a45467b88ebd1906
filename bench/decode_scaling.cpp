// infercast_decode_scaling: how a model's aggregate decode rate grows with concurrency, measured
// as `infercast run` measures it, the concurrencies alternated round after round on one loaded
// model. On a shared host one user's decode follows the DRAM read and a batch's follows the
// core clock, and each moves by tens of percent between minutes: a ratio of runs made apart
// says little. Each round measures both around its runs (the probe's DRAM read, all threads;
// the dependent-add clock on every thread), so a round whose ratio moved shows which of the two
// moved with it. The medians over rounds are printed last.
//
//   infercast_decode_scaling --model M.gguf [--rounds 5] [--concurrency 1,8] [--threads N]
//                            [--prompt 16] [--gen 64]
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/model.h"
#include "engine/run.h"
#include "probes/bandwidth.h"
#include "probes/compute.h"
#include "probes/cpu_features.h"
#include "probes/error.h"
#include "probes/stats.h"
#include "probes/thread_team.h"
#include "probes/topology.h"

namespace {

using namespace infercast;

struct HostState {
  double read_gbs = 0;
  std::vector<double> ghz;  // per thread
};

// 20 ms of dependent adds per thread: long enough to leave a frequency ramp behind, short
// beside the runs it brackets.
HostState host_state(unsigned threads) {
  HostState s;
  s.read_gbs = measure_dram_read_gbs(threads, active_level());
  s.ghz.resize(threads);
  ThreadTeam team(threads);
  team.run([&](unsigned m) { s.ghz[m] = measure_frequency_ghz(0.02); });
  return s;
}

std::string describe(const HostState& s) {
  std::string clocks;
  for (double g : s.ghz) clocks += fmt::format("{}{:.2f}", clocks.empty() ? "" : "/", g);
  return fmt::format("read {:.1f} GB/s, clock {} GHz", s.read_gbs, clocks);
}

double decode_tps(const Model& model, const RunOptions& base, int concurrency) {
  RunOptions o = base;
  o.concurrency = concurrency;
  return run_model(model, o, nullptr).decode_tps;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Aggregate decode rate per concurrency, alternated on one loaded model, with the host's read and clock"};
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
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {  // the project's one-line usage error, status 2
    std::fprintf(stderr, "infercast_decode_scaling: %s\n", e.what());
    return 2;
  }
  try {
    const Model model = Model::load(path);
    RunOptions o;
    o.threads = threads;
    o.prompt_tokens = prompt;
    o.gen_tokens = gen;
    // The first run after a load pays for first touches: one of each, dropped.
    for (int c : concurrencies) decode_tps(model, o, c);
    std::vector<std::vector<double>> tps(concurrencies.size());
    std::vector<double> ratios;
    for (int r = 0; r < rounds; ++r) {
      const HostState before = host_state(threads);
      std::string line = fmt::format("round {}:", r);
      for (std::size_t i = 0; i < concurrencies.size(); ++i) {
        tps[i].push_back(decode_tps(model, o, concurrencies[i]));
        line += fmt::format(" C={} {:.1f}", concurrencies[i], tps[i].back());
      }
      ratios.push_back(tps.back().back() / tps.front().back());
      const HostState after = host_state(threads);
      line += fmt::format(" tok/s, C={}/C={} {:.2f}; before {}; after {}", concurrencies.back(), concurrencies.front(),
                          ratios.back(), describe(before), describe(after));
      std::puts(line.c_str());
      std::fflush(stdout);
    }
    std::string line = fmt::format("median of {} rounds:", rounds);
    for (std::size_t i = 0; i < concurrencies.size(); ++i) line += fmt::format(" C={} {:.1f}", concurrencies[i], median_of(tps[i]));
    const auto [low, high] = std::minmax_element(ratios.begin(), ratios.end());
    line += fmt::format(" tok/s; C={}/C={} {:.2f} (rounds {:.2f}-{:.2f})", concurrencies.back(), concurrencies.front(),
                        median_of(ratios), *low, *high);
    std::puts(line.c_str());
  } catch (const UsageError& e) {
    std::fprintf(stderr, "infercast_decode_scaling: %s\n", e.what());
    return 2;
  }
  return 0;
}
