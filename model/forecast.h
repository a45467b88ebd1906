#pragma once
// The roofline forecast: for a model, a quantization, a machine and a workload, decode and
// prefill speed, time to first token, memory fit, the bottleneck, the largest concurrency that
// meets a per-user target, and an uncertainty band.
//
// One decode step over B sequences takes
//   sum over weight matrices of time(bytes, operations, batch)   (experts: those B tokens touch)
//   + attention over each sequence's KV cache + the engine's fixed and per-token overheads,
// where time() is measured on this machine (the calibration's curves) or, for a described
// machine, the roofline max(bytes / bandwidth, operations / compute) at efficiencies learned
// from measured machines.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/architecture.h"
#include "model/calibration.h"
#include "model/cost.h"
#include "model/hardware.h"

namespace infercast {

struct Workload {
  std::vector<int> users{1};
  int prompt = 512;
  int gen = 256;
  double target_tps_per_user = 0;  // 0: no target
  std::uint64_t kv_element_bytes = 2;  // F16 cache
};

// How fast a machine runs the parts of a forward step.
class Performance {
 public:
  virtual ~Performance() = default;
  // The weight products of one step over `batch` tokens (`output_batch` of them want logits).
  [[nodiscard]] virtual double matrix_seconds(const Architecture& a, const WeightInventory& w, double batch, double output_batch) const = 0;
  // Everything else in the step: attention over `kv_bytes` of cache, engine overheads.
  [[nodiscard]] virtual double other_seconds(const Architecture& a, const StepWork& work, double kv_bytes, double batch) const = 0;
  [[nodiscard]] virtual double stream_gbs() const = 0;
  // The band of a step that spends `matrix_seconds` in products and `other_seconds` elsewhere,
  // whose bytes take `memory_seconds` at stream_gbs().
  [[nodiscard]] virtual double relative_band(double matrix_seconds, double other_seconds, double memory_seconds) const = 0;
  // Where the efficiencies come from, in words.
  [[nodiscard]] virtual std::string basis() const = 0;
  // The part of a decode step that is neither bytes nor operations: a GPU's kernel launches and
  // synchronization (included in other_seconds).
  [[nodiscard]] virtual double launch_seconds(const Architecture&) const { return 0; }
  // The engine's fixed costs within other_seconds: starts of the thread team and the per-token
  // work between the products (RMSNorm, RoPE, SwiGLU, the residual, MoE routing); a step of
  // `batch` tokens. None on a GPU, whose fixed costs are its launches.
  [[nodiscard]] virtual double overhead_seconds(const StepWork&, double /*batch*/) const { return 0; }
  // The format whose measured speed a matrix of `type` (one with kernels) is forecast at: itself,
  // or a measured stand-in where the calibration behind the forecast predates its kernels.
  [[nodiscard]] virtual GgmlType measured_as(GgmlType type) const { return type; }
};

// This machine, from its calibration.
std::unique_ptr<Performance> measured_performance(const Calibration& calibration);

// A described machine (`devices` of them, tensor-parallel), with efficiencies learned from the
// measured machines: `reference` is a calibrated machine (its hardware and calibration) whose
// kernel efficiencies carry over to other CPUs; GPUs learn from the catalog's measured entries.
struct Reference {
  Hardware hardware;
  Calibration calibration;
  std::string origin;  // "this machine's profile" or which shipped reference
};
std::unique_ptr<Performance> described_performance(const Hardware& h, const Reference& reference, int devices);

// A GPU step's fixed cost per layer beyond its bytes and operations: kernel launches,
// synchronization, kernels too small to reach the roofline. Learned from the catalog GPUs'
// published runs (model/catalog/hardware/*.json, `published_runs`): each run's time over the
// forecast without it, per layer and decode step. One device: the median of the single-device
// runs; tensor parallel adds the median excess of the multi-device runs over that.
struct LaunchLatencySample {
  std::string gpu;
  PublishedRun run;
  double seconds_per_layer_step = 0;
};
struct GpuLaunchLatency {
  double per_layer = 0;           // seconds per layer and step, one device
  double per_layer_parallel = 0;  // added across devices
  std::vector<LaunchLatencySample> samples;
};
const GpuLaunchLatency& gpu_launch_latency();
// The seconds a published run takes by a forecast: the batch's prompts prefilled together, then
// `gen` decode steps at the mean context.
double published_run_seconds(const Architecture& a, const WeightInventory& w, const Performance& p, const PublishedRun& run);

// The KV cache bytes a prompt of `tokens` moves to and from memory: each token's keys and values
// written once and read once per tile of 128 queries at or after it. Flash attention on a GPU
// reads them per tile of queries (128 for a head of 128 on FlashAttention-2), and a CPU's prefill
// tasks keep a tile's cache hot; reading them once per query, as this forecast first did,
// charged a 512-token prompt of Llama-2 7B 69 GB of traffic instead of 1 and held an RTX 4090's
// forecast prefill to 3900 tokens/s where llama.cpp measured 7700-11000 (docs/PERFORMANCE.md).
double prefill_kv_bytes(double tokens, std::uint64_t kv_per_token);

// The calibrated machines shipped with infercast (model/catalog/references/).
std::vector<Reference> shipped_references();
// Of the calibrated machines a described one may learn from, in order of preference, the first
// whose batches ran on the kind of unit the described machine has: tiles for one with AMX,
// vector registers for one without. An efficiency measured as a fraction of an AMX peak says
// nothing about vector units, which have a fifteenth of it on the shipped Xeon. The first
// candidate when none matches; UsageError when there are none.
const Reference& reference_for(const Hardware& described, const std::vector<Reference>& candidates);

struct MemoryFit {
  double weights = 0;
  double kv_cache = 0;
  double activations = 0;
  double needed = 0;
  double available = 0;
  [[nodiscard]] double headroom() const { return available - needed; }
  [[nodiscard]] bool fits() const { return needed <= available; }
};

struct ForecastRow {
  int users = 0;
  double decode_tps_per_user = 0;
  double decode_tps = 0;          // all users together
  double band = 0;                // relative uncertainty of the decode figures
  double decode_matrix_seconds = 0;  // of one decode step, in the weight products
  double decode_other_seconds = 0;   // the rest: attention, per-token work, fixed costs
  double decode_launch_seconds = 0;  // of which a GPU's kernel launches and synchronization
  double decode_low = 0;          // per user, the band
  double decode_high = 0;
  double prefill_tps = 0;         // one prompt on an idle machine
  double prefill_matrix_seconds = 0;  // of that prompt, in the weight products
  double prefill_other_seconds = 0;   // the rest
  double prefill_low = 0;
  double prefill_high = 0;
  double ttft_seconds = 0;
  double step_bytes = 0;
  double decode_overhead_seconds = 0;  // of which the engine's team starts and per-token work
  double bandwidth_share = 0;     // time the bytes need at streaming bandwidth / step time
  // "capacity" when it does not fit, else what takes the largest part of a decode step:
  // "bandwidth" (its bytes at streaming bandwidth), "latency" (a GPU's launches), "overhead"
  // (the engine's team starts and per-token work) or "compute" (the rest).
  std::string bottleneck;
  MemoryFit memory;
};

struct Forecast {
  std::string model;
  std::string quant;
  std::string hardware;
  std::string basis;
  int devices = 1;
  double parameters = 0;
  double active_parameters = 0;
  double weight_bytes = 0;
  double bits_per_weight = 0;
  double band = 0;  // relative, of the first row's decode
  std::vector<ForecastRow> rows;
  std::optional<int> max_users_meeting_target;  // when a target was given
};

ForecastRow forecast_row(const Architecture& a, const WeightInventory& w, const Performance& p, const Workload& load,
                         int users, double memory_available);
Forecast forecast(const Architecture& a, const WeightInventory& w, const std::string& quant, const Hardware& h,
                  const Performance& p, const Workload& load, int devices = 1);

// Memory a configuration needs: weights, every user's KV cache at full length, activations.
MemoryFit memory_fit(const Architecture& a, const WeightInventory& w, const Workload& load, int users, double available);

// The fewest devices (1, 2, 4 or 8) whose memory holds the model for the largest user count of
// the workload; a CPU is one machine.
int fewest_devices_holding(const Architecture& a, const WeightInventory& w, const Hardware& h, const Workload& load);

// Relative RMS error of the model's outputs under its quantization: each matrix type's GEMV
// error as the kernels' accuracy check measures it, weighted by the parameters it holds.
double output_error(const WeightInventory& w);

// One machine against another on the same workload: cost per million tokens of each, the
// cost-benefit ratio of the other over this one, and the user count from which the other is
// cheaper per token. Costs are absent where a machine has no price.
struct CostComparisonRow {
  int users = 0;
  double this_tps = 0;
  double other_tps = 0;
  std::optional<double> this_usd_per_mtok;
  std::optional<double> other_usd_per_mtok;
  std::optional<double> benefit_ratio;
  bool other_fits = true;
};
struct CostComparison {
  std::vector<CostComparisonRow> rows;
  std::optional<int> other_cheaper_from_users;
};
CostComparison compare_costs(const Forecast& mine, const CostInputs& my_cost, const Forecast& other, const CostInputs& other_cost);

}  // namespace infercast
