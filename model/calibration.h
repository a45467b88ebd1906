#pragma once
// What the forecast knows about this machine, measured rather than assumed:
//  - per weight format, the time of a matrix product at each batch size, per weight byte and per
//    row (the kernel sweep on two shapes of equal size, long rows and short rows, weights
//    streamed from DRAM at all cores), which is the roofline with its real efficiency:
//    bandwidth-bound at batch 1, compute-bound as the batch grows;
//  - per format, the rate one core decodes weights when they sit in cache (what compute alone
//    allows; used to scale to machines with other core counts);
//  - the engine's own overheads (per parallel operation, per token, per routed row of a MoE
//    layer, attention), fitted once to the time the engine measures outside its matrix products
//    on runs of a dense and a MoE calibration model whose sizes, formats and concurrencies
//    `validate` never checks.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/generate.h"
#include "kernels/blocks.h"
#include "model/architecture.h"

namespace infercast {

// The largest batch a profile's curve point may name (calibrate sweeps up to 256).
inline constexpr double kMaxCurveBatch = 1 << 20;

// A product of a matrix with `rows` rows and `bytes` bytes at this batch takes
// seconds_per_call + bytes * seconds_per_byte + rows * seconds_per_row: a fixed cost (waking the
// threads, quantizing the activations, configuring tiles), streaming, and the per-row work (the
// reductions and stores of each output, which make short rows slower per byte than long ones).
struct CurvePoint {
  double batch = 0;
  double seconds_per_byte = 0;
  double seconds_per_row = 0;
  double seconds_per_call = 0;
  std::string kernel;
};

// The work of one forward step beyond the weight matrices, in the units the overheads scale by.
struct StepWork {
  double calls = 0;              // thread-team starts (engine/engine.h: parallel_operations)
  double token_layer_dims = 0;   // tokens x layers x hidden size: the per-token work
  // Attention. A prompt's tokens attend to positions the step itself just wrote, in long tasks
  // with the cache hot: its cost follows the operations (multiply-adds x 2). A decode token
  // attends to a cache the weight stream has evicted, one short task per sequence and KV head:
  // its cost follows the cache bytes read (a model with twice the query heads per KV head does
  // not take twice as long), several times the prefill cost per operation. So they are fitted
  // apart; the operations of decode stay for machines described by their peaks.
  double attention_ops = 0;         // prefill
  double decode_attention_ops = 0;  // decode (not fitted: described machines)
  double decode_kv_bytes = 0;       // KV cache bytes a decode step reads
  bool decode = false;              // a decode step (else a prompt's prefill)
  double context = 0;               // positions each decode token attends to
  // A MoE layer's routed rows (tokens x active experts x MoE layers) x hidden size: each routed
  // row is gathered, its expert's SwiGLU taken and its output combined back, beyond the per-token
  // work. A prompt of a 64-expert model with 8 active spent 0.2-0.4 us per routed row here that
  // the per-token term, fitted on dense models, did not count (docs/PERFORMANCE.md).
  double routed_row_dims = 0;
};

struct EngineOverheads {
  double seconds_per_call = 0;
  double seconds_per_token_layer_dim = 0;
  double seconds_per_attention_op = 0;
  double seconds_per_decode_kv_byte = 0;
  double residual = 0;  // relative RMS of the fit over the calibration runs
  // False for a calibration written before decode attention was fitted on its own: a forecast
  // of this machine needs it measured again (described machines use only the first two terms).
  bool decode_attention_fitted = true;
  double seconds_per_routed_row_dim = 0;
  // False for a calibration written before MoE runs joined it: its forecasts of MoE models
  // would leave their routed rows' work out.
  bool routed_rows_fitted = true;

