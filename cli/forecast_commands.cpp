#include "cli/forecast_commands.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>

#include "cli/json_file.h"
#include "cli/progress.h"
#include "kernels/formats.h"
#include "kernels/measure.h"
#include "model/catalog.h"
#include "model/cost.h"
#include "model/forecast.h"
#include "model/validate.h"
#include "probes/atomic_file.h"
#include "probes/error.h"
#include "probes/topology.h"
#include "probes/units.h"

namespace infercast::cli {
namespace {

std::string profile_hint(const std::string& path) {
  return fmt::format("run `infercast probe --out {0}` and `infercast calibrate --profile {0}` first", path);
}

std::optional<Calibration> calibration_in(const nlohmann::json& profile) {
  if (!profile.contains("calibration")) return std::nullopt;
  return calibration_from_json(profile.at("calibration"));
}

// --- calibrate -----------------------------------------------------------------------------

struct CalibrateArgs {
  std::string profile = "profile.json";
  unsigned threads = 0;
  double min_time = 0.25;
  std::string work_dir;
  std::string footprint;
  bool kernels_only = false;
};

Calibration run_calibration(const CalibrateArgs& a, nlohmann::json& profile) {
  const Hardware here = hardware_from_profile(profile, a.profile);
  check_writable(a.profile);
  CalibrationOptions o;
  o.threads = a.threads != 0 ? a.threads : host_topology().cores;
  if (o.threads > host_topology().cores) throw UsageError(fmt::format("--threads must be between 1 and {} (the physical cores)", host_topology().cores));
  if (!(a.min_time > 0)) throw UsageError("--min-time must be positive");
  o.min_time = a.min_time;
  if (!a.footprint.empty()) {
    const auto bytes = parse_size(a.footprint);
    if (!bytes || *bytes == 0) throw UsageError(fmt::format("--footprint '{}' is not a size such as 512MiB", a.footprint));
    o.footprint_bytes = *bytes;
  } else {
    o.footprint_bytes = footprint_from_profile(profile);
  }
  o.engine = !a.kernels_only;
  o.work_dir = a.work_dir.empty() ? std::filesystem::temp_directory_path().string() : a.work_dir;
  ProgressPrinter progress;
  Calibration c = calibrate(o, here.bandwidth_gbs, [&](const std::string& what, double f) { progress.update(what, f); });
  progress.finish();
  profile["calibration"] = to_json(c);
  write_file_atomically(a.profile, profile.dump(2) + "\n");
  return c;
}

void print_calibration(const Calibration& c) {
  fmt::print("calibration at {} threads, {} (sweep median CV {:.1f}%)\n\n", c.threads, c.measured_at, 100 * c.sweep_cv);
  fmt::print("  {:<6} {:>10} {:>10} {:>10} {:>10} {:>12}\n", "format", "GB/s b=1", "GB/s b=8", "GOPS b=256", "1 core", "kernel b=256");
  for (const auto& [type, pts] : c.curves) {
    const auto& f = format_info(type);
    const double params_per_byte = static_cast<double>(f.block_elems) / static_cast<double>(f.block_bytes);
    const double core = c.core_gbs.contains(type) ? c.core_gbs.at(type) : 0.0;
    fmt::print("  {:<6} {:>10.1f} {:>10.1f} {:>10.0f} {:>10.1f} {:>12}\n", f.name, 1e-9 / c.effective_seconds_per_byte(type, 1),
               1e-9 / c.effective_seconds_per_byte(type, 8), 2 * params_per_byte * 256 / c.effective_seconds_per_byte(type, 256) / 1e9, core, pts.back().kernel);
  }
  if (c.engine) {
    fmt::print("\n  engine overheads (fitted to the time outside matrix products in the runs below, relative RMS {:.1f}%): "
               "{:.1f} us per parallel operation, {:.3f} ns per token x layer x dimension, {}, {:.4f} ns per attention operation "
               "in prefill, {:.4f} ns per KV cache byte in decode\n"
               "  the curves' matrix time against the engine's measured matrix time in those runs: {:.1f}% RMS\n",
               100 * c.engine->residual, 1e6 * c.engine->seconds_per_call, 1e9 * c.engine->seconds_per_token_layer_dim,
               c.engine->routed_rows_fitted ? fmt::format("{:.3f} ns per MoE routed row x dimension", 1e9 * c.engine->seconds_per_routed_row_dim)
                                            : std::string("MoE routed rows not fitted (an older calibration)"),
               1e9 * c.engine->seconds_per_attention_op, 1e9 * c.engine->seconds_per_decode_kv_byte, 100 * c.matrix_residual);
    // The engine's matrix time over the curves', per run: which runs the sweep stood for badly.
    const auto over_curves = [](double measured, double curve) { return curve > 0 ? fmt::format("{:.2f}x", measured / curve) : "-"; };
    for (const auto& r : c.runs) {
      fmt::print("    fitted on: {} {} C={} prompt {} gen {}: prefill {:.3f} s/sequence ({:.0f}% in matrices, {} the curves), "
                 "decode {:.1f} ms/step ({:.0f}% in matrices, {} the curves)\n",
                 r.model, r.quant, r.concurrency, r.prompt, r.gen, r.prefill_seconds_per_sequence,
                 100 * r.prefill_gemm_seconds_per_sequence / r.prefill_seconds_per_sequence,
                 over_curves(r.prefill_gemm_seconds_per_sequence, r.prefill_curve_seconds_per_sequence), 1e3 * r.decode_seconds_per_step,
                 100 * r.decode_gemm_seconds_per_step / r.decode_seconds_per_step,
                 over_curves(r.decode_gemm_seconds_per_step, r.decode_curve_seconds_per_step));
    }
  }
}

// --- predict -------------------------------------------------------------------------------

struct PredictArgs {
  std::string model;
  std::vector<std::string> quants;
  std::vector<int> users{1, 4, 16};
  int prompt = 512;
  int gen = 256;
  std::string hardware;
  std::string profile = "profile.json";
  int devices = 0;  // 0: the fewest that hold the model (GPUs), 1 for CPUs
  double target = 0;
  std::vector<std::string> compare;
  std::optional<double> price_usd;
  std::optional<double> hourly_usd;
  double years = 3;
  double kwh = 0.15;
  bool json = false;
};

struct Machine {
  Hardware hardware;
  std::optional<Calibration> calibration;  // measured here
};

// The calibrated machines a described one may learn from, this one's first (when calibrated).
std::vector<Reference> references(const std::optional<Reference>& local, const std::string& profile_path) {
  std::vector<Reference> out;
  if (local) {
    out.push_back(*local);
  } else if (std::filesystem::exists(profile_path)) {
    const nlohmann::json p = read_json_file(profile_path, "");
    if (auto c = calibration_in(p)) out.push_back({hardware_from_profile(p, profile_path), *c, "this machine's profile"});
  }
  for (auto& r : shipped_references()) out.push_back(std::move(r));
  return out;
}

Machine resolve_hardware(const PredictArgs& a) {
  if (a.hardware.empty()) {
    const nlohmann::json p = read_json_file(a.profile, profile_hint(a.profile) + ", or name a machine with --hardware");
    auto c = calibration_in(p);
    if (!c) throw UsageError(fmt::format("{} has no calibration: run `infercast calibrate --profile {}` first", a.profile, a.profile));
    return {hardware_from_profile(p, a.profile), c};
  }
  if (auto h = find_catalog_hardware(a.hardware)) return {*h, std::nullopt};
  if (!std::filesystem::exists(a.hardware)) {
    throw UsageError(fmt::format("--hardware '{}' is neither a file nor a catalog machine ({})", a.hardware, catalog_hardware_names()));
  }
  const nlohmann::json j = read_json_file(a.hardware, "");
  if (j.is_object() && j.contains("summary")) {
    auto c = calibration_in(j);
    if (!c) throw UsageError(fmt::format("{} has no calibration: run `infercast calibrate --profile {}` first", a.hardware, a.hardware));
    return {hardware_from_profile(j, a.hardware), c};
  }
  return {hardware_from_json(j, a.hardware), std::nullopt};
}

struct ModelInput {
  Architecture arch;
  std::optional<GgufFile> file;
};

ModelInput resolve_model(const std::string& name) {
  if (auto a = find_catalog_model(name)) return {*a, std::nullopt};
  if (!std::filesystem::exists(name)) {
    throw UsageError(fmt::format("--model '{}' is neither a file nor a catalog model ({})", name, catalog_model_names()));
  }
  if (name.ends_with(".json")) return {architecture_from_json(read_json_file(name, ""), name), std::nullopt};
  GgufFile f = GgufFile::open(name);
  Architecture arch = architecture_from_gguf(f, std::filesystem::path(name).stem().string());
  return {arch, std::move(f)};
}

std::unique_ptr<Performance> performance_for(const Machine& m, const std::vector<Reference>& refs, int devices) {
  if (m.calibration) return measured_performance(*m.calibration);
  return described_performance(m.hardware, reference_for(m.hardware, refs), devices);
}

CostInputs cost_inputs(const Hardware& h, const PredictArgs& a, int devices, bool primary) {
  CostInputs c;
  c.years = a.years;
  c.usd_per_kwh = a.kwh;
  c.power_w = h.power_w * devices;
  if (primary && a.hourly_usd) {
    c.hourly_usd = *a.hourly_usd;
  } else if (primary && a.price_usd) {
    c.purchase_usd = *a.price_usd;
  } else if (h.hourly_usd) {
    c.hourly_usd = *h.hourly_usd * devices;
  } else if (h.purchase_usd) {
    c.purchase_usd = *h.purchase_usd * devices;
  }
  return c;
}

std::string money(const std::optional<double>& v) { return v ? fmt::format("${:.3g}", *v) : "n/a"; }

void print_comparison(const Forecast& mine, const Forecast& other, const CostComparison& c) {
  fmt::print("  against {} ({}):\n  {:>5} {:>13} {:>13} {:>13} {:>13} {:>9}\n", other.hardware, other.basis, "users", "this tok/s",
             "other tok/s", "this $/Mtok", "other $/Mtok", "benefit");
  for (const auto& r : c.rows) {
    fmt::print("  {:>5} {:>13.1f} {:>13.1f} {:>13} {:>13} {:>9}\n", r.users, r.this_tps, r.other_tps, money(r.this_usd_per_mtok),
               money(r.other_usd_per_mtok), r.benefit_ratio ? fmt::format("{:.2f}", *r.benefit_ratio) : "n/a");
  }
  if (!c.rows.empty() && !c.rows.front().this_usd_per_mtok) {
    fmt::print("  (no price for {}: give --price-usd or --hourly-usd for cost figures)\n", mine.hardware);
  }
  if (c.other_cheaper_from_users) {
    const int n = *c.other_cheaper_from_users;
    fmt::print("  {} is cheaper per token from {} user{} on\n", other.hardware, n, n == 1 ? "" : "s");
  }
}

nlohmann::json to_json(const Forecast& f, const std::optional<double>& accuracy) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : f.rows) {
    rows.push_back({{"users", r.users}, {"decode_tps_per_user", r.decode_tps_per_user}, {"decode_tps", r.decode_tps},
                    {"decode_tps_per_user_low", r.decode_low}, {"decode_tps_per_user_high", r.decode_high},
                    {"prefill_tps", r.prefill_tps}, {"prefill_tps_low", r.prefill_low}, {"prefill_tps_high", r.prefill_high},
                    {"ttft_ms", 1e3 * r.ttft_seconds}, {"step_bytes", r.step_bytes}, {"bandwidth_share", r.bandwidth_share},
                    {"bottleneck", r.bottleneck}, {"decode_step_matrix_seconds", r.decode_matrix_seconds},
                    {"decode_step_other_seconds", r.decode_other_seconds}, {"decode_step_launch_seconds", r.decode_launch_seconds},
                    {"decode_step_overhead_seconds", r.decode_overhead_seconds},
                    {"memory", {{"weights_bytes", r.memory.weights}, {"kv_cache_bytes", r.memory.kv_cache},
                                {"activation_bytes", r.memory.activations}, {"needed_bytes", r.memory.needed},
                                {"available_bytes", r.memory.available}, {"headroom_bytes", r.memory.headroom()},
                                {"fits", r.memory.fits()}}}});
  }
  nlohmann::json j = {{"model", f.model}, {"quant", f.quant}, {"hardware", f.hardware}, {"devices", f.devices}, {"basis", f.basis},
                      {"parameters", f.parameters}, {"active_parameters", f.active_parameters}, {"weight_bytes", f.weight_bytes},
                      {"bits_per_weight", f.bits_per_weight}, {"relative_band", f.band}, {"rows", rows}};
  if (accuracy) j["output_rel_rms_error"] = *accuracy;
  if (f.max_users_meeting_target) j["max_users_meeting_target"] = *f.max_users_meeting_target;
  return j;
}

