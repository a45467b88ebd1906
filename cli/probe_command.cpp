#include "cli/probe_command.h"

#include <fmt/format.h>

#include <memory>

#include "cli/progress.h"
#include "probes/atomic_file.h"
#include "probes/error.h"
#include "probes/probe.h"
#include "probes/units.h"

namespace infercast::cli {
namespace {

struct ProbeArgs {
  bool quick = false;
  unsigned threads = 0;
  bool threads_given = false;
  std::string max_memory;
  std::string out = "profile.json";
  bool json = false;
  std::string isa;
  double min_time = 0;
  bool no_counters = false;
};

std::string cell(const nlohmann::json& v, const char* unit, int precision = 1) {
  if (v.is_null()) return "n/a";
  return fmt::format("{:.{}f} {}", v.get<double>(), precision, unit);
}

void print_table(const nlohmann::json& profile) {
  const auto& s = profile["summary"];
  const auto& t = profile["topology"];
  const auto& c = profile["cpu"];
  fmt::print("infercast probe — {} ({} isa level, {:.0f} s)\n", c["brand"].get<std::string>(),
             profile["isa_level"].get<std::string>(), profile["probe_seconds"].get<double>());
  fmt::print("  {} package(s), {} NUMA node(s), {} cores, {} threads, {} memory ({} available), THP {}\n",
             t["packages"].get<unsigned>(), t["numa_nodes"].get<unsigned>(), t["cores"].get<unsigned>(),
             t["threads"].get<unsigned>(), format_size(t["total_memory_bytes"].get<std::uint64_t>()),
             format_size(t["available_memory_bytes"].get<std::uint64_t>()),
             t["huge_pages"]["transparent"].get<std::string>());
  for (const auto& cache : t["caches"]) {
    fmt::print("  L{} {:8} {:>10}, {} B lines, x{}, shared by {} core(s)\n", cache["level"].get<int>(),
               cache["type"].get<std::string>(), format_size(cache["size_bytes"].get<std::uint64_t>()),
               cache["line_bytes"].get<unsigned>(), cache["instances"].get<unsigned>(),
               cache["cores_sharing"].get<unsigned>());
  }
  std::string features;
  for (const auto& f : c["features"]) features += f.get<std::string>() + " ";
  fmt::print("  ISA: {}\n", features);
  if (!c["amx_reason"].is_null()) fmt::print("  AMX unavailable: {}\n", c["amx_reason"].get<std::string>());

  fmt::print("\n  {:<34} {:>16}\n", "measure", "value");
  const std::pair<const char*, std::string> rows[] = {
      {"DRAM read (best threads)", cell(s["dram_read_gbs"], "GB/s")},
      {"DRAM copy", cell(s["dram_copy_gbs"], "GB/s")},
      {"DRAM triad", cell(s["dram_triad_gbs"], "GB/s")},
      {"DRAM non-temporal write", cell(s["dram_write_nt_gbs"], "GB/s")},
      {"best threads for bandwidth", s["best_threads_for_bandwidth"].is_null() ? "n/a" : std::to_string(s["best_threads_for_bandwidth"].get<unsigned>())},
      {"L1 read per core", cell(s["l1_read_gbs_per_core"], "GB/s")},
      {"L2 read per core", cell(s["l2_read_gbs_per_core"], "GB/s")},
      {"L3 read per core", cell(s["l3_read_gbs_per_core"], "GB/s")},
      {"L1 latency", cell(s["l1_latency_ns"], "ns", 2)},
      {"DRAM latency", cell(s["dram_latency_ns"], "ns")},
      {"core clock (dependent adds)", cell(s["core_ghz"], "GHz", 2)},
      {"peak FP32 FMA", cell(s["peak_fp32_gflops"], "GFLOPS")},
      {"peak FP32 FMA (AVX2, 256-bit)", cell(s["peak_fp32_avx2_gflops"], "GFLOPS")},
      {"peak BF16 dot (AVX-512)", cell(s["peak_bf16_gflops"], "GFLOPS")},
      {"peak INT8 AVX2 (vpmaddubsw)", cell(s["peak_int8_avx2_gops"], "GOPS")},
      {"peak INT8 VNNI", cell(s["peak_int8_vnni_gops"], "GOPS")},
      {"peak AMX INT8", cell(s["peak_amx_int8_gops"], "GOPS")},
      {"peak AMX BF16", cell(s["peak_amx_bf16_gflops"], "GFLOPS")},
  };
  for (const auto& [name, value] : rows) fmt::print("  {:<34} {:>16}\n", name, value);

  if (!profile["latency"]["loaded"].empty()) {
    fmt::print("\n  loaded latency (chase on core 0, other cores streaming reads)\n");
    for (const auto& l : profile["latency"]["loaded"]) {
      fmt::print("    pause {:>7.0f} ns: {:6.1f} GB/s streamed, {:6.1f} ns per load\n",
                 l["delay_ns"].get<double>(), l["stream_gbs"].get<double>(), l["latency_ns"].get<double>());
    }
  }
  for (const auto& b : profile["counters"]["backends"]) {
    if (b["available"].get<bool>()) {
      fmt::print("  counters ({}): available\n", b["backend"].get<std::string>());
    } else {
      fmt::print("  counters ({}): unavailable — {}\n", b["backend"].get<std::string>(),
                 b["reason"].get<std::string>());
    }
  }
  if (!profile["counters"]["counted_bytes"].is_null()) {
    fmt::print("  DRAM read pass: {} timed, {} counted (LLC misses x line)\n",
               format_size(static_cast<std::uint64_t>(profile["counters"]["timed_bytes"].get<double>())),
               format_size(static_cast<std::uint64_t>(profile["counters"]["counted_bytes"].get<double>())));
  }
}

void run(const ProbeArgs& args) {
  ProbeOptions options;
  options.quick = args.quick;
  if (args.threads_given && args.threads == 0) throw UsageError("--threads must be at least 1");
  options.threads = args.threads;
  if (!args.max_memory.empty()) {
    const auto bytes = parse_size(args.max_memory);
    if (!bytes || *bytes == 0) {
      throw UsageError(fmt::format("--max-memory '{}' is not a size such as 512MiB or 2GiB", args.max_memory));
    }
    options.max_memory = *bytes;
  }
  if (args.min_time < 0) throw UsageError("--min-time must be positive");
  options.min_time = args.min_time;
  if (!args.isa.empty()) {
    options.isa = parse_isa_level(args.isa);
    if (!options.isa) throw UsageError(fmt::format("--isa '{}' is not one of scalar, avx2, avx512, amx", args.isa));
  } else {
    options.isa = isa_from_environment();
  }
  options.counters = !args.no_counters;
  if (!args.out.empty()) check_writable(args.out);  // fail now, not after the run

  const Topology& topo = host_topology();
  const CpuFeatures& cpu = host_cpu();
  const ProbePlan plan = plan_probe(options, topo, cpu);
  ProgressPrinter progress;
  options.progress = [&](const std::string& what, double f) { progress.update(what, f); };
  const ProbeResults results = run_probe(plan, topo, cpu, options);
  progress.finish();

  const nlohmann::json profile = profile_json(results, topo, cpu);
  if (!args.out.empty()) write_file_atomically(args.out, profile.dump(2) + "\n");
  if (args.json) {
    fmt::print("{}\n", profile.dump(2));
  } else {
    print_table(profile);
    if (!args.out.empty()) fmt::print("\n  profile written to {}\n", args.out);
  }
}

}  // namespace

void add_probe_command(CLI::App& app, int& exit_status) {
  auto args = std::make_shared<ProbeArgs>();
  CLI::App* cmd = app.add_subcommand("probe", "Measure this machine: topology, ISA, bandwidth, latency, compute peaks");
  cmd->add_flag("--quick", args->quick, "Short run (about 15 s on 2 cores): fewer sizes and samples");
  cmd->add_option("--threads", args->threads, "Largest thread count to measure (default: all physical cores)")
      ->each([args](const std::string&) { args->threads_given = true; });
  cmd->add_option("--max-memory", args->max_memory, "Largest working set, e.g. 512MiB (default: 4x LLC, at most half the free memory)");
  cmd->add_option("--out", args->out, "Profile file to write atomically (empty: none)")->capture_default_str();
  cmd->add_flag("--json", args->json, "Print the profile as JSON on stdout instead of the table");
  cmd->add_option("--isa", args->isa, "Highest ISA level to use: scalar, avx2, avx512, amx (or INFERCAST_ISA)");
  cmd->add_option("--min-time", args->min_time, "Seconds per sample (default 0.004 quick, 0.006 full)");
  cmd->add_flag("--no-counters", args->no_counters, "Do not try hardware counters");
  cmd->callback([args, &exit_status] {
    run(*args);
    exit_status = 0;
  });
}

}  // namespace infercast::cli
