#include "cli/kernels_command.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string_view>

#include "cli/json_file.h"
#include "cli/progress.h"
#include "kernels/formats.h"
#include "kernels/measure.h"
#include "probes/atomic_file.h"
#include "probes/error.h"
#include "probes/topology.h"
#include "probes/units.h"

namespace infercast::cli {
namespace {

struct KernelsArgs {
  std::string profile = "profile.json";
  unsigned threads = 0;
  std::string isa;
  std::vector<std::string> formats;
  std::vector<std::size_t> batches;
  std::vector<std::string> shapes;
  bool quick = false;
  bool json = false;
  bool no_update = false;
  bool no_quality = false;
  double min_time = 0.3;
  int rounds = 1;
  std::string footprint;
  std::string layout = "best";
  bool read_now = false;
};

nlohmann::json read_profile(const std::string& path) {
  return read_json_file(path, fmt::format("run `infercast probe --out {}` first", path));
}

std::vector<IsaLevel> parse_levels(const std::string& text) {
  const IsaLevel best = active_level();
  if (text.empty() || text == "best") return {best};
  std::vector<IsaLevel> levels;
  if (text == "all") {
    for (int l = 0; l <= static_cast<int>(best); ++l) levels.push_back(static_cast<IsaLevel>(l));
    return levels;
  }
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const auto l = parse_isa_level(item);
    if (!l) throw UsageError(fmt::format("--isa '{}' is not best, all, or a list of scalar, avx2, avx512, amx", item));
    levels.push_back(*l);
  }
  return levels;
}

std::string percent(const std::optional<double>& f) { return f ? fmt::format("{:.0f}%", 100 * *f) : "n/a"; }

// The slowest and fastest round of a point, in weight GB/s.
std::string round_range(const KernelPoint& p) {
  const std::vector<double> gbs = round_weight_gbs(p);
  const auto [slowest, fastest] = std::minmax_element(gbs.begin(), gbs.end());
  return fmt::format("{:.1f}-{:.1f}", *slowest, *fastest);
}

void print_points(const std::vector<KernelPoint>& points, const Ceilings& c, const std::optional<ReadAround>& read) {
  fmt::print("infercast kernels — roofline ceilings: DRAM {:.1f} GB/s", c.dram_read_gbs);
  if (read) fmt::print(" (read now: {:.1f} before the sweep, {:.1f} after)", read->before, read->after);
  if (c.amx_int8_gops) fmt::print(", AMX INT8 {:.0f} GOPS", *c.amx_int8_gops);
  if (c.int8_vnni_gops) fmt::print(", VNNI {:.0f} GOPS", *c.int8_vnni_gops);
  if (c.int8_avx2_gops) fmt::print(", AVX2 INT8 {:.0f} GOPS", *c.int8_avx2_gops);
  if (c.fp32_gflops) fmt::print(", FP32 {:.0f} GFLOPS", *c.fp32_gflops);
  if (c.fp32_avx2_gflops) fmt::print(", FP32 AVX2 {:.0f} GFLOPS", *c.fp32_avx2_gflops);
  // The kernel column as wide as its longest name ("avx512_bf16_round" is 17 characters).
  std::size_t kernel_width = std::string_view("kernel").size();
  bool rounds = false;
  for (const auto& p : points) {
    kernel_width = std::max(kernel_width, p.kernel.size());
    rounds = rounds || p.round_seconds.size() > 1;
  }
  fmt::print("\n\n  {:<6} {:<7} {:<{}} {:>12} {:>5} {:>9} {:>9} {:>8} {:>9}{}\n", "format", "isa", "kernel", kernel_width,
             "shape", "batch", "GB/s", "GOPS", "bound", "roofline", rounds ? "   rounds GB/s" : "");
  for (const auto& p : points) {
    fmt::print("  {:<6} {:<7} {:<{}} {:>12} {:>5} {:>9.1f} {:>9.1f} {:>8} {:>9}{}\n", format_info(p.type).name,
               to_string(p.level), p.kernel, kernel_width, fmt::format("{}x{}", p.shape.rows, p.shape.cols), p.batch,
               p.weight_gbs, p.gops, p.bound, percent(p.roofline_fraction), rounds ? "   " + round_range(p) : "");
  }
}

void print_quality(const std::vector<QualityRow>& rows) {
  fmt::print("\n  accuracy (relative RMS error against F32; activations quantized as the kernels do)\n");
  fmt::print("  {:<6} {:>6} {:>14} {:>14} {:>16} {:>16}\n", "format", "bits", "weights gauss", "output gauss",
             "weights heavy", "output heavy");
  for (std::size_t i = 0; i < rows.size() / 2; ++i) {
    const QualityRow& g = rows[i];
    const QualityRow& h = rows[i + rows.size() / 2];
    fmt::print("  {:<6} {:>6.2f} {:>14.2e} {:>14.2e} {:>16.2e} {:>16.2e}\n", format_info(g.type).name,
               format_info(g.type).bits_per_weight(), g.weight_rel_rms, g.output_rel_rms, h.weight_rel_rms,
               h.output_rel_rms);
  }
}

void run(const KernelsArgs& args) {
  nlohmann::json profile = read_profile(args.profile);
  Ceilings ceilings = ceilings_from_profile(profile);
  if (!args.no_update) check_writable(args.profile);

  KernelSweepOptions o;
  o.threads = args.threads != 0 ? args.threads : host_topology().cores;
  o.levels = parse_levels(args.isa);
  if (args.formats.empty()) {
    o.formats.assign(weight_formats().begin(), weight_formats().end());
  } else {
    for (const auto& name : args.formats) {
      const auto t = parse_format(name);
      if (!t || *t == GgmlType::q8_k) {
        throw UsageError(fmt::format("--formats: '{}' is not one of {}", name, weight_format_names()));
      }
      o.formats.push_back(*t);
    }
  }
  o.batches = !args.batches.empty() ? args.batches : (args.quick ? std::vector<std::size_t>{1, 8, 64} : default_batches());
  if (!args.shapes.empty()) {
    for (const auto& s : args.shapes) o.shapes.push_back(parse_shape(s));
  } else {
    o.shapes = args.quick ? std::vector<Shape>{{4096, 4096}} : default_shapes();
  }
  if (args.min_time <= 0) throw UsageError("--min-time must be positive");
  o.min_time = args.quick ? std::min(args.min_time, 0.15) : args.min_time;
  o.rounds = args.rounds;
  if (!args.footprint.empty()) {
    const auto bytes = parse_size(args.footprint);
    if (!bytes || *bytes == 0) throw UsageError(fmt::format("--footprint '{}' is not a size such as 512MiB", args.footprint));
    o.footprint_bytes = *bytes;
  } else {
    o.footprint_bytes = footprint_from_profile(profile);
  }
  if (args.layout == "gguf") {
    o.layout = WeightLayout::gguf;
  } else if (args.layout == "interleaved") {
    o.layout = WeightLayout::interleaved8;
  } else if (args.layout != "best") {
    throw UsageError(fmt::format("--layout '{}' is not best, gguf or interleaved", args.layout));
  }
  ProgressPrinter progress;  // the sweep validates the options before any work
  const auto update = [&](const std::string& what, double f) { progress.update(what, f); };
  std::optional<ReadAround> read;
  std::vector<KernelPoint> points;
  if (args.read_now) {
    read.emplace();
    points = run_kernel_sweep_at_current_read(o, ceilings, *read, update);
  } else {
    points = run_kernel_sweep(o, ceilings, update);
  }
  std::vector<QualityRow> quality;
  if (!args.no_quality) {
    progress.update("accuracy per format", 1.0);
    quality = measure_quality(o.formats);
  }
  progress.finish();

  nlohmann::json records = nlohmann::json::array();
  for (const auto& p : points) records.push_back(to_json(p));
  nlohmann::json quality_json = nlohmann::json::array();
  for (const auto& q : quality) quality_json.push_back(to_json(q));
  if (!args.no_update) {
    profile["kernels"] = {{"schema", "infercast.kernels/1"},
                          {"measured_at", utc_timestamp()},
                          {"threads", o.threads},
                          {"rounds", o.rounds},
                          {"dram_read_gbs", ceilings.dram_read_gbs},
                          {"dram_read_measured_around", read ? nlohmann::json{read->before, read->after} : nlohmann::json(nullptr)},
                          {"records", records},
                          {"quality", quality_json}};
    write_file_atomically(args.profile, profile.dump(2) + "\n");
  }
  if (args.json) {
    fmt::print("{}\n", records.dump(2));
    return;
  }
  print_points(points, ceilings, read);
  if (!quality.empty()) print_quality(quality);
  if (!args.no_update) fmt::print("\n  kernel calibration written to {}\n", args.profile);
}

}  // namespace

