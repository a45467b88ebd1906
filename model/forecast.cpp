#include "model/forecast.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "kernels/formats.h"
#include "kernels/measure.h"
#include "model/catalog.h"
#include "probes/error.h"
#include "probes/stats.h"

namespace infercast {
namespace {

constexpr double kPrefillChunk = 512;
// Queries a prompt's attention takes per pass over the keys and values before them.
constexpr double kQueryTile = 128;


class MeasuredPerformance final : public Performance {
 public:
  explicit MeasuredPerformance(const Calibration& c) : c_(c) {
    if (!c_.engine) throw UsageError("the calibration has no engine overheads: run `infercast calibrate` again");
    if (!c_.engine->decode_attention_fitted) {
      throw UsageError("the calibration was made by an older infercast that did not fit decode attention: run `infercast calibrate` again");
    }
  }
  double matrix_seconds(const Architecture& a, const WeightInventory& w, double batch, double output_batch) const override {
    return infercast::matrix_seconds(c_, a, w, batch, output_batch);
  }
  double other_seconds(const Architecture& a, const StepWork& work, double, double) const override {
    if (a.is_moe() && !c_.engine->routed_rows_fitted) {
      throw UsageError("the calibration was made by an older infercast without MoE runs: run `infercast calibrate` again to forecast a MoE model");
    }
    return c_.engine->seconds(work);
  }
  double overhead_seconds(const StepWork& work, double) const override {
    return c_.engine->fixed_seconds(work) + c_.engine->per_token_seconds(work);
  }
  // The read the curves stand for (the probe's in a calibration older than curve_read_gbs).
  double stream_gbs() const override { return c_.typical_curve_read(); }
  GgmlType measured_as(GgmlType type) const override { return c_.measured_as(type); }
  double relative_band(double matrix, double other, double memory) const override { return c_.relative_band(matrix, other, memory); }
  std::string basis() const override {
    // A hand-made or trimmed profile may carry no date.
    if (c_.measured_at.empty()) return fmt::format("measured on this machine ({} threads)", c_.threads);
    return fmt::format("measured on this machine ({} threads, calibrated {})", c_.threads, c_.measured_at);
  }