nlohmann::json to_json(const std::vector<WeightInventory::StandIn>& stand_ins) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& s : stand_ins) {
    j.push_back({{"format", ggml_type_geometry(s.type)->name}, {"measured_as", format_info(s.measured_as).name},
                 {"parameter_share", s.parameter_share}});
  }
  return j;
}

// One line per type forecast as another format: one without kernels here (its speed and
// accuracy are the other's), or one the calibration behind the forecast did not measure (its
// speed is). The reader should know how much of the model that covers.
void print_stand_ins(const std::vector<WeightInventory::StandIn>& stand_ins) {
  for (const auto& s : stand_ins) {
    if (is_known_type(static_cast<std::uint32_t>(s.type))) {
      fmt::print("  {} ({:.1f}% of the matrix weights) was not measured by this calibration: forecast with {}'s measured speed per "
                 "byte (run `infercast calibrate` to measure it)\n",
                 format_info(s.type).name, 100 * s.parameter_share, format_info(s.measured_as).name);
      continue;
    }
    fmt::print("  {} ({:.1f}% of the matrix weights) has no kernels here: forecast with {}'s measured speed per byte and accuracy\n",
               ggml_type_geometry(s.type)->name, 100 * s.parameter_share, format_info(s.measured_as).name);
  }
}

