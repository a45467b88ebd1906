#include "model/validate.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <system_error>
#include <tuple>
#include <vector>

#include "engine/gguf.h"
#include "engine/model.h"
#include "engine/run.h"
#include "model/forecast.h"
#include "probes/bandwidth.h"
#include "probes/cpu_features.h"
#include "probes/error.h"
#include "probes/topology.h"
#include "probes/units.h"

namespace infercast {

std::vector<ValidationModel> validation_models() {
  // Three sizes at least four times a 105 MB last-level cache even in Q4_0, so every decode
  // step streams from DRAM (a model the cache partly holds runs faster than any DRAM roofline),
  // and small enough to generate and run in minutes on a small machine.
  return {{"validate-0.85b", llama_shape(16, 2048, 5632, 16, 4, 32000, 2048)},
          {"tinyllama-1.1b", find_preset("tinyllama-1.1b")->shape},
          {"validate-1.5b", llama_shape(20, 2560, 6912, 20, 4, 32000, 2048)}};
}

std::vector<ValidationModel> moe_validation_models() {
  // Both hold 650 MiB and more even in Q4_0, beyond the last-level cache: the experts a step
  // reads change from step to step, so what it finds in cache follows the whole model's size.
  ModelShape mixtral_like = find_preset("moe-mini")->shape;
  ModelShape fine = llama_shape(16, 1024, 384, 16, 4, 32000, 4096);
  fine.experts = 64;
  fine.active_experts = 8;
  return {{"moe-mini", mixtral_like}, {"validate-moe-fine", fine}};
}

std::vector<ValidationModel> validation_models_named(const std::vector<std::string>& names) {
  std::vector<ValidationModel> known = validation_models();
  for (auto& m : moe_validation_models()) known.push_back(std::move(m));
  std::vector<ValidationModel> chosen;
  for (const auto& name : names) {
    const auto it = std::find_if(known.begin(), known.end(), [&](const ValidationModel& m) { return m.name == name; });
    if (it == known.end()) {
      std::vector<std::string> all;
      for (const auto& m : known) all.push_back(m.name);
      throw UsageError(fmt::format("--models: unknown validation model '{}' (choose from {})", name, fmt::join(all, ", ")));
    }
    chosen.push_back(*it);
  }
  return chosen;
}

void check_options(const ValidateOptions& o) {
  if (o.models.empty() || o.quants.empty() || o.concurrencies.empty()) throw UsageError("validate needs at least one model, format and concurrency");
  for (int conc : o.concurrencies) {
    if (conc < 1 || conc > 64) throw UsageError("--concurrency values must be between 1 and 64");
  }
  if (o.prompt < 1 || o.gen < 2) throw UsageError("validate needs --prompt of at least 1 and --gen of at least 2");
  if (o.repeats < 1 || o.repeats > 15) throw UsageError("--repeats must be between 1 and 15");
  if (!(o.settled_read >= 0) || o.unsettled_retries < 0 || o.unsettled_retries > 5) {
    throw UsageError("--settled-read must be a non-negative fraction and --unsettled-retries between 0 and 5");
  }
}

void check_held_out(const ValidateOptions& o, const Calibration& c) {
  if (!c.engine) throw UsageError("the calibration has no engine overheads: run `infercast calibrate` first");
  for (const auto& m : o.models) {
    if (m.shape.experts > 0 && !c.engine->routed_rows_fitted) {
      throw UsageError(fmt::format("the calibration was made without MoE runs, so it cannot forecast {}: calibrate again (validate --recalibrate)", m.name));
    }
  }
  for (const auto& run : c.runs) {
    for (const auto& m : o.models) {
      if (m.name == run.model) throw UsageError(fmt::format("model {} was fitted on by the calibration; validate must hold it out", m.name));
    }
    for (const auto& q : o.quants) {
      if (iequals(q, run.quant)) throw UsageError(fmt::format("format {} was fitted on by the calibration; validate must hold it out", q));
    }
    for (int conc : o.concurrencies) {
      if (conc == run.concurrency) throw UsageError(fmt::format("concurrency {} was fitted on by the calibration; validate must hold it out", conc));
    }
  }
  check_options(o);
  if (o.threads != c.threads) {
    throw UsageError(fmt::format("the calibration was measured at {} threads; validate at {} would judge a forecast it cannot make", c.threads, o.threads));
  }
}

std::vector<std::size_t> pass_order(std::size_t count, int pass) {
  std::vector<std::size_t> order(count);
  for (std::size_t i = 0; i < count; ++i) order[i] = (i + static_cast<std::size_t>(std::max(pass, 0))) % std::max<std::size_t>(count, 1);
  return order;
}

std::size_t median_pass(const std::vector<double>& predicted, const std::vector<double>& measured) {
  if (predicted.empty() || predicted.size() != measured.size()) throw UsageError("median_pass needs one forecast per measurement");
  std::vector<std::size_t> order(predicted.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  const auto ratio = [&](std::size_t i) { return predicted[i] / measured[i]; };
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return ratio(a) < ratio(b); });
  return order[(order.size() - 1) / 2];
}