 private:
  Calibration c_;  // a copy: callers measure a calibration afresh and let theirs go (validate does)
};

// Learned fractions: measured / datasheet over the catalog entries that have a measurement.
double learned_stream_fraction(DeviceKind kind) {
  std::vector<double> f;
  for (const auto& h : catalog_hardware()) {
    if (h.kind == kind && h.stream_gbs) f.push_back(*h.stream_gbs / h.bandwidth_gbs);
  }
  return f.empty() ? 1.0 : median_of(f);
}

double learned_gemm_fraction() {
  std::vector<double> f;
  for (const auto& h : catalog_hardware()) {
    if (h.kind == DeviceKind::gpu && h.gemm_bf16_gflops) f.push_back(*h.gemm_bf16_gflops / h.peak_bf16_gflops);
  }
  return f.empty() ? 1.0 : median_of(f);
}

// The exponent p with (m^p + c^p)^(1/p) = t: how far memory and compute time overlap in a
// measured GEMV (p = 1: not at all, p -> infinity: perfectly, the plain roofline max).
double overlap_exponent(double t_memory, double t_compute, double t_measured) {
  const auto combined = [&](double p) { return std::pow(std::pow(t_memory, p) + std::pow(t_compute, p), 1.0 / p); };
  if (t_measured >= combined(1.0)) return 1.0;
  if (t_measured <= std::max(t_memory, t_compute)) return 64.0;
  double lo = 1.0;
  double hi = 64.0;
  for (int i = 0; i < 60; ++i) {
    const double mid = 0.5 * (lo + hi);
    (combined(mid) > t_measured ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

// A machine's peak for the instruction family a kernel ran on (kernels/measure.h). A machine
// has one BF16 figure, its tiles' where it has AMX: there the vector BF16 kernels run only
// batches too small to be compute-bound, so their fraction of it matters little.
double family_peak(const Hardware& h, ComputeFamily family) {
  switch (family) {
    case ComputeFamily::amx_bf16:
    case ComputeFamily::bf16: return h.peak_bf16_gflops;
    case ComputeFamily::amx_int8: return h.peak_int8_gops;
    case ComputeFamily::vector_int8: return h.peak_vector_int8_gops;
    case ComputeFamily::fp32: return h.peak_fp32_gflops;
  }
  return h.peak_fp32_gflops;
}

bool runs_on_tiles(ComputeFamily family) { return family == ComputeFamily::amx_int8 || family == ComputeFamily::amx_bf16; }

class DescribedPerformance final : public Performance {
 public:
  // Without `launch_latency` a GPU step is its bytes and operations alone: what the latency is
  // learned against.
  DescribedPerformance(const Hardware& h, const Reference& ref, int devices, bool launch_latency = true)
      : h_(h), ref_(ref), devices_(devices) {
    const double fraction = h.stream_gbs ? *h.stream_gbs / h.bandwidth_gbs : learned_stream_fraction(h.kind);
    stream_ = h.bandwidth_gbs * fraction * devices;
    stream_note_ = h.stream_gbs ? fmt::format("{:.0f} GB/s measured streaming", *h.stream_gbs)
                                : fmt::format("{:.0f}% of datasheet, the median the catalog's measured {}s reach", 100 * fraction,
                                              to_string(h.kind));
    if (h.kind == DeviceKind::gpu) {
      const double g = h.gemm_bf16_gflops ? *h.gemm_bf16_gflops / h.peak_bf16_gflops : learned_gemm_fraction();
      gpu_compute_ = h.peak_bf16_gflops * 1e9 * g * devices;
      compute_note_ = fmt::format("{:.0f}% of BF16 peak{}", 100 * g, h.gemm_bf16_gflops ? " (its measured GEMM)" : " (median of the catalog's measured GPUs)");
      if (launch_latency) {
        const GpuLaunchLatency& l = gpu_launch_latency();
        layer_latency_ = l.per_layer + (devices > 1 ? l.per_layer_parallel : 0);
        compute_note_ += fmt::format("; {:.0f} us per layer and step for launches and synchronization{}, learned from {} published runs",
                                     1e6 * layer_latency_, devices > 1 ? " across devices" : "", l.samples.size());
      }
    } else {
      compute_note_ = fmt::format("kernel efficiencies of {}", ref.origin);
      if (ref.hardware.amx && !h.amx) compute_note_ += ", whose AMX batches this machine runs at the best vector-kernel efficiency it showed";
      if (ref.calibration.engine && !ref.calibration.engine->routed_rows_fitted) {
        compute_note_ += "; a MoE layer's per-routed-row work not counted (the reference's calibration predates it)";
      }
    }
  }

  double matrix_seconds(const Architecture& a, const WeightInventory& w, double batch, double output_batch) const override {
    const double touched = a.is_moe() ? expected_experts_touched(a.moe.experts, a.moe.active, batch) : 0;
    double s = 0;
    for (const auto& m : w.matrices) {
      double bytes = static_cast<double>(m.bytes());
      double tokens = batch;
      if (m.role == MatrixRole::expert) {
        bytes = static_cast<double>(m.bytes_per_copy()) * touched;
        tokens = batch * a.moe.active;  // over all touched experts together
      } else if (m.role == MatrixRole::output) {
        if (output_batch <= 0) continue;
        tokens = output_batch;
      }
      const double per_copy_params = static_cast<double>(m.rows * m.cols);
      const double ops = 2.0 * per_copy_params * tokens;
      s += product_seconds(measured_as(m.kernel_type()), bytes, ops, tokens / std::max(1.0, m.role == MatrixRole::expert ? touched : 1.0));
    }
    return s;
  }

  double other_seconds(const Architecture& a, const StepWork& work, double kv_bytes, double batch) const override {
    double s = kv_bytes / (stream_ * 1e9);
    if (h_.kind == DeviceKind::gpu) {
      s += (work.attention_ops + work.decode_attention_ops) / gpu_compute_;
      // A decode step's kernels are too short to hide their launches; a prompt's are not.
      if (work.decode) s += a.layers * layer_latency_;
      if (devices_ > 1 && h_.interconnect_gbs > 0) {
        // Tensor parallel: two all-reduces of the activations per layer (ring: 2(N-1)/N of the data).
        const double bytes = 2.0 * a.layers * batch * a.dim * 2.0 * 2.0 * (devices_ - 1) / devices_;
        s += bytes / (h_.interconnect_gbs * 1e9);
      }
      return s;
    }
    s += overhead_seconds(work, batch);
    // Attention runs one task per token and KV head, a decode token's long cache cut into parts
    // when there are fewer than threads: a step of one user with a short cache keeps only that
    // many cores busy.
    const int cores = std::max(1, h_.cores * devices_);
    const double whole = std::clamp(batch, 1.0, kPrefillChunk) * std::max(1, a.kv_heads);
    const double parts = work.decode ? static_cast<double>(attention_parts(static_cast<std::size_t>(whole),
                                                                           static_cast<std::size_t>(work.context), static_cast<unsigned>(cores)))
                                     : 1.0;
    const double tasks = whole * parts;
    s += (work.attention_ops + work.decode_attention_ops) / (h_.peak_fp32_gflops * 1e9 * fp32_fraction() * std::min(1.0, tasks / cores));
    return s;
  }

  // The engine's overheads as measured on the reference, scaled by clock. The per-token work
  // is split by token among the threads (one token runs inline), so it also scales by how many
  // threads a step's tokens keep busy here against there: on the development host a 512-token
  // prompt's per-token work took 120-125 ms on one thread and 62-63 ms on two. A team start is
  // scaled by clock alone: no machine here has shown how it grows with the cores.
  double overhead_seconds(const StepWork& work, double batch) const override {
    if (h_.kind == DeviceKind::gpu || !ref_.calibration.engine) return 0;
    const double clock = ref_.hardware.base_ghz > 0 && h_.base_ghz > 0 ? ref_.hardware.base_ghz / h_.base_ghz : 1.0;
    const double tokens = std::clamp(batch, 1.0, kPrefillChunk);
    const double there = std::min(tokens, static_cast<double>(std::max(1U, ref_.calibration.threads)));
    const double here = std::min(tokens, static_cast<double>(std::max(1, h_.cores * devices_)));
    const EngineOverheads& e = *ref_.calibration.engine;
    return clock * (e.fixed_seconds(work) + e.per_token_seconds(work) * there / here);
  }

  double stream_gbs() const override { return stream_; }
  GgmlType measured_as(GgmlType type) const override {
    return h_.kind == DeviceKind::gpu ? type : ref_.calibration.measured_as(type);
  }
  double launch_seconds(const Architecture& a) const override { return a.layers * layer_latency_; }
  double relative_band(double matrix, double other, double memory) const override {
    // Learned efficiencies carry the spread of the machines they were learned from.
    return std::max(0.25, ref_.calibration.relative_band(matrix, other, memory));
  }
  std::string basis() const override {
    return fmt::format("described machine, not measured: bandwidth {}; compute {}", stream_note_, compute_note_);
  }

 private:
  double fp32_fraction() const {
    const double peak = ref_.hardware.peak_fp32_gflops;
    if (!(peak > 0) || !ref_.calibration.has(GgmlType::f32)) return 0.5;
    const auto& pts = ref_.calibration.curves.at(GgmlType::f32);
    const double batch = pts.back().batch;
    // F32 holds one parameter in 4 bytes: 2 x batch operations per 4 bytes streamed.
    return std::min(1.0, 2.0 * batch / (4.0 * ref_.calibration.effective_seconds_per_byte(GgmlType::f32, batch)) / 1e9 / peak);
  }

  double product_seconds(GgmlType type, double bytes, double ops, double batch) const {
    if (h_.kind == DeviceKind::gpu) return std::max(bytes / (stream_ * 1e9), ops / gpu_compute_);
    return std::max(bytes / (cpu_stream_rate(type) * 1e9), ops / cpu_compute(type, batch));
  }

  // Weight bytes per second a batch-1 product streams: memory and decode compute combined as the
  // reference machine showed them to combine.
  double cpu_stream_rate(GgmlType type) const {
    const Calibration& c = ref_.calibration;
    const auto core = c.core_gbs.find(type);
    if (core == c.core_gbs.end() || !c.has(type) || ref_.hardware.cores <= 0) return stream_;
    const double clock = ref_.hardware.base_ghz > 0 ? h_.base_ghz / ref_.hardware.base_ghz : 1.0;
    const double ref_compute = core->second * c.threads;
    // Against the read the curves stand for, not the probe's: on a shared host the two were
    // taken minutes apart (82.8 and 65.0 GB/s in one reference), and a curve faster than the
    // probe's read left no time for decoding at all.
    const double p = overlap_exponent(1.0 / c.typical_curve_read(), 1.0 / ref_compute, c.effective_seconds_per_byte(type, 1) * 1e9);
    const double compute = core->second * h_.cores * devices_ * clock;
    return 1.0 / std::pow(std::pow(1.0 / stream_, p) + std::pow(1.0 / compute, p), 1.0 / p);
  }

  // Operations per second at a batch: the reference's fraction of its peak for the kernel class.
  double cpu_compute(GgmlType type, double batch) const {
    const Calibration& c = ref_.calibration;
    if (!c.has(type)) return h_.peak_fp32_gflops * 1e9 * devices_;
    const auto& pts = c.curves.at(type);
    // The point at or above this batch (the largest if beyond), as a fraction of its peak.
    const CurvePoint* point = &pts.back();
    for (const auto& q : pts) {
      if (q.batch >= batch) {
        point = &q;
        break;
      }
    }
    ComputeFamily family = family_of(type, *point);
    double fraction = fraction_of_peak(type, *point);
    if (runs_on_tiles(family) && !h_.amx) {
      // The reference ran this batch on tiles this machine lacks; its vector units take it, as
      // fast as the reference's vector kernels ran this format at their best.
      double best = 0;
      for (const auto& q : pts) {
        if (runs_on_tiles(family_of(type, q))) continue;
        if (const double f = fraction_of_peak(type, q); f > best) {
          best = f;
          family = family_of(type, q);
        }
      }
      if (best > 0) fraction = best;
    }
    return family_peak(h_, family) * 1e9 * fraction * devices_;
  }

  static ComputeFamily family_of(GgmlType type, const CurvePoint& p) {
    return compute_family(type, p.kernel).value_or(ComputeFamily::fp32);
  }

  // The reference's operations per second at a curve point over its peak for that kernel family.
  double fraction_of_peak(GgmlType type, const CurvePoint& p) const {
    const Calibration& c = ref_.calibration;
    const double params_per_byte = static_cast<double>(format_info(type).block_elems) / static_cast<double>(format_info(type).block_bytes);
    const double ref_ops = 2.0 * params_per_byte * p.batch / c.effective_seconds_per_byte(type, p.batch);
    const double ref_peak = family_peak(ref_.hardware, family_of(type, p)) * 1e9;
    return ref_peak > 0 ? std::min(1.0, ref_ops / ref_peak) : 0.05;
  }

  Hardware h_;
  const Reference& ref_;
  int devices_;
  double stream_ = 0;
  double gpu_compute_ = 0;
  double layer_latency_ = 0;  // a GPU's seconds per layer and step beyond bytes and operations
  std::string stream_note_;
  std::string compute_note_;
};

struct PrefillTime {
  double matrix = 0;
  double other = 0;
};

PrefillTime prefill_seconds(const Architecture& a, const WeightInventory& w, const Performance& p, double tokens, std::uint64_t kv_per_token) {
  PrefillTime t;
  for (double begin = 0; begin < tokens; begin += kPrefillChunk) {
    const double n = std::min(kPrefillChunk, tokens - begin);
    t.matrix += p.matrix_seconds(a, w, n, begin + n >= tokens ? 1.0 : 0.0);
  }
  t.other = p.other_seconds(a, prefill_work(a, tokens), prefill_kv_bytes(tokens, kv_per_token), tokens);
  return t;
}

// One decode step of `batch` sequences at `context` positions each: its products and the rest.
struct DecodeStep {
  double matrix = 0;
  double other = 0;
  double kv_bytes = 0;
  double overhead = 0;  // of `other`: the engine's team starts and per-token work
};

DecodeStep decode_step(const Architecture& a, const WeightInventory& w, const Performance& p, double batch, double context,
                       std::uint64_t kv_element_bytes) {
  DecodeStep d;
  d.kv_bytes = batch * context * static_cast<double>(kv_bytes_per_token(a, kv_element_bytes));
  d.matrix = p.matrix_seconds(a, w, batch, batch);
  const StepWork work = decode_work(a, batch, context, static_cast<double>(kv_element_bytes));
  d.other = p.other_seconds(a, work, d.kv_bytes, batch);
  d.overhead = p.overhead_seconds(work, batch);
  return d;
}

GpuLaunchLatency learn_gpu_launch_latency() {
  static const Reference kNone{};  // a GPU's forecast takes nothing from a CPU reference
  GpuLaunchLatency l;
  std::vector<double> single, parallel;
  for (const Hardware& h : catalog_hardware()) {
    if (h.kind != DeviceKind::gpu) continue;
    for (const PublishedRun& r : h.published_runs) {
      const auto a = find_catalog_model(r.model);
      if (!a) throw UsageError(fmt::format("catalog hardware {}: a published run of '{}', which is not a catalog model", h.name, r.model));
      const WeightInventory w = weight_inventory(*a, parse_quantization(r.quant));
      const DescribedPerformance bare(h, kNone, r.devices, false);
      const double measured = r.batch * r.gen / r.output_tps;
      const double excess = (measured - published_run_seconds(*a, w, bare, r)) / (r.gen * a->layers);
      l.samples.push_back({h.name, r, excess});
      (r.devices == 1 ? single : parallel).push_back(excess);
    }
  }
  l.per_layer = single.empty() ? 0 : std::max(0.0, median_of(single));
  l.per_layer_parallel = parallel.empty() ? 0 : std::max(0.0, median_of(parallel) - l.per_layer);
  return l;
}

}  // namespace

const GpuLaunchLatency& gpu_launch_latency() {
  static const GpuLaunchLatency kLearned = learn_gpu_launch_latency();
  return kLearned;
}

double published_run_seconds(const Architecture& a, const WeightInventory& w, const Performance& p, const PublishedRun& run) {
  const double b = run.batch;
  const PrefillTime prompts = prefill_seconds(a, w, p, b * run.prompt, kv_bytes_per_token(a, 2));
  const DecodeStep step = decode_step(a, w, p, b, run.prompt + run.gen / 2.0, 2);
  return prompts.matrix + prompts.other + run.gen * (step.matrix + step.other);
}

double prefill_kv_bytes(double tokens, std::uint64_t kv_per_token) {
  double token_reads = 0;
  for (double end = kQueryTile; end - kQueryTile < tokens; end += kQueryTile) token_reads += std::min(end, tokens);
  return static_cast<double>(kv_per_token) * (tokens + token_reads);
}

std::unique_ptr<Performance> measured_performance(const Calibration& calibration) {
  return std::make_unique<MeasuredPerformance>(calibration);
}

std::vector<Reference> shipped_references() {
  std::vector<Reference> out;
  for (const auto& e : reference_profiles()) {
    const std::string origin = fmt::format("model/catalog/references/{}.json", e.name);
    const nlohmann::json p = nlohmann::json::parse(e.json);
    if (!p.contains("calibration")) throw UsageError(fmt::format("{} has no calibration", origin));
    out.push_back({hardware_from_profile(p, origin), calibration_from_json(p.at("calibration")),
                   fmt::format("the reference calibration shipped with infercast ({})", origin)});
  }
  return out;
}

const Reference& reference_for(const Hardware& described, const std::vector<Reference>& candidates) {
  if (candidates.empty()) throw UsageError("no calibration to learn efficiencies from: run `infercast calibrate` first");
  for (const Reference& r : candidates) {
    if (r.hardware.amx == described.amx) return r;
  }
  return candidates.front();
}

std::unique_ptr<Performance> described_performance(const Hardware& h, const Reference& reference, int devices) {
  if (devices < 1) throw UsageError("the device count must be at least 1");
  return std::make_unique<DescribedPerformance>(h, reference, devices);
}

MemoryFit memory_fit(const Architecture& a, const WeightInventory& w, const Workload& load, int users, double available) {
  MemoryFit m;
  m.weights = static_cast<double>(w.total_bytes());
  m.kv_cache = static_cast<double>(users) * (load.prompt + load.gen) * static_cast<double>(kv_bytes_per_token(a, load.kv_element_bytes));
  // Activations of the largest step (a prefill chunk or the decode batch), F32: the residual
  // stream and its norm, attention input and output, Q/K/V, the FFN's two inner vectors, logits.
  const double tokens = std::max(std::min<double>(load.prompt, kPrefillChunk), static_cast<double>(users));
  const double ffn = a.is_moe() ? std::max<double>(a.ffn, static_cast<double>(a.moe.expert_ffn) * a.moe.active) : a.ffn;
  // A MoE layer also gathers each token's rows for its experts and their outputs (k of each).
  const double routed = a.is_moe() ? 2.0 * a.moe.active * a.dim : 0.0;
  const double per_token = 4.0 * (4.0 * a.dim + a.heads * a.head_dim + 2.0 * a.kv_heads * a.head_dim + 2 * ffn + routed);
  m.activations = tokens * per_token + 4.0 * users * a.vocab;
  m.needed = m.weights + m.kv_cache + m.activations;
  m.available = available;
  return m;
}

namespace {

// What takes the largest part of a decode step of `step` seconds. The bytes' time overlaps the
// products' operations, so compute is what neither the bytes nor the fixed costs explain.
std::string bottleneck_of(const ForecastRow& r, double step) {
  if (!r.memory.fits()) return "capacity";
  const double bytes = r.bandwidth_share * step;
  const std::pair<double, const char*> parts[] = {{bytes, "bandwidth"},
                                                  {r.decode_launch_seconds, "latency"},
                                                  {r.decode_overhead_seconds, "overhead"},
                                                  {step - bytes - r.decode_launch_seconds - r.decode_overhead_seconds, "compute"}};
  return std::max_element(std::begin(parts), std::end(parts), [](const auto& x, const auto& y) { return x.first < y.first; })->second;
}

}  // namespace

ForecastRow forecast_row(const Architecture& a, const WeightInventory& w, const Performance& p, const Workload& load, int users,
                         double memory_available) {
  ForecastRow r;
  r.users = users;
  const double b = users;
  const auto kv_per_token = kv_bytes_per_token(a, load.kv_element_bytes);
  const auto [matrix, other, kv_bytes, overhead] = decode_step(a, w, p, b, load.prompt + load.gen / 2.0, load.kv_element_bytes);
  const double step = matrix + other;
  const double step_bytes = w.step_weight_bytes(a, b) + kv_bytes;
  const double band = p.relative_band(matrix, other, step_bytes / (p.stream_gbs() * 1e9));
  r.band = band;
  r.decode_matrix_seconds = matrix;
  r.decode_other_seconds = other;
  r.decode_launch_seconds = p.launch_seconds(a);
  r.decode_tps_per_user = 1.0 / step;
  r.decode_tps = b / step;
  r.decode_low = r.decode_tps_per_user * (1 - band);
  r.decode_high = r.decode_tps_per_user * (1 + band);
  const PrefillTime prefill_time = prefill_seconds(a, w, p, load.prompt, kv_per_token);
  const double prefill = prefill_time.matrix + prefill_time.other;
  // Every 512-token chunk reads the weights once.
  const double prefill_bytes = std::ceil(load.prompt / kPrefillChunk) * static_cast<double>(w.total_bytes());
  const double prefill_band = p.relative_band(prefill_time.matrix, prefill_time.other, prefill_bytes / (p.stream_gbs() * 1e9));
  r.prefill_tps = load.prompt / prefill;
  r.prefill_matrix_seconds = prefill_time.matrix;
  r.prefill_other_seconds = prefill_time.other;
  r.prefill_low = r.prefill_tps * (1 - prefill_band);
  r.prefill_high = r.prefill_tps * (1 + prefill_band);
  r.ttft_seconds = prefill;
  r.step_bytes = step_bytes;
  r.bandwidth_share = r.step_bytes / (p.stream_gbs() * 1e9) / step;
  r.memory = memory_fit(a, w, load, users, memory_available);
  r.decode_overhead_seconds = overhead;
  r.bottleneck = bottleneck_of(r, step);
  return r;
}

Forecast forecast(const Architecture& a, const WeightInventory& w, const std::string& quant, const Hardware& h, const Performance& p,
                  const Workload& load, int devices) {
  if (load.prompt < 1 || load.gen < 1) throw UsageError("--prompt and --gen must be at least 1");
  if (load.prompt + load.gen > a.context) {
    throw UsageError(fmt::format("{} prompt + {} generated tokens exceed {}'s context of {}", load.prompt, load.gen, a.name, a.context));
  }
  Forecast f;
  f.model = a.display;
  f.quant = quant;
  f.hardware = devices > 1 ? fmt::format("{} x {}", devices, h.display) : h.display;
  f.basis = p.basis();
  f.devices = devices;
  f.parameters = static_cast<double>(w.total_parameters());
  f.active_parameters = static_cast<double>(w.active_matrix_parameters(a) + w.embedding_parameters);
  f.weight_bytes = static_cast<double>(w.total_bytes());
  f.bits_per_weight = w.bits_per_weight();
  const double available = h.memory_bytes * devices;
  for (int u : load.users) {
    if (u < 1) throw UsageError("--users must be positive");
    f.rows.push_back(forecast_row(a, w, p, load, u, available));
  }
  f.band = f.rows.empty() ? 0 : f.rows.front().band;
  if (load.target_tps_per_user > 0) {
    const auto meets = [&](int u) {
      const ForecastRow r = forecast_row(a, w, p, load, u, available);
      return r.memory.fits() && r.decode_tps_per_user >= load.target_tps_per_user;
    };
    if (meets(1)) {
      // Per-user speed falls and memory grows with users: double, then bisect.
      int lo = 1;
      int hi = 2;
      while (hi <= 65536 && meets(hi)) {
        lo = hi;
        hi *= 2;
      }
      while (hi - lo > 1) {
        const int mid = lo + (hi - lo) / 2;
        (meets(mid) ? lo : hi) = mid;
      }
      f.max_users_meeting_target = lo;
    } else {
      f.max_users_meeting_target = 0;
    }
  }
  return f;
}

int fewest_devices_holding(const Architecture& a, const WeightInventory& w, const Hardware& h, const Workload& load) {
  if (h.kind == DeviceKind::cpu || load.users.empty()) return 1;
  const int users = *std::max_element(load.users.begin(), load.users.end());
  for (int d : {1, 2, 4, 8}) {
    if (memory_fit(a, w, load, users, h.memory_bytes * d).fits()) return d;
  }
  return 8;
}

double output_error(const WeightInventory& w) {
  std::map<GgmlType, double> params;
  for (const auto& m : w.matrices) params[m.kernel_type()] += static_cast<double>(m.parameters());
  std::vector<GgmlType> types;
  for (const auto& [t, p] : params) types.push_back(t);
  double sum = 0;
  double total = 0;
  for (const auto& q : measure_quality(types)) {
    if (q.weights != "gaussian") continue;
    sum += params[q.type] * q.output_rel_rms * q.output_rel_rms;
    total += params[q.type];
  }
  return total > 0 ? std::sqrt(sum / total) : 0;
}

CostComparison compare_costs(const Forecast& mine, const CostInputs& my_cost, const Forecast& other, const CostInputs& other_cost) {
  const bool my_price = my_cost.hourly_usd || my_cost.purchase_usd;
  const bool other_price = other_cost.hourly_usd || other_cost.purchase_usd;
  CostComparison c;
  for (std::size_t i = 0; i < mine.rows.size() && i < other.rows.size(); ++i) {
    const ForecastRow& a = mine.rows[i];
    const ForecastRow& b = other.rows[i];
    CostComparisonRow row{a.users, a.decode_tps, b.decode_tps, std::nullopt, std::nullopt, std::nullopt, b.memory.fits()};
    if (my_price) row.this_usd_per_mtok = cost_per_million_tokens(my_cost, a.decode_tps);
    if (other_price) row.other_usd_per_mtok = cost_per_million_tokens(other_cost, b.decode_tps);
    if (my_price && other_price) {
      row.benefit_ratio = benefit_ratio(b.decode_tps, a.decode_tps, hourly_cost(other_cost), hourly_cost(my_cost));
      if (!c.other_cheaper_from_users && *row.other_usd_per_mtok < *row.this_usd_per_mtok) c.other_cheaper_from_users = a.users;
    }
    c.rows.push_back(row);
  }
  return c;
}

}  // namespace infercast