// The formats of a model's matrices whose curves name kernels this build no longer picks: the
// forecast for them is the old kernels' speed, which the reader should know.
std::vector<StaleCurve> stale_curves_of(const Calibration& c, const WeightInventory& inv) {
  std::vector<GgmlType> formats;
  for (const auto& m : inv.matrices) {
    if (std::find(formats.begin(), formats.end(), m.kernel_type()) == formats.end()) formats.push_back(m.kernel_type());
  }
  return stale_curves(c, formats);
}

nlohmann::json to_json(const std::vector<StaleCurve>& stale) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& s : stale) j.push_back({{"format", format_info(s.type).name}, {"measured_kernels", s.measured}, {"current_kernels", s.current}});
  return j;
}

void print_stale_curves(const std::vector<StaleCurve>& stale) {
  for (const auto& s : stale) {
    fmt::print("  {} was calibrated on {}; this build runs {} at the same batches and ISA level ({}): its forecast is the "
               "old kernels' speed (run `infercast calibrate` again)\n",
               format_info(s.type).name, fmt::join(s.measured, ", "), fmt::join(s.current, ", "), to_string(active_level()));
  }
}

void print_forecast(const Forecast& f, const std::optional<double>& accuracy, double target) {
  fmt::print("\n{} {}: {} parameters ({} active), {} of weights, {:.2f} bits/weight{}\n", f.model, f.quant, format_count(f.parameters),
             format_count(f.active_parameters), format_size(static_cast<std::uint64_t>(f.weight_bytes)), f.bits_per_weight,
             accuracy ? fmt::format(", output error {:.2e} (relative RMS against F32)", *accuracy) : "");
  fmt::print("  on {}\n  {}\n", f.hardware, f.basis);
  fmt::print("  {:>5} {:>11} {:>19} {:>11} {:>10} {:>9} {:>10} {:>10} {:>9} {:>10}\n", "users", "tok/s/user",
             "band",
             "aggregate", "prefill/s", "TTFT", "memory", "available", "fits", "bound");
  for (const auto& r : f.rows) {
    fmt::print("  {:>5} {:>11.2f} {:>19} {:>11.1f} {:>10.1f} {:>9} {:>10} {:>10} {:>9} {:>10}\n", r.users, r.decode_tps_per_user,
               fmt::format("{:.2f}-{:.2f}", r.decode_low, r.decode_high), r.decode_tps, r.prefill_tps,
               r.ttft_seconds >= 1 ? fmt::format("{:.2f} s", r.ttft_seconds) : fmt::format("{:.0f} ms", 1e3 * r.ttft_seconds),
               format_size(static_cast<std::uint64_t>(r.memory.needed)), format_size(static_cast<std::uint64_t>(r.memory.available)),
               r.memory.fits() ? "yes" : "NO", r.bottleneck);
  }
  if (f.max_users_meeting_target) {
    fmt::print("  largest concurrency meeting {:.1f} tok/s per user: {}\n", target, *f.max_users_meeting_target);
  }
}

