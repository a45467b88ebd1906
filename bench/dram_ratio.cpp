// infercast_dram_ratio: kernel bandwidth as a fraction of the DRAM read measured around it.
// On a shared host the read ceiling moves by tens of percent from one minute to the next, so a
// GEMV figure divided by a probe profile's read of an hour ago says little. Each round here
// measures the probe's read kernel (dram_buffer_bytes, all threads), the kernels at one shape
// and batch (weights cycled through default_footprint, as `infercast kernels` does), then the
// read again, and divides each kernel's weight GB/s by the mean of the two reads. Run two
// builds' copies of it in turn to compare them; the medians over rounds are printed last.
//
//   infercast_dram_ratio [--rounds 3] [--formats F16,Q8_0,Q4_0,Q4_K,Q6_K] [--shape 4096x14336]
//                        [--batch 1] [--threads N] [--min-time 0.3]
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/tool_main.h"
#include "kernels/formats.h"
#include "kernels/measure.h"
#include "probes/bandwidth.h"
#include "probes/cpu_features.h"
#include "probes/error.h"
#include "probes/stats.h"
#include "probes/topology.h"

namespace {

using namespace infercast;

double dram_read_gbs(unsigned threads) { return measure_dram_read_gbs(threads, active_level()); }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Kernel weight bandwidth as a fraction of the DRAM read measured around it"};
  int rounds = 3;
  std::vector<std::string> format_names{"F16", "Q8_0", "Q4_0", "Q4_K", "Q6_K"};
  std::string shape = "4096x14336";
  std::size_t batch = 1;
  unsigned threads = host_topology().cores;
  double min_time = 0.3;
  app.add_option("--rounds", rounds)->check(CLI::Range(1, 100));
  app.add_option("--formats", format_names)->delimiter(',');
  app.add_option("--shape", shape);
  app.add_option("--batch", batch)->check(CLI::Range(1, 512));
  app.add_option("--threads", threads)->check(CLI::Range(1U, host_topology().cores));
  app.add_option("--min-time", min_time)->check(CLI::Range(0.01, 10.0));
  return run_tool(app, "infercast_dram_ratio", argc, argv, [&] {
    KernelSweepOptions k;
    for (const auto& name : format_names) {
      const auto type = parse_format(name);
      if (!type) throw UsageError(fmt::format("unknown format '{}'", name));
      k.formats.push_back(*type);
    }
    k.levels = {active_level()};
    k.batches = {batch};
    k.shapes = {parse_shape(shape)};
    k.threads = threads;
    k.min_time = min_time;
    validate_sweep(k);  // before the first read (run_kernel_sweep checks again, cheaply)
    Ceilings ceilings;
    ceilings.dram_read_gbs = 1;  // unused: the ratio is taken against the reads of each round
    std::vector<std::vector<double>> ratios(k.formats.size());
    for (int r = 0; r < rounds; ++r) {
      const double before = dram_read_gbs(threads);
      const auto points = run_kernel_sweep(k, ceilings);
      const double after = dram_read_gbs(threads);
      const double read = 0.5 * (before + after);
      std::string line = fmt::format("round {} read {:.1f}/{:.1f} GB/s:", r, before, after);
      for (std::size_t f = 0; f < points.size(); ++f) {
        ratios[f].push_back(points[f].weight_gbs / read);
        line += fmt::format(" {} {} {:.1f} GB/s ({:.2f})", format_info(points[f].type).name, points[f].kernel,
                            points[f].weight_gbs, ratios[f].back());
        if (batch > 1) line += fmt::format(" {:.0f} GOPS", points[f].gops);
      }
      std::puts(line.c_str());
      std::fflush(stdout);
    }
    std::string line = fmt::format("median x read, {} rounds:", rounds);
    for (std::size_t f = 0; f < k.formats.size(); ++f)
      line += fmt::format(" {} {:.3f}", format_info(k.formats[f]).name, median_of(ratios[f]));
    std::puts(line.c_str());
  });
}
