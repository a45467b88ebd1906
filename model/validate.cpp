#include "model/validate.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "engine/model.h"
#include "engine/run.h"
#include "model/forecast.h"
#include "probes/error.h"
#include "probes/stats.h"
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

void check_held_out(const ValidateOptions& o, const Calibration& c) {
  if (!c.engine) throw UsageError("the calibration has no engine overheads: run `infercast calibrate` first");
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
  if (o.models.empty() || o.quants.empty() || o.concurrencies.empty()) throw UsageError("validate needs at least one model, format and concurrency");
  for (int conc : o.concurrencies) {
    if (conc < 1 || conc > 64) throw UsageError("--concurrency values must be between 1 and 64");
  }
  if (o.prompt < 1 || o.gen < 2) throw UsageError("validate needs --prompt of at least 1 and --gen of at least 2");
  if (o.repeats < 1 || o.repeats > 15) throw UsageError("--repeats must be between 1 and 15");
  if (o.threads != c.threads) {
    throw UsageError(fmt::format("the calibration was measured at {} threads; validate at {} would judge a forecast it cannot make", c.threads, o.threads));
  }
}

ValidationReport validate_forecast(const ValidateOptions& o, const Calibration& c, const ValidateProgress& progress) {
  check_held_out(o, c);
  std::filesystem::create_directories(o.work_dir);
  ValidationReport report;
  const double total = static_cast<double>(o.models.size() * o.quants.size() * o.concurrencies.size());
  for (const auto& vm : o.models) {
    for (const auto& quant : o.quants) {
      const std::string path = (std::filesystem::path(o.work_dir) / fmt::format("{}-{}-s{}.gguf", vm.name, quant, o.seed)).string();
      if (!o.keep_models || !std::filesystem::exists(path)) {
        if (progress) progress(fmt::format("generating {} {}", vm.name, quant), static_cast<double>(report.rows.size()) / total);
        GenerateOptions g;
        g.shape = vm.shape;
        g.quant = quant;
        g.seed = o.seed;
        g.threads = o.threads;
        generate_model(g, path);
      }
      {
        const Model model = Model::load(path);
        const Architecture arch = architecture_from_gguf(model.file(), vm.name);
        const WeightInventory inv = weight_inventory(model.file(), arch);
        Calibration local = c;
        if (o.refresh_kernels) {
          std::vector<GgmlType> types;
          for (const auto& m : inv.matrices) {
            if (std::find(types.begin(), types.end(), m.type) == types.end()) types.push_back(m.type);
          }
          if (progress) progress(fmt::format("kernel curves for {} {}", vm.name, quant), static_cast<double>(report.rows.size()) / total);
          measure_curves(local, types, o.refresh_min_time);
        }
        const auto perf = measured_performance(local);
        for (int conc : o.concurrencies) {
          if (progress) progress(fmt::format("running {} {} C={}", vm.name, quant, conc), static_cast<double>(report.rows.size()) / total);
          RunOptions r;
          r.threads = o.threads;
          r.concurrency = conc;
          r.prompt_tokens = o.prompt;
          r.gen_tokens = o.gen;
          std::vector<double> decode;
          std::vector<double> prefill;
          for (int rep = 0; rep < o.repeats; ++rep) {
            const RunReport measured = run_model(model, r, nullptr);
            decode.push_back(measured.decode_tps);
            prefill.push_back(measured.prefill_tps);
          }
          Workload load;
          load.prompt = o.prompt;
          load.gen = o.gen;
          const ForecastRow f = forecast_row(arch, inv, *perf, load, conc, static_cast<double>(available_memory_bytes()));
          ValidationRow row;
          row.model = vm.name;
          row.quant = quant;
          row.concurrency = conc;
          row.predicted_decode_tps = f.decode_tps;
          row.measured_decode_tps = median_of(decode);
          row.decode_low = f.decode_low * conc;
          row.decode_high = f.decode_high * conc;
          row.predicted_prefill_tps = f.prefill_tps;
          row.measured_prefill_tps = median_of(prefill);
          row.prefill_low = f.prefill_low;
          row.prefill_high = f.prefill_high;
          report.worst_decode_error = std::max(report.worst_decode_error, std::abs(row.decode_error()));
          report.worst_prefill_error = std::max(report.worst_prefill_error, std::abs(row.prefill_error()));
          report.rows.push_back(row);
        }
      }
      if (!o.keep_models) std::filesystem::remove(path);
    }
  }
  if (progress) progress("done", 1.0);
  return report;
}

}  // namespace infercast