void predict(const PredictArgs& a) {
  if (a.users.empty()) throw UsageError("--users needs at least one value");
  if (a.devices < 0) throw UsageError("--devices must be positive");
  const ModelInput input = resolve_model(a.model);
  if (input.file && !a.quants.empty()) throw UsageError("--quant does not apply to a GGUF file: its tensors carry their own types");
  const Machine machine = resolve_hardware(a);
  // Described machines learn from a calibrated one of their kind: this one first.
  const std::vector<Reference> refs =
      references(machine.calibration ? std::optional<Reference>(Reference{machine.hardware, *machine.calibration, "this machine's profile"})
                                     : std::nullopt,
                 a.profile);
  Workload load;
  load.users = a.users;
  load.prompt = a.prompt;
  load.gen = a.gen;
  load.target_tps_per_user = a.target;
  if (a.target < 0) throw UsageError("--target must not be negative");

  std::vector<std::pair<std::string, WeightInventory>> variants;
  if (input.file) {
    variants.emplace_back("as stored", weight_inventory(*input.file, input.arch));
  } else {
    for (const auto& q : a.quants.empty() ? std::vector<std::string>{"Q4_K_M"} : a.quants) {
      variants.emplace_back(q, weight_inventory(input.arch, parse_quantization(q)));
    }
  }
  std::vector<std::string> compare = a.compare;
  if (compare.empty() && machine.hardware.kind == DeviceKind::cpu) compare = {"h100-sxm"};
  if (compare.size() == 1 && compare[0] == "none") compare.clear();

  nlohmann::json out = nlohmann::json::array();
  for (const auto& [quant, inv] : variants) {
    const int devices = a.devices > 0 ? a.devices : fewest_devices_holding(input.arch, inv, machine.hardware, load);
    const auto perf = performance_for(machine, refs, devices);
    const Forecast f = forecast(input.arch, inv, quant, machine.hardware, *perf, load, devices);
    const double accuracy = output_error(inv);
    const auto stand_ins = inv.stand_ins([&](GgmlType t) { return perf->measured_as(t); });
    nlohmann::json j = to_json(f, accuracy);
    j["stand_in_formats"] = to_json(stand_ins);
    const std::vector<StaleCurve> stale = machine.calibration ? stale_curves_of(*machine.calibration, inv) : std::vector<StaleCurve>{};
    j["stale_curves"] = to_json(stale);
    if (!a.json) {
      print_forecast(f, accuracy, a.target);
      print_stand_ins(stand_ins);
      print_stale_curves(stale);
    }
    const CostInputs own_cost = cost_inputs(machine.hardware, a, devices, true);
    nlohmann::json comparisons = nlohmann::json::array();
    for (const auto& name : compare) {
      const auto gpu = find_catalog_hardware(name);
      if (!gpu) throw UsageError(fmt::format("--compare '{}' is not a catalog machine ({})", name, catalog_hardware_names()));
      const int gd = fewest_devices_holding(input.arch, inv, *gpu, load);
      const auto gperf = described_performance(*gpu, reference_for(*gpu, refs), gd);
      const Forecast g = forecast(input.arch, inv, quant, *gpu, *gperf, load, gd);
      const CostComparison cc = compare_costs(f, own_cost, g, cost_inputs(*gpu, a, gd, false));
      const auto maybe = [](const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(); };
      nlohmann::json rows = nlohmann::json::array();
      for (const auto& r : cc.rows) {
        rows.push_back({{"users", r.users}, {"this_decode_tps", r.this_tps}, {"other_decode_tps", r.other_tps},
                        {"this_usd_per_mtok", maybe(r.this_usd_per_mtok)}, {"other_usd_per_mtok", maybe(r.other_usd_per_mtok)},
                        {"benefit_ratio", maybe(r.benefit_ratio)}, {"other_fits", r.other_fits}});
      }
      comparisons.push_back({{"hardware", g.hardware}, {"devices", gd}, {"basis", g.basis}, {"rows", rows},
                             {"other_cheaper_from_users", cc.other_cheaper_from_users ? nlohmann::json(*cc.other_cheaper_from_users) : nlohmann::json()}});
      if (!a.json) print_comparison(f, g, cc);
    }
    j["comparisons"] = comparisons;
    out.push_back(j);
  }
  if (a.json) fmt::print("{}\n", out.dump(2));
}