namespace {

// One model file of the plan, with what the forecast reads from it.
struct PlannedModel {
  const ValidationModel* model;
  std::string quant;
  std::string path;
  Architecture arch;
  WeightInventory inventory;
};

// Removes the generated models when validate ends, by an error too, unless they are kept.
class GeneratedFiles {
 public:
  explicit GeneratedFiles(bool keep) : keep_(keep) {}
  ~GeneratedFiles() {
    if (keep_) return;
    std::error_code ignored;  // a destructor must not throw; a file already gone is fine
    for (const auto& p : paths_) std::filesystem::remove(p, ignored);
  }
  GeneratedFiles(const GeneratedFiles&) = delete;
  GeneratedFiles& operator=(const GeneratedFiles&) = delete;
  void add(const std::string& path) { paths_.push_back(path); }

 private:
  bool keep_;
  std::vector<std::string> paths_;
};

// A row's figures, one per pass.
struct RowSamples {
  std::vector<double> measured_decode, measured_prefill;
  std::vector<double> decode, decode_low, decode_high;
  std::vector<double> prefill, prefill_low, prefill_high;
  std::vector<double> matrix, measured_matrix, other, measured_other, step_bytes, measured_step_bytes;
  std::vector<double> prompt_matrix, measured_prompt_matrix, prompt_other, measured_prompt_other;
  std::vector<double> read, read_before, read_after, curve_read, decode_at_run_read, prefill_at_run_read;
  int reruns = 0;

  // One phase's figures from one pass: predicted, measured and the band.
  static std::tuple<double, double, double, double> phase(const std::vector<double>& predicted,
                                                          const std::vector<double>& measured,
                                                          const std::vector<double>& low,
                                                          const std::vector<double>& high, std::size_t pass) {
    return {predicted[pass], measured[pass], low[pass], high[pass]};
  }
};

std::vector<GgmlType> formats_of(const std::vector<const PlannedModel*>& models) {
  std::vector<GgmlType> types;
  for (const PlannedModel* m : models) {
    for (const auto& matrix : m->inventory.matrices) {
      const GgmlType type = matrix.kernel_type();
      if (std::find(types.begin(), types.end(), type) == types.end()) types.push_back(type);
    }
  }
  return types;
}

// The format of most of a model's bytes: the one whose read its decode follows.
GgmlType largest_format(const WeightInventory& inventory) {
  std::map<GgmlType, double> bytes;
  for (const auto& m : inventory.matrices) bytes[m.kernel_type()] += static_cast<double>(m.bytes());
  if (bytes.empty()) throw UsageError("a validated model has no weight matrices");
  return std::max_element(bytes.begin(), bytes.end(), [](const auto& a, const auto& b) { return a.second < b.second; })->first;
}

}  // namespace