  [[nodiscard]] double seconds(const StepWork& w) const {
    return w.calls * seconds_per_call + w.token_layer_dims * seconds_per_token_layer_dim +
           w.attention_ops * seconds_per_attention_op + w.decode_kv_bytes * seconds_per_decode_kv_byte +
           w.routed_row_dims * seconds_per_routed_row_dim;
  }
  // Team starts: no split of the work shortens them.
  [[nodiscard]] double fixed_seconds(const StepWork& w) const { return w.calls * seconds_per_call; }
  // The work the engine splits among its threads by token: per token and per routed row
  // (attention is split by its own tasks).
  [[nodiscard]] double per_token_seconds(const StepWork& w) const {
    return w.token_layer_dims * seconds_per_token_layer_dim + w.routed_row_dims * seconds_per_routed_row_dim;
  }
};

// One calibration run: what was fitted on (never a `validate` row).
struct CalibrationRun {
  std::string model;
  std::string quant;
  int concurrency = 0;
  int prompt = 0;
  int gen = 0;
  double prefill_seconds_per_sequence = 0;
  double decode_seconds_per_step = 0;
  double prefill_gemm_seconds_per_sequence = 0;  // of which in weight-matrix products
  double decode_gemm_seconds_per_step = 0;
  // What the kernel curves give for those products (0 in a calibration older than these
  // fields): how far the sweep, which times each product alone, stands from the engine's.
  double prefill_curve_seconds_per_sequence = 0;
  double decode_curve_seconds_per_step = 0;
};

// Relative RMS of the curves' matrix time against the engine's over the runs that carry both
// (0 when none does). Not a correction the forecast applies: the engine-over-curves ratio of
// the calibration's formats did not carry over to held-out ones (docs/PERFORMANCE.md,
// thirteenth session), so it only sets the band.
double curve_matrix_residual(const std::vector<CalibrationRun>& runs);

// The buffer the reads around each sweep stream: 0 takes dram_buffer_bytes, twice this host's
// last-level cache.
inline constexpr std::uint64_t kCurveReadBytes = 0;

struct Calibration {
  std::string measured_at;
  unsigned threads = 0;
  double dram_read_gbs = 0;
  double sweep_cv = 0;  // median coefficient of variation of the sweep's passes
  // Coefficient of variation of the DRAM reads taken around the formats' sweeps: how far this
  // host's bandwidth moves over minutes (0.22 on a shared host here), a part of every
  // bandwidth-bound forecast's band.
  double read_cv = 0;
  // Weight bytes each sweep point cycles through (0: the kernels' default_footprint, at least
  // 1 GiB); validate's refreshes use the same.
  std::uint64_t footprint_bytes = 0;
  std::map<GgmlType, std::vector<CurvePoint>> curves;
  // The DRAM read the curve of each format stands for: measured just before and after its
  // sweep (their mean), or the one at_read scaled it to. A shared host's read moves: this one
  // went between 31 and 59 GB/s from minute to minute, and one sweep put BF16 at 48 GB/s and
  // F16, the same bytes, at 33. Absent in older calibrations (dram_read_gbs stands in).
  std::map<GgmlType, double> curve_read_gbs;
  std::map<GgmlType, double> core_gbs;
  std::optional<EngineOverheads> engine;
  // Relative RMS of the curves' matrix time against the engine's measured matrix time over the
  // calibration runs: how well the kernel sweep stands for the engine's products.
  double matrix_residual = 0;
  std::vector<CalibrationRun> runs;