// --- validate ------------------------------------------------------------------------------

struct ValidateArgs {
  std::string profile = "profile.json";
  std::string work_dir;
  bool keep = false;
  bool recalibrate = false;
  std::vector<std::string> quants;
  std::vector<int> concurrencies;
  std::vector<std::string> models;
  // The library's defaults, stated once there.
  int prompt = ValidateOptions{}.prompt;
  int gen = ValidateOptions{}.gen;
  int repeats = ValidateOptions{}.repeats;
  bool no_refresh = false;
  double settled_read = ValidateOptions{}.settled_read;
  int unsettled_retries = ValidateOptions{}.unsettled_retries;
  bool json = false;
};

void validate(const ValidateArgs& a) {
  nlohmann::json profile = read_json_file(a.profile, profile_hint(a.profile));
  std::optional<Calibration> c = a.recalibrate ? std::nullopt : calibration_in(profile);
  ValidateOptions o;
  if (!a.quants.empty()) o.quants = a.quants;
  if (!a.concurrencies.empty()) o.concurrencies = a.concurrencies;
  if (!a.models.empty()) o.models = validation_models_named(a.models);
  o.prompt = a.prompt;
  o.gen = a.gen;
  o.repeats = a.repeats;
  o.refresh_kernels = !a.no_refresh;
  o.settled_read = a.settled_read;
  o.unsettled_retries = a.unsettled_retries;
  o.keep_models = a.keep;
  o.work_dir = a.work_dir.empty() ? (std::filesystem::temp_directory_path() / "infercast-validate").string() : a.work_dir;
  check_options(o);
  if (!c) {
    CalibrateArgs ca;
    ca.profile = a.profile;
    ca.work_dir = o.work_dir;
    if (!a.json) fmt::print("calibrating first (the forecast is fitted on these runs only)\n");
    c = run_calibration(ca, profile);
  }
  o.threads = c->threads;
  check_held_out(o, *c);
  ProgressPrinter progress;
  const ValidationReport r = validate_forecast(o, *c, [&](const std::string& what, double f) { progress.update(what, f); });
  progress.finish();
  if (a.json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& v : r.rows) {
      rows.push_back({{"model", v.model}, {"quant", v.quant}, {"concurrency", v.concurrency}, {"runs", v.runs},
                      {"decode_pass", v.decode_pass}, {"prefill_pass", v.prefill_pass},
                      {"decode_pass_errors", v.decode_pass_errors}, {"prefill_pass_errors", v.prefill_pass_errors},
                      {"predicted_decode_tps", v.predicted_decode_tps}, {"measured_decode_tps", v.measured_decode_tps},
                      {"decode_error", v.decode_error()}, {"decode_band", {v.decode_low, v.decode_high}}, {"decode_in_band", v.decode_in_band()},
                      {"predicted_prefill_tps", v.predicted_prefill_tps}, {"measured_prefill_tps", v.measured_prefill_tps},
                      {"prefill_error", v.prefill_error()}, {"prefill_band", {v.prefill_low, v.prefill_high}},
                      {"prefill_in_band", v.prefill_in_band()},
                      {"read_gbs", v.read_gbs}, {"read_before_gbs", v.read_before_gbs}, {"read_after_gbs", v.read_after_gbs},
                      {"reruns", v.reruns}, {"curve_read_gbs", v.curve_read_gbs},
                      {"predicted_decode_tps_at_run_read", v.predicted_decode_tps_at_run_read},
                      {"decode_error_at_run_read", v.decode_error_at_run_read()},
                      {"predicted_prefill_tps_at_run_read", v.predicted_prefill_tps_at_run_read},
                      {"decode_step_weight_bytes", {{"predicted", v.predicted_step_weight_bytes}, {"measured", v.measured_step_weight_bytes}}},
                      {"decode_step_seconds", {{"predicted_matrix", v.predicted_step_matrix_seconds},
                                               {"measured_matrix", v.measured_step_matrix_seconds},
                                               {"predicted_other", v.predicted_step_other_seconds},
                                               {"measured_other", v.measured_step_other_seconds}}},
                      {"prefill_prompt_seconds", {{"predicted_matrix", v.predicted_prompt_matrix_seconds},
                                                  {"measured_matrix", v.measured_prompt_matrix_seconds},
                                                  {"predicted_other", v.predicted_prompt_other_seconds},
                                                  {"measured_other", v.measured_prompt_other_seconds}}}});
    }
    nlohmann::json fitted = nlohmann::json::array();
    for (const auto& run : c->runs) fitted.push_back({{"model", run.model}, {"quant", run.quant}, {"concurrency", run.concurrency}, {"prompt", run.prompt}});
    fmt::print("{}\n", nlohmann::json{{"fitted_on", fitted}, {"rows", rows}, {"worst_decode_error", r.worst_decode_error},
                                      {"worst_prefill_error", r.worst_prefill_error},
                                      {"worst_decode_error_at_run_read", r.worst_decode_error_at_run_read}}.dump(2));
    return;
  }
  print_calibration(*c);
  fmt::print("\nheld out (never fitted on): models {}, formats {}, concurrencies {}, prompt {} gen {}; each row its pass of median error among {} passes over all of them{}\n\n",
             fmt::join([&] { std::vector<std::string> n; for (const auto& m : o.models) n.push_back(m.name); return n; }(), ", "),
             fmt::join(o.quants, ", "), fmt::join(o.concurrencies, ", "), o.prompt, o.gen, o.repeats,
             o.refresh_kernels ? ", in each pass a format's kernel curves measured again just before its models run" : "");
  // The passes' errors as a range in whole percent: how much the median pass stands for.
  const auto range = [](const std::vector<double>& errors) {
    const auto [lo, hi] = std::minmax_element(errors.begin(), errors.end());
    return lo == errors.end() ? std::string("-") : fmt::format("{:+.0f}..{:+.0f}", 100 * *lo, 100 * *hi);
  };
  fmt::print("  {:<15} {:<7} {:>2} {:>10} {:>10} {:>7} {:>9} {:>5} {:>11} {:>11} {:>7} {:>9} {:>5}\n", "model", "format", "C", "decode fc",
             "measured", "error", "passes", "band", "prefill fc", "measured", "error", "passes", "band");
  for (const auto& v : r.rows) {
    fmt::print("  {:<15} {:<7} {:>2} {:>10.2f} {:>10.2f} {:>+6.1f}% {:>9} {:>5} {:>11.1f} {:>11.1f} {:>+6.1f}% {:>9} {:>5}\n", v.model,
               v.quant, v.concurrency, v.predicted_decode_tps, v.measured_decode_tps, 100 * v.decode_error(), range(v.decode_pass_errors),
               v.decode_in_band() ? "in" : "OUT", v.predicted_prefill_tps, v.measured_prefill_tps, 100 * v.prefill_error(),
               range(v.prefill_pass_errors), v.prefill_in_band() ? "in" : "OUT");
  }
  fmt::print("\nthe DRAM read its kernel curves stand for (the forecast above), the read before and after each decode row's run\n"
             "(runs repeated when they differed by more than {:.0f}%: {}), and the forecast and its error at the run's read instead\n",
             100 * o.settled_read, o.unsettled_retries > 0 ? fmt::format("at most {} times", o.unsettled_retries) : std::string("off"));
  fmt::print("  {:<15} {:<7} {:>2} {:>11} {:>15} {:>7} {:>10} {:>7}\n", "model", "format", "C", "curves GB/s", "run GB/s", "reruns",
             "decode fc", "error");
  for (const auto& v : r.rows) {
    fmt::print("  {:<15} {:<7} {:>2} {:>11.1f} {:>7.1f}/{:<7.1f} {:>7} {:>10.2f} {:>+6.1f}%\n", v.model, v.quant, v.concurrency,
               v.curve_read_gbs, v.read_before_gbs, v.read_after_gbs, v.reruns, v.predicted_decode_tps_at_run_read,
               100 * v.decode_error_at_run_read());
  }
  const auto print_split = [&](const char* title, double ValidationRow::*pm, double ValidationRow::*mm, double ValidationRow::*po,
                                double ValidationRow::*mo) {
    fmt::print("\n{}, forecast / measured (ms): the weight products and the rest\n", title);
    fmt::print("  {:<15} {:<7} {:>2} {:>19} {:>7} {:>17} {:>7}\n", "model", "format", "C", "products", "error", "rest", "error");
    for (const auto& v : r.rows) {
      const auto error = [](double predicted, double measured) { return measured > 0 ? 100 * (predicted / measured - 1) : 0.0; };
      fmt::print("  {:<15} {:<7} {:>2} {:>9.2f} / {:<7.2f} {:>+6.1f}% {:>8.2f} / {:<6.2f} {:>+6.1f}%\n", v.model, v.quant, v.concurrency,
                 1e3 * v.*pm, 1e3 * v.*mm, error(v.*pm, v.*mm), 1e3 * v.*po, 1e3 * v.*mo, error(v.*po, v.*mo));
    }
  };
  print_split("one decode step", &ValidationRow::predicted_step_matrix_seconds, &ValidationRow::measured_step_matrix_seconds,
              &ValidationRow::predicted_step_other_seconds, &ValidationRow::measured_step_other_seconds);
  print_split("one prompt's prefill", &ValidationRow::predicted_prompt_matrix_seconds, &ValidationRow::measured_prompt_matrix_seconds,
              &ValidationRow::predicted_prompt_other_seconds, &ValidationRow::measured_prompt_other_seconds);
  fmt::print("\nweight bytes one decode step reads, forecast / measured (MiB; MoE: the forecast spreads routing evenly)\n");
  for (const auto& v : r.rows) {
    fmt::print("  {:<15} {:<7} {:>2} {:>9.1f} / {:<9.1f}\n", v.model, v.quant, v.concurrency, v.predicted_step_weight_bytes / 1048576.0,
               v.measured_step_weight_bytes / 1048576.0);
  }
  fmt::print("\nworst decode error {:.1f}% (at each run's own read: {:.1f}%), worst prefill error {:.1f}%\n", 100 * r.worst_decode_error,
             100 * r.worst_decode_error_at_run_read, 100 * r.worst_prefill_error);
}

}  // namespace