ValidationReport validate_forecast(const ValidateOptions& o, const Calibration& c, const ValidateProgress& progress) {
  check_held_out(o, c);
  std::filesystem::create_directories(o.work_dir);
  const std::size_t per_pass = o.models.size() * o.quants.size() * o.concurrencies.size();
  const double total = static_cast<double>(per_pass * static_cast<std::size_t>(o.repeats));
  double done = 0;
  const auto report_progress = [&](const std::string& what) {
    if (progress) progress(what, done / total);
  };

  // Every file first: each pass runs all of them.
  std::vector<PlannedModel> planned;  // quant-major, as the rows are reported
  GeneratedFiles generated(o.keep_models);
  for (const auto& quant : o.quants) {
    for (const auto& vm : o.models) {
      const std::string path = (std::filesystem::path(o.work_dir) / fmt::format("{}-{}-s{}.gguf", vm.name, quant, o.seed)).string();
      if (!o.keep_models || !std::filesystem::exists(path)) {
        generated.add(path);
        report_progress(fmt::format("generating {} {}", vm.name, quant));
        generate_model({.shape = vm.shape, .quant = quant, .seed = o.seed, .threads = o.threads}, path);
      }
      const GgufFile file = GgufFile::open(path);
      Architecture arch = architecture_from_gguf(file, vm.name);
      WeightInventory inventory = weight_inventory(file, arch);
      planned.push_back({&vm, quant, path, std::move(arch), std::move(inventory)});
    }
  }

  // Passes over the whole plan rather than repeats of one row: a host that slows for a minute
  // then costs one sample of several rows instead of every sample of one (seen here: a C=1 row
  // measured at half its C=2 row's rate, and two prefill rows 30% slow beside a third).
  std::vector<RowSamples> samples(planned.size() * o.concurrencies.size());
  const IsaLevel level = active_level();
  for (int pass = 0; pass < o.repeats; ++pass) {
    for (std::size_t q = 0; q < o.quants.size(); ++q) {
      std::vector<const PlannedModel*> group;
      for (std::size_t m : pass_order(o.models.size(), pass)) group.push_back(&planned[q * o.models.size() + m]);
      // The curves of this format's matrices measured again just before its runs (the engine
      // overheads stay as fitted): the machine drifts between calibration and validation.
      Calibration current = c;
      if (o.refresh_kernels) {
        report_progress(fmt::format("kernel curves for {}, pass {}", o.quants[q], pass + 1));
        measure_curves(current, formats_of(group), o.refresh_min_time, {}, o.read_bytes);
      }
      const auto as_swept = measured_performance(current);
      for (const PlannedModel* pm : group) {
        const Model model = Model::load(pm->path);
        const auto index = static_cast<std::size_t>(pm - planned.data());
        for (std::size_t ci = 0; ci < o.concurrencies.size(); ++ci) {
          const int conc = o.concurrencies[ci];
          report_progress(fmt::format("running {} {} C={}, pass {}", pm->model->name, pm->quant, conc, pass + 1));
          RunOptions r;
          r.threads = o.threads;
          r.concurrency = conc;
          r.prompt_tokens = o.prompt;
          r.gen_tokens = o.gen;
          RowSamples& s = samples[index * o.concurrencies.size() + ci];
          double read_before = 0;
          double read_after = 0;
          RunReport measured;
          for (int attempt = 0;; ++attempt) {
            read_before = measure_dram_read_gbs(o.threads, level, o.read_bytes);
            measured = run_model(model, r, nullptr);
            read_after = measure_dram_read_gbs(o.threads, level, o.read_bytes);
            const bool settled = std::abs(read_after - read_before) <= o.settled_read * 0.5 * (read_before + read_after);
            if (settled || attempt >= o.unsettled_retries) break;
            ++s.reruns;
          }
          const double read = 0.5 * (read_before + read_after);
          Workload load;
          load.prompt = o.prompt;
          load.gen = o.gen;
          const auto memory = static_cast<double>(available_memory_bytes());
          // The headline forecast knows the curves alone, as `predict` does; the one at the
          // run's read is the diagnostic.
          const ForecastRow f = forecast_row(pm->arch, pm->inventory, *as_swept, load, conc, memory);
          const ForecastRow at_read = forecast_row(pm->arch, pm->inventory, *measured_performance(current.at_read(read)), load, conc, memory);
          s.read.push_back(read);
          s.read_before.push_back(read_before);
          s.read_after.push_back(read_after);
          s.curve_read.push_back(current.curve_read(largest_format(pm->inventory)));
          s.decode_at_run_read.push_back(at_read.decode_tps);
          s.prefill_at_run_read.push_back(at_read.prefill_tps);
          s.measured_decode.push_back(measured.decode_tps);
          s.measured_prefill.push_back(measured.prefill_tps);
          s.decode.push_back(f.decode_tps);
          s.decode_low.push_back(f.decode_low * conc);
          s.decode_high.push_back(f.decode_high * conc);
          s.prefill.push_back(f.prefill_tps);
          s.prefill_low.push_back(f.prefill_low);
          s.prefill_high.push_back(f.prefill_high);
          const double steps = o.gen - 1;
          s.step_bytes.push_back(pm->inventory.step_weight_bytes(pm->arch, conc));
          s.measured_step_bytes.push_back(static_cast<double>(measured.decode_bytes_per_step));
          s.matrix.push_back(f.decode_matrix_seconds);
          s.other.push_back(f.decode_other_seconds);
          s.measured_matrix.push_back(measured.decode_gemm_seconds / steps);
          s.measured_other.push_back((measured.decode_seconds - measured.decode_gemm_seconds) / steps);
          s.prompt_matrix.push_back(f.prefill_matrix_seconds);
          s.prompt_other.push_back(f.prefill_other_seconds);
          s.measured_prompt_matrix.push_back(measured.prefill_gemm_seconds / conc);
          s.measured_prompt_other.push_back((measured.prefill_seconds - measured.prefill_gemm_seconds) / conc);
          ++done;
        }
      }
    }
  }

  ValidationReport report;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const PlannedModel& pm = planned[i / o.concurrencies.size()];
    RowSamples& s = samples[i];
    ValidationRow row;
    row.model = pm.model->name;
    row.quant = pm.quant;
    row.concurrency = o.concurrencies[i % o.concurrencies.size()];
    row.runs = static_cast<int>(s.measured_decode.size());
    const std::size_t d = median_pass(s.decode, s.measured_decode);
    const std::size_t p = median_pass(s.prefill, s.measured_prefill);
    for (std::size_t k = 0; k < s.decode.size(); ++k) {
      row.decode_pass_errors.push_back(s.decode[k] / s.measured_decode[k] - 1);
      row.prefill_pass_errors.push_back(s.prefill[k] / s.measured_prefill[k] - 1);
    }
    row.decode_pass = static_cast<int>(d);
    row.prefill_pass = static_cast<int>(p);
    std::tie(row.predicted_decode_tps, row.measured_decode_tps, row.decode_low, row.decode_high) =
        s.phase(s.decode, s.measured_decode, s.decode_low, s.decode_high, d);
    std::tie(row.predicted_prefill_tps, row.measured_prefill_tps, row.prefill_low, row.prefill_high) =
        s.phase(s.prefill, s.measured_prefill, s.prefill_low, s.prefill_high, p);
    row.predicted_step_weight_bytes = s.step_bytes[d];
    row.measured_step_weight_bytes = s.measured_step_bytes[d];
    row.predicted_step_matrix_seconds = s.matrix[d];
    row.measured_step_matrix_seconds = s.measured_matrix[d];
    row.predicted_step_other_seconds = s.other[d];
    row.measured_step_other_seconds = s.measured_other[d];
    row.predicted_prompt_matrix_seconds = s.prompt_matrix[p];
    row.measured_prompt_matrix_seconds = s.measured_prompt_matrix[p];
    row.predicted_prompt_other_seconds = s.prompt_other[p];
    row.measured_prompt_other_seconds = s.measured_prompt_other[p];
    row.read_gbs = s.read[d];
    row.read_before_gbs = s.read_before[d];
    row.read_after_gbs = s.read_after[d];
    row.reruns = s.reruns;
    row.curve_read_gbs = s.curve_read[d];
    row.predicted_decode_tps_at_run_read = s.decode_at_run_read[d];
    row.predicted_prefill_tps_at_run_read = s.prefill_at_run_read[p];
    report.worst_decode_error = std::max(report.worst_decode_error, std::abs(row.decode_error()));
    report.worst_decode_error_at_run_read = std::max(report.worst_decode_error_at_run_read, std::abs(row.decode_error_at_run_read()));
    report.worst_prefill_error = std::max(report.worst_prefill_error, std::abs(row.prefill_error()));
    report.rows.push_back(row);
  }
  if (progress) progress("done", 1.0);
  return report;
}

}  // namespace infercast
