#pragma once
// `infercast validate`: generate models of three sizes that fit this machine, in three formats,
// run each at three concurrencies with the engine, and set the forecast beside the measurement.
// Nothing validated here was fitted on: the calibration (see calibration_plan) uses another
// model size, other formats and other concurrencies.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/generate.h"
#include "model/calibration.h"

namespace infercast {

struct ValidationModel {
  std::string name;
  ModelShape shape;
};
// The three sizes `validate` runs by default.
std::vector<ValidationModel> validation_models();
// Two MoE models `validate --models` can add: Mixtral's shape of routing (8 experts, 2 active)
// and a fine-grained one (64 experts, 8 active, as Qwen3's MoE models route), whose step is
// many small expert products.
std::vector<ValidationModel> moe_validation_models();
// The models named (from either list), in that order; throws UsageError naming the choices
// for a name that is neither.
std::vector<ValidationModel> validation_models_named(const std::vector<std::string>& names);

struct ValidateOptions {
  unsigned threads = 1;
  std::string work_dir;               // generated models live here
  bool keep_models = false;           // reuse and keep them (else removed after)
  std::vector<ValidationModel> models = validation_models();
  std::vector<std::string> quants{"Q8_0", "Q4_0", "Q4_K_M"};
  std::vector<int> concurrencies{1, 2, 4};
  int prompt = 128;
  int gen = 32;
  // Passes over the whole plan (every model, format and concurrency once per pass); each row
  // reports its pass of median error (see median_pass). One run of a decode on a shared host
  // here varies by 13-15% (standard deviation) from the next: five passes, not three.
  int repeats = 5;
  // In every pass, measure the kernel curves of a format's matrices again just before its
  // models run (the engine overheads stay as fitted): a shared machine drifts between
  // calibration and validation.
  bool refresh_kernels = true;
  double refresh_min_time = 0.25;
  std::uint64_t seed = 11;
  // Each run is bracketed by two DRAM reads of this many bytes, and a second forecast made at
  // their mean (Calibration::at_read) is reported beside the headline one, which, like
  // `predict`, knows only the curves: how much of a miss the host's bandwidth moving explains.
  // It is not the headline because no user of a forecast has the read of the minute their
  // model will run in, and because on a host whose bandwidth moves within seconds a read one
  // second away does not predict the run (docs/PERFORMANCE.md, sixteenth session).
  std::uint64_t read_bytes = kCurveReadBytes;
  // A run whose two reads differ by more than this fraction of their mean ran while the host's
  // bandwidth moved: it is run again, at most `unsettled_retries` times, and the last try kept
  // either way. Off by default: where the reads move within seconds, most runs qualify and the
  // retry does not make the kept run any more typical; another pass does more.
  double settled_read = 0.10;
  int unsettled_retries = 0;
};

struct ValidationRow {
  std::string model;
  std::string quant;
  int concurrency = 0;
  int runs = 0;                     // passes the row's median pass is chosen from
  int decode_pass = 0;              // the pass its decode figures come from (0-based)
  int prefill_pass = 0;             // the pass its prefill figures come from
  // Every pass's paired error, forecast / measured - 1, in pass order: how far passes disagree.
  std::vector<double> decode_pass_errors;
  std::vector<double> prefill_pass_errors;
  double predicted_decode_tps = 0;  // aggregate
  double measured_decode_tps = 0;
  double decode_low = 0;
  double decode_high = 0;
  double predicted_prefill_tps = 0;
  double measured_prefill_tps = 0;
  double prefill_low = 0;
  double prefill_high = 0;
  // One decode step split as `infercast run` splits it, forecast and measured (in the decode
  // pass): which part of a forecast missed, the weight products or the rest.
  double predicted_step_matrix_seconds = 0;
  double measured_step_matrix_seconds = 0;
  double predicted_step_other_seconds = 0;
  double measured_step_other_seconds = 0;
  // The weight bytes one decode step reads, forecast and measured (in the decode pass): in a MoE
  // model the forecast expects routing spread evenly over the experts, as a trained router's
  // load balancing makes it; a generated model's router need not spread so evenly.
  double predicted_step_weight_bytes = 0;
  double measured_step_weight_bytes = 0;
  // One prompt's prefill split the same way (in the prefill pass; measured per sequence).
  double predicted_prompt_matrix_seconds = 0;
  double measured_prompt_matrix_seconds = 0;
  double predicted_prompt_other_seconds = 0;
  double measured_prompt_other_seconds = 0;
  // The DRAM read around the decode pass's run, the read its curves were measured at (the
  // forecast above stands for it), and that pass's forecast made at the run's read instead.
  double read_gbs = 0;
  double read_before_gbs = 0;
  double read_after_gbs = 0;
  int reruns = 0;  // over all passes: runs repeated because the reads around them disagreed
  double curve_read_gbs = 0;
  double predicted_decode_tps_at_run_read = 0;
  double predicted_prefill_tps_at_run_read = 0;
  [[nodiscard]] double decode_error_at_run_read() const {
    return (predicted_decode_tps_at_run_read - measured_decode_tps) / measured_decode_tps;
  }
  [[nodiscard]] double decode_error() const { return (predicted_decode_tps - measured_decode_tps) / measured_decode_tps; }
  [[nodiscard]] double prefill_error() const { return (predicted_prefill_tps - measured_prefill_tps) / measured_prefill_tps; }
  [[nodiscard]] bool decode_in_band() const { return measured_decode_tps >= decode_low && measured_decode_tps <= decode_high; }
  [[nodiscard]] bool prefill_in_band() const { return measured_prefill_tps >= prefill_low && measured_prefill_tps <= prefill_high; }
};

struct ValidationReport {
  std::vector<ValidationRow> rows;
  double worst_decode_error = 0;   // largest |relative error|
  double worst_prefill_error = 0;
  double worst_decode_error_at_run_read = 0;  // the forecasts at the reads around their runs
};

// Throws UsageError when the options are out of range (before any calibration is spent on them).
void check_options(const ValidateOptions& options);
// Throws UsageError when a model, format or concurrency of the plan is one the calibration was
// fitted on, or the options cannot run here.
void check_held_out(const ValidateOptions& options, const Calibration& calibration);

// The order pass `pass` runs `count` models of one format in: rotated by one per pass, so no
// model always runs first (just after its curves are measured) or last.
std::vector<std::size_t> pass_order(std::size_t count, int pass);

// The pass whose forecast / measured ratio is the median of all passes' (the lower middle one
// of an even count). A forecast made from curves measured just before a run is judged against
// that run: the medians of each column taken apart would set one pass's forecast beside another
// pass's measurement, and on a drifting host the two need not have seen the same machine.
std::size_t median_pass(const std::vector<double>& predicted, const std::vector<double>& measured);

using ValidateProgress = std::function<void(const std::string& what, double fraction)>;
ValidationReport validate_forecast(const ValidateOptions& options, const Calibration& calibration,
                                   const ValidateProgress& progress = {});

}  // namespace infercast