void add_calibrate_command(CLI::App& app, int& exit_status) {
  auto a = std::make_shared<CalibrateArgs>();
  CLI::App* cmd = app.add_subcommand("calibrate", "Measure what the forecast needs: kernel curves per format and the engine's overheads");
  cmd->add_option("--profile", a->profile, "Probe profile to read and to store the calibration in")->capture_default_str();
  cmd->add_option("--threads", a->threads, "Threads (default: all physical cores)");
  cmd->add_option("--min-time", a->min_time, "Seconds of timed passes per kernel point")->capture_default_str();
  cmd->add_option("--work-dir", a->work_dir, "Where the calibration model is written (default: the temp directory)");
  cmd->add_option("--footprint", a->footprint,
                  "Weight bytes cycled per kernel point (default: twice where the profile's load latency or read reached DRAM, at most 4x LLC, "
                  "at least 1GiB; validate reuses it)");
  cmd->add_flag("--kernels-only", a->kernels_only, "Skip the engine runs (described-machine forecasts only)");
  cmd->callback([a, &exit_status] {
    nlohmann::json profile = read_json_file(a->profile, fmt::format("run `infercast probe --out {}` first", a->profile));
    print_calibration(run_calibration(*a, profile));
    fmt::print("\n  calibration written to {}\n", a->profile);
    exit_status = 0;
  });
}