  [[nodiscard]] bool has(GgmlType type) const { return curves.contains(type); }
  // The format whose curves stand for `type`: itself where this calibration measured it, else
  // the measured format of the same block length and the nearest bits per weight, the lower of
  // two as near (a profile from before `type` had kernels: Q5_0 then takes Q4_0's curves, as
  // stand_in_format chose for it then). `type` itself when nothing measured is alike.
  [[nodiscard]] GgmlType measured_as(GgmlType type) const;
  // Interpolated linearly in batch between measured points; beyond the last point, extended
  // along the last segment (a compute-bound product grows linearly with the batch).
  // Throws UsageError for a format the calibration did not measure.
  [[nodiscard]] double seconds_per_byte(GgmlType type, double batch) const;
  [[nodiscard]] double seconds_per_row(GgmlType type, double batch) const;
  [[nodiscard]] double seconds_per_call(GgmlType type, double batch) const;
  // Per byte of a square 4096 x 4096 matrix, per-row work included: the figure to quote.
  [[nodiscard]] double effective_seconds_per_byte(GgmlType type, double batch) const;
  // `calls`: the product's own calls (0 for a matrix multiplied in the call of the one before it).
  [[nodiscard]] double product_seconds(GgmlType type, double bytes, double rows, double batch, double calls = 1) const {
    return calls * seconds_per_call(type, batch) + bytes * seconds_per_byte(type, batch) + rows * seconds_per_row(type, batch);
  }
  [[nodiscard]] double curve_read(GgmlType type) const;
  // This calibration as its sweeps would have measured at a DRAM read of `gbs`: in each curve
  // point, the share of the time per byte that the read itself accounts for (all of it for a
  // kernel at or above the read) scales by curve_read / gbs; the rest (decoding, compute), the
  // per-row and the per-call times stay. Throws UsageError unless gbs > 0.
  [[nodiscard]] Calibration at_read(double gbs) const;
  // The median of the curves' reads (dram_read_gbs when there are none).
  [[nodiscard]] double typical_curve_read() const;
  // Relative uncertainty of a forecast made from this calibration (about two standard errors)
  // for a step of `matrix_seconds` in products and `other_seconds` in the rest, of which
  // `memory_seconds` is the time its bytes take at the read: each part carries the error its
  // model showed on the calibration runs, the bytes the read's own variation, plus the sweep's
  // noise.
  [[nodiscard]] double relative_band(double matrix_seconds, double other_seconds, double memory_seconds) const;
};

nlohmann::json to_json(const Calibration& c);
// Throws UsageError when the section is malformed.
Calibration calibration_from_json(const nlohmann::json& j);

// Engine work of one step: `tokens` tokens at `context` positions each (on average) for decode,
// or one prompt of `tokens` tokens (each attending to those before it) for prefill.
StepWork decode_work(const Architecture& a, double batch, double context, double kv_element_bytes = 2);
StepWork prefill_work(const Architecture& a, double tokens);
// Seconds the weight products of one step over `batch` tokens take by the calibration's curves;
// the output head multiplies only the `output_batch` tokens whose logits are wanted.
double matrix_seconds(const Calibration& c, const Architecture& a, const WeightInventory& w, double batch, double output_batch);
// A prompt of `tokens` tokens in steps of at most 512, logits for the last token only.
double prefill_matrix_seconds(const Calibration& c, const Architecture& a, const WeightInventory& w, double tokens);

// Fits the overheads to runs (non-negative least squares). Each observation: measured seconds,
// the matrix seconds the curves predict for it, and its work.
struct OverheadObservation {
  double measured_seconds = 0;
  double matrix_seconds = 0;
  StepWork work;
};
EngineOverheads fit_overheads(const std::vector<OverheadObservation>& observations);

using CalibrationProgress = std::function<void(const std::string& what, double fraction)>;

struct CalibrationOptions {
  unsigned threads = 1;
  std::string work_dir;           // where the calibration models are written (and removed)
  bool engine = true;             // also fit the engine overheads
  double min_time = 0.25;         // per sweep point
  std::uint64_t footprint_bytes = 0;  // per sweep point (0: the kernels' default_footprint)
  std::uint64_t seed = 7;
};
// Measures (or measures again) the curves of `formats` at the calibration's thread count and
// footprint, replacing theirs. `validate` refreshes the formats of each model just before running it, so
// the drift of a shared machine between calibration and validation stays out of the error.
// Each format's sweep is bracketed by two DRAM reads (curve_read_gbs); `read_bytes` is the
// buffer they stream (tests pass a small one).
// Returns every read it took.
std::vector<double> measure_curves(Calibration& c, const std::vector<GgmlType>& formats, double min_time,
                                   const CalibrationProgress& progress = {}, std::uint64_t read_bytes = kCurveReadBytes);

// Runs the sweep and the calibration models. `dram_read_gbs` comes from the probe profile.
Calibration calibrate(const CalibrationOptions& options, double dram_read_gbs, const CalibrationProgress& progress = {});

// The calibration models and the formats and concurrencies they run: kept apart from what
// `validate` checks.
struct CalibrationModel {
  std::string name;
  ModelShape shape;
  std::vector<std::string> quants;
};
struct CalibrationPlan {
  std::vector<CalibrationModel> models;
  std::vector<int> concurrencies;
  std::vector<int> prompts;
  int gen = 0;
};
const CalibrationPlan& calibration_plan();

// The three sweep shapes (rows x cols): the same bytes in long and in short rows, and a small
// matrix that shows the fixed cost of a call.
inline constexpr std::size_t kLongRows[2] = {2048, 8192};
inline constexpr std::size_t kShortRows[2] = {8192, 2048};
inline constexpr std::size_t kSmall[2] = {512, 2048};

struct ShapeTime {
  double bytes = 0;
  double seconds = 0;
};
// Splits the times of one format and batch on the three shapes into per-call, per-byte and
// per-row parts; a part that noise makes negative is dropped and the others refitted.
CurvePoint split_point(double batch, ShapeTime long_rows, ShapeTime short_rows, ShapeTime small, const std::string& kernel);

// A format whose curves name other kernels than this build picks for the same sweep points at
// the active ISA level: a calibration from before a kernel changed, or made at another level.
// Its forecast follows what the old kernels did (the Q5_0 batches of a thirty-ninth-session
// profile ran at half the speed of this build's).
struct StaleCurve {
  GgmlType type;
  std::vector<std::string> measured;  // the kernels the curves name, each once, in batch order
  std::vector<std::string> current;   // the kernels this build picks at those batches
};
// The stale curves among `formats` (points that name no kernel, from older profiles, are not
// judged). Only a change of kernel shows: one whose code changed under the same name does not.
[[nodiscard]] std::vector<StaleCurve> stale_curves(const Calibration& c, const std::vector<GgmlType>& formats);

}  // namespace infercast