void add_kernels_command(CLI::App& app, int& exit_status) {
  auto args = std::make_shared<KernelsArgs>();
  CLI::App* cmd = app.add_subcommand("kernels", "Measure quantized GEMV/GEMM per format, ISA and batch against the roofline");
  cmd->add_option("--profile", args->profile, "Profile to read ceilings from and to store the results in")->capture_default_str();
  cmd->add_option("--threads", args->threads, "Threads (default: all physical cores)");
  cmd->add_option("--isa", args->isa, "best (default), all, or a list: scalar,avx2,avx512,amx");
  cmd->add_option("--formats", args->formats, "Weight formats (default: all)")->delimiter(',');
  cmd->add_option("--batches", args->batches, "Batch sizes (default: 1,2,4,8,16,32,64)")->delimiter(',');
  cmd->add_option("--shapes", args->shapes, "ROWSxCOLS shapes (default: 4096x4096,14336x4096,4096x14336)")->delimiter(',');
  cmd->add_flag("--quick", args->quick, "One shape, batches 1, 8, 64");
  cmd->add_flag("--json", args->json, "Print the records as a JSON array instead of the table");
  cmd->add_flag("--no-update", args->no_update, "Do not write the results into the profile");
  cmd->add_flag("--no-quality", args->no_quality, "Skip the accuracy table");
  cmd->add_option("--min-time", args->min_time, "Seconds of timed passes per point")->capture_default_str();
  cmd->add_option("--rounds", args->rounds,
                  fmt::format("Passes over every format's points (1-{}); each figure is the median of its rounds, "
                              "the table gives their range", kMaxRounds))
      ->capture_default_str();
  cmd->add_option("--footprint", args->footprint, "Weight bytes cycled per point (default: twice where the profile's load latency or read reached DRAM, at most 4x LLC, at least 1GiB)");
  cmd->add_option("--layout", args->layout,
                  "Weight layout: best (each ISA level's own, as a loaded model), gguf, or interleaved")
      ->capture_default_str();
  cmd->add_flag("--read-now", args->read_now,
                "Measure the DRAM read just before and after the sweep and use their mean as the memory ceiling, not the profile's");
  cmd->callback([args, &exit_status] {
    run(*args);
    exit_status = 0;
  });
}

}  // namespace infercast::cli