void add_predict_command(CLI::App& app, int& exit_status) {
  auto a = std::make_shared<PredictArgs>();
  CLI::App* cmd = app.add_subcommand("predict", "Forecast decode/prefill speed, memory fit and cost of a model on a machine");
  cmd->add_option("--model", a->model, fmt::format("Catalog model ({}), a GGUF file or a model JSON file", catalog_model_names()))->required();
  cmd->add_option("--quant", a->quants, "Formats or recipes, side by side (default Q4_K_M)")->delimiter(',');
  cmd->add_option("--users", a->users, "Concurrent users")->delimiter(',')->capture_default_str();
  cmd->add_option("--prompt", a->prompt, "Prompt tokens")->capture_default_str();
  cmd->add_option("--gen", a->gen, "Generated tokens")->capture_default_str();
  cmd->add_option("--hardware", a->hardware, "A probe profile, a catalog machine or a hardware JSON file (default: --profile)");
  cmd->add_option("--profile", a->profile, "This machine's calibrated profile")->capture_default_str();
  cmd->add_option("--devices", a->devices, "Devices working together (default: 1 CPU, or the fewest GPUs that hold the model)");
  cmd->add_option("--target", a->target, "Per-user decode tokens/s to meet: reports the largest concurrency that does");
  cmd->add_option("--compare", a->compare, "Catalog machines to compare with (default h100-sxm for a CPU; 'none' for none)")->delimiter(',');
  cmd->add_option("--price-usd", a->price_usd, "Purchase price of the forecast machine, amortized");
  cmd->add_option("--hourly-usd", a->hourly_usd, "Hourly price of the forecast machine");
  cmd->add_option("--years", a->years, "Amortization years")->capture_default_str();
  cmd->add_option("--kwh-usd", a->kwh, "Electricity price per kWh")->capture_default_str();
  cmd->add_flag("--json", a->json, "Print JSON");
  cmd->callback([a, &exit_status] {
    predict(*a);
    exit_status = 0;
  });
}

void add_cost_command(CLI::App& app, int& exit_status) {
  struct CostArgs {
    double gpu_tps = 0, cpu_tps = 0, gpu_cost = 0, cpu_cost = 0;
    bool json = false;
  };
  auto a = std::make_shared<CostArgs>();
  CLI::App* cmd = app.add_subcommand("cost", "Cost-benefit of a GPU over a CPU from your own measurements");
  cmd->add_option("--gpu-tps", a->gpu_tps, "GPU throughput, tokens/s")->required();
  cmd->add_option("--cpu-tps", a->cpu_tps, "CPU throughput, tokens/s")->required();
  cmd->add_option("--gpu-cost", a->gpu_cost, "GPU system cost")->required();
  cmd->add_option("--cpu-cost", a->cpu_cost, "CPU system cost")->required();
  cmd->add_flag("--json", a->json, "Print JSON");
  cmd->callback([a, &exit_status] {
    const double ratio = benefit_ratio(a->gpu_tps, a->cpu_tps, a->gpu_cost, a->cpu_cost);
    if (a->json) {
      fmt::print("{}\n", nlohmann::json{{"benefit_ratio", ratio}, {"throughput_ratio", a->gpu_tps / a->cpu_tps},
                                        {"cost_ratio", a->gpu_cost / a->cpu_cost}}.dump(2));
    } else {
      fmt::print("throughput ratio {:.2f} / cost ratio {:.2f} = cost-benefit {:.1f}: the GPU gives {:.1f}x the tokens per dollar\n",
                 a->gpu_tps / a->cpu_tps, a->gpu_cost / a->cpu_cost, ratio, ratio);
    }
    exit_status = 0;
  });
}

void add_validate_command(CLI::App& app, int& exit_status) {
  auto a = std::make_shared<ValidateArgs>();
  CLI::App* cmd = app.add_subcommand("validate", "Run generated models with the engine and set the forecast beside the measurement");
  cmd->add_option("--profile", a->profile, "Calibrated probe profile (calibrated first if it is not)")->capture_default_str();
  cmd->add_option("--work-dir", a->work_dir, "Where the generated models go");
  cmd->add_flag("--keep-models", a->keep, "Keep the generated models in --work-dir and reuse them next time");
  cmd->add_flag("--recalibrate", a->recalibrate, "Calibrate again before validating");
  cmd->add_option("--quant", a->quants, "Formats (default Q8_0,Q4_0,Q4_K_M)")->delimiter(',');
  cmd->add_option("--concurrency", a->concurrencies, "Concurrencies (default 1,2,4)")->delimiter(',');
  cmd->add_option("--models", a->models,
                  "Generated models (default validate-0.85b,tinyllama-1.1b,validate-1.5b; also moe-mini, validate-moe-fine)")
      ->delimiter(',');
  cmd->add_option("--prompt", a->prompt, "Prompt tokens per sequence")->capture_default_str();
  cmd->add_option("--gen", a->gen, "Generated tokens per sequence")->capture_default_str();
  cmd->add_option("--repeats", a->repeats, "Passes over every model, format and concurrency; each row reports its pass of median error")->capture_default_str();
  cmd->add_flag("--no-refresh", a->no_refresh, "Do not measure a format's kernel curves again before its models run in each pass");
  cmd->add_option("--settled-read", a->settled_read,
                  "Run again a run whose DRAM reads before and after differ by more than this fraction of their mean")
      ->capture_default_str();
  cmd->add_option("--unsettled-retries", a->unsettled_retries, "At most this many runs again per run (0-5)")->capture_default_str();
  cmd->add_flag("--json", a->json, "Print JSON");
  cmd->callback([a, &exit_status] {
    validate(*a);
    exit_status = 0;
  });
}

}  // namespace infercast::cli
