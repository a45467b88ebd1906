#include "model/calibration.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <limits>
#include <stdexcept>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/model.h"
#include "engine/run.h"
#include "kernels/formats.h"
#include "kernels/gemm.h"
#include "kernels/measure.h"
#include "probes/bandwidth.h"
#include "probes/error.h"
#include "probes/stats.h"
#include "probes/units.h"

namespace infercast {
namespace {

// Prefill runs the prompt in steps of at most this many tokens, as `infercast run` does.
constexpr double kPrefillChunk = 512;

// Thread-team starts of one step over `tokens` tokens (every layer's product calls, attention,
// per-token work), as the engine makes them.
double step_calls(const Architecture& a, double tokens, bool logits) {
  const int moe_layers = a.moe_layer_count();
  const double touched = a.is_moe() ? expected_experts_touched(a.moe.experts, a.moe.active, tokens) : 0;
  return parallel_operations(a.layers - moe_layers, moe_layers, tokens, touched, logits);
}

// Least squares over the columns in `use`; false when the normal equations are singular.
template <std::size_t N>
bool solve(const std::vector<std::array<double, N>>& x, const std::vector<double>& y, std::array<bool, N> use,
           std::array<double, N>& out) {
  // Columns are scaled to unit norm so the system is well conditioned.
  std::array<double, N> scale{};
  for (std::size_t j = 0; j < N; ++j) {
    for (const auto& row : x) scale[j] += row[j] * row[j];
    scale[j] = scale[j] > 0 ? std::sqrt(scale[j]) : 1;
  }
  std::array<std::array<double, N + 1>, N> m{};
  for (std::size_t i = 0; i < x.size(); ++i) {
    for (std::size_t r = 0; r < N; ++r) {
      for (std::size_t c = 0; c < N; ++c) m[r][c] += x[i][r] / scale[r] * x[i][c] / scale[c];
      m[r][N] += x[i][r] / scale[r] * y[i];
    }
  }
  for (std::size_t j = 0; j < N; ++j) {
    if (!use[j]) {
      for (std::size_t c = 0; c <= N; ++c) m[j][c] = 0;
      for (std::size_t r = 0; r < N; ++r) m[r][j] = 0;
      m[j][j] = 1;
    }
  }
  for (std::size_t p = 0; p < N; ++p) {
    std::size_t best = p;
    for (std::size_t r = p + 1; r < N; ++r) {
      if (std::abs(m[r][p]) > std::abs(m[best][p])) best = r;
    }
    if (std::abs(m[best][p]) < 1e-12) return false;
    std::swap(m[p], m[best]);
    for (std::size_t r = 0; r < N; ++r) {
      if (r == p) continue;
      const double f = m[r][p] / m[p][p];
      for (std::size_t c = p; c <= N; ++c) m[r][c] -= f * m[p][c];
    }
  }
  for (std::size_t j = 0; j < N; ++j) out[j] = use[j] ? m[j][N] / m[j][j] / scale[j] : 0;
  return true;
}

GgmlType type_from_name(const std::string& name) {
  const auto t = parse_format(name);
  if (!t) throw UsageError(fmt::format("calibration: unknown format '{}'", name));
  return *t;
}

}  // namespace

namespace {

// Linear interpolation of one field over the curve, extended along the last segment.
double interpolate(const std::vector<CurvePoint>& p, double batch, double CurvePoint::*field) {
  if (p.size() == 1 || batch <= p.front().batch) return p.front().*field;
  std::size_t i = 1;
  while (i + 1 < p.size() && p[i].batch < batch) ++i;
  const CurvePoint& lo = p[i - 1];
  const CurvePoint& hi = p[i];
  const double f = (batch - lo.batch) / (hi.batch - lo.batch);
  return std::max(lo.*field + f * (hi.*field - lo.*field), 0.0);
}

const std::vector<CurvePoint>& curve(const Calibration& c, GgmlType type) {
  const auto it = c.curves.find(type);
  if (it == c.curves.end() || it->second.empty()) {
    throw UsageError(fmt::format("the calibration has no {} measurements: run `infercast calibrate` again", format_info(type).name));
  }
  return it->second;
}

}  // namespace

GgmlType Calibration::measured_as(GgmlType type) const {
  if (has(type)) return type;
  std::vector<GgmlType> measured;
  for (const auto& [t, points] : curves) {
    if (!points.empty()) measured.push_back(t);
  }
  const FormatInfo& f = format_info(type);
  return nearest_format(f.block_elems, f.bits_per_weight(), measured).value_or(type);
}

double Calibration::seconds_per_byte(GgmlType type, double batch) const {
  return interpolate(curve(*this, type), batch, &CurvePoint::seconds_per_byte);
}

double Calibration::seconds_per_row(GgmlType type, double batch) const {
  return interpolate(curve(*this, type), batch, &CurvePoint::seconds_per_row);
}

double Calibration::effective_seconds_per_byte(GgmlType type, double batch) const {
  const double rows = 4096;
  const double bytes = rows * static_cast<double>(format_info(type).row_bytes(4096));
  return product_seconds(type, bytes, rows, batch) / bytes;
}

double Calibration::seconds_per_call(GgmlType type, double batch) const {
  return interpolate(curve(*this, type), batch, &CurvePoint::seconds_per_call);
}

double Calibration::curve_read(GgmlType type) const {
  const auto it = curve_read_gbs.find(type);
  return it != curve_read_gbs.end() && it->second > 0 ? it->second : dram_read_gbs;
}

double Calibration::typical_curve_read() const {
  std::vector<double> reads;
  for (const auto& [type, gbs] : curve_read_gbs) {
    if (gbs > 0) reads.push_back(gbs);
  }
  return reads.empty() ? dram_read_gbs : median_of(reads);
}

Calibration Calibration::at_read(double gbs) const {
  if (!(gbs > 0) || !std::isfinite(gbs)) throw UsageError("a calibration can only be scaled to a positive DRAM read");
  Calibration out = *this;
  for (auto& [type, points] : out.curves) {
    const double then = curve_read(type);
    if (!(then > 0)) continue;  // nothing to scale from
    for (auto& p : points) {
      const double memory = std::min(1.0, 1e-9 / then / p.seconds_per_byte);  // the read's share of the time per byte
      p.seconds_per_byte *= 1.0 - memory + memory * then / gbs;
    }
    out.curve_read_gbs[type] = gbs;
  }
  return out;
}

CurvePoint split_point(double batch, ShapeTime long_rows, ShapeTime short_rows, ShapeTime small, const std::string& kernel) {
  const auto rows_long = static_cast<double>(kLongRows[0]);
  const auto rows_short = static_cast<double>(kShortRows[0]);
  const auto rows_small = static_cast<double>(kSmall[0]);
  CurvePoint p{batch, 0, 0, 0, kernel};
  // Long and short rows hold the same bytes: their difference is the per-row work.
  p.seconds_per_row = std::max(0.0, (short_rows.seconds - long_rows.seconds) / (rows_short - rows_long));
  const double big = 0.5 * (long_rows.seconds + short_rows.seconds) - 0.5 * (rows_long + rows_short) * p.seconds_per_row;
  const double little = small.seconds - rows_small * p.seconds_per_row;
  // The big and the small matrix differ in bytes: the slope is streaming, the intercept the call.
  p.seconds_per_byte = (big - little) / (long_rows.bytes - small.bytes);
  p.seconds_per_call = little - small.bytes * p.seconds_per_byte;
  if (p.seconds_per_byte <= 0 || p.seconds_per_call < 0) {
    p.seconds_per_call = 0;
    p.seconds_per_byte = big / long_rows.bytes;
  }
  return p;
}

std::vector<double> measure_curves(Calibration& c, const std::vector<GgmlType>& formats, double min_time,
                                   const CalibrationProgress& progress, std::uint64_t read_bytes) {
  KernelSweepOptions sweep;
  sweep.levels = {active_level()};
  // The batched kernels work in passes (AVX-512: four activation rows; AMX: tiles of sixteen),
  // so their time is a staircase in the batch. Sampled at the steps' edges, straight lines
  // between the points follow it; sampled at 3 and 6, a 4-user step came out a pass too slow
  // (every C=4 forecast 10-20% low in validation).
  sweep.batches = {1, 2, 4, 8, 16, 64, 256};
  sweep.shapes = {{kLongRows[0], kLongRows[1]}, {kShortRows[0], kShortRows[1]}, {kSmall[0], kSmall[1]}};
  sweep.threads = c.threads;
  sweep.min_time = min_time;
  sweep.footprint_bytes = c.footprint_bytes;
  Ceilings ceilings;
  ceilings.dram_read_gbs = c.dram_read_gbs;
  std::vector<double> cvs;
  std::vector<double> reads;
  const double share = 1.0 / static_cast<double>(std::max<std::size_t>(formats.size(), 1));
  for (std::size_t i = 0; i < formats.size(); ++i) {
    const GgmlType t = formats[i];
    // One format at a time between two reads: the read its curve stands for (see curve_read_gbs).
    const double before = measure_dram_read_gbs(c.threads, active_level(), read_bytes);
    sweep.formats = {t};
    const auto points = run_kernel_sweep(sweep, ceilings, [&](const std::string& what, double f) {
      if (progress) progress(what, share * (static_cast<double>(i) + f));
    });
    const double after = measure_dram_read_gbs(c.threads, active_level(), read_bytes);
    c.curve_read_gbs[t] = 0.5 * (before + after);
    reads.push_back(before);
    reads.push_back(after);
    auto& list = c.curves[t];
    list.clear();
    for (const auto& p : points) {
      cvs.push_back(p.cv);
      if (p.shape.rows != kLongRows[0]) continue;
      const auto at = [&](std::size_t rows) {
        for (const auto& q : points) {
          if (q.batch == p.batch && q.shape.rows == rows) return ShapeTime{static_cast<double>(q.weight_bytes), q.seconds};
        }
        throw std::logic_error("sweep point missing");
      };
      list.push_back(split_point(static_cast<double>(p.batch), at(kLongRows[0]), at(kShortRows[0]), at(kSmall[0]), p.kernel));
    }
    std::sort(list.begin(), list.end(), [](const CurvePoint& a, const CurvePoint& b) { return a.batch < b.batch; });
  }
  c.sweep_cv = median_of(cvs);
  return reads;
}

std::vector<StaleCurve> stale_curves(const Calibration& c, const std::vector<GgmlType>& formats) {
  // Kernel choice depends on the level, the format, the batch, the row length and the layout,
  // not on the threads: one thread spares a pool.
  const GemmContext ctx(1, active_level());
  const auto add_once = [](std::vector<std::string>& v, const std::string& s) {
    if (std::find(v.begin(), v.end(), s) == v.end()) v.push_back(s);
  };
  std::vector<StaleCurve> out;
  for (GgmlType type : formats) {
    const auto it = c.curves.find(type);
    if (it == c.curves.end()) continue;
    StaleCurve s{type, {}, {}};
    bool differs = false;
    for (const auto& p : it->second) {
      if (p.kernel.empty()) continue;
      const std::string now(ctx.kernel_name(type, static_cast<std::size_t>(p.batch), kLongRows[1], ctx.preferred_layout(type)));
      differs = differs || now != p.kernel;
      add_once(s.measured, p.kernel);
      add_once(s.current, now);
    }
    if (differs) out.push_back(std::move(s));
  }
  return out;
}

double Calibration::relative_band(double matrix_seconds, double other_seconds, double memory_seconds) const {
  const double total = matrix_seconds + other_seconds;
  if (!(total > 0)) return 0.05;
  const double fit = engine ? engine->residual : 0.0;
  const double m = matrix_seconds * matrix_residual / total;
  const double o = other_seconds * fit / total;
  const double r = std::clamp(memory_seconds, 0.0, total) * read_cv / total;
  return std::max(0.05, 2.0 * std::sqrt(m * m + o * o + r * r + sweep_cv * sweep_cv));
}

StepWork decode_work(const Architecture& a, double batch, double context, double kv_element_bytes) {
  StepWork w;
  w.calls = step_calls(a, batch, true);
  w.token_layer_dims = batch * a.layers * a.dim;
  w.decode_attention_ops = batch * attention_ops_per_token(a, context);
  w.decode_kv_bytes = batch * context * static_cast<double>(kv_bytes_per_token(a, 1)) * kv_element_bytes;
  w.decode = true;
  w.context = context;
  w.routed_row_dims = batch * a.moe_layer_count() * a.moe.active * a.dim;
  return w;
}

StepWork prefill_work(const Architecture& a, double tokens) {
  StepWork w;
  for (double begin = 0; begin < tokens; begin += kPrefillChunk) {
    const double n = std::min(kPrefillChunk, tokens - begin);
    w.calls += step_calls(a, n, begin + n >= tokens);
  }
  w.token_layer_dims = tokens * a.layers * a.dim;
  w.attention_ops = attention_ops_per_token(a, 1.0) * tokens * (tokens + 1) / 2;
  w.routed_row_dims = tokens * a.moe_layer_count() * a.moe.active * a.dim;
  return w;
}

double matrix_seconds(const Calibration& c, const Architecture& a, const WeightInventory& w, double batch, double output_batch) {
  const double touched = a.is_moe() ? expected_experts_touched(a.moe.experts, a.moe.active, batch) : 0;
  double s = 0;
  for (const auto& m : w.matrices) {
    const GgmlType type = c.measured_as(m.kernel_type());
    if (m.role == MatrixRole::expert) {
      if (!(touched > 0)) continue;
      const double per_expert = batch * a.moe.active / touched;
      s += touched * c.product_seconds(type, static_cast<double>(m.bytes_per_copy()), static_cast<double>(m.rows), per_expert, 0);
      // Every touched expert's gate and up share one call, their down another: one start of
      // the threads (the per-call time at batch 1) and each expert's packing of its rows (what
      // the per-call time grows by with the batch).
      if (!shares_product_call(m)) {
        const double start = c.seconds_per_call(type, 1);
        s += start + touched * std::max(0.0, c.seconds_per_call(type, per_expert) - start);
      }
    } else if (m.role == MatrixRole::output) {
      if (output_batch > 0) s += c.product_seconds(type, static_cast<double>(m.bytes()), static_cast<double>(m.rows), output_batch);
    } else {
      const double calls = shares_product_call(m) ? 0.0 : 1.0;
      s += c.product_seconds(type, static_cast<double>(m.bytes()), static_cast<double>(m.rows), batch, calls);
    }
  }
  return s;
}

double prefill_matrix_seconds(const Calibration& c, const Architecture& a, const WeightInventory& w, double tokens) {
  double s = 0;
  for (double begin = 0; begin < tokens; begin += kPrefillChunk) {
    const double n = std::min(kPrefillChunk, tokens - begin);
    s += matrix_seconds(c, a, w, n, begin + n >= tokens ? 1.0 : 0.0);
  }
  return s;
}

double curve_matrix_residual(const std::vector<CalibrationRun>& runs) {
  double squares = 0;
  int count = 0;
  const auto add = [&](double curve, double engine) {
    if (!(curve > 0) || !(engine > 0)) return;
    squares += (curve / engine - 1) * (curve / engine - 1);
    ++count;
  };
  for (const auto& r : runs) {
    add(r.decode_curve_seconds_per_step, r.decode_gemm_seconds_per_step);
    add(r.prefill_curve_seconds_per_sequence, r.prefill_gemm_seconds_per_sequence);
  }
  return count > 0 ? std::sqrt(squares / count) : 0;
}

EngineOverheads fit_overheads(const std::vector<OverheadObservation>& observations) {
  constexpr std::size_t kColumns = 5;
  const auto row = [](const StepWork& w) {
    return std::array<double, kColumns>{w.calls, w.token_layer_dims, w.attention_ops, w.decode_kv_bytes, w.routed_row_dims};
  };
  // Each observation weighted by its measured time: the squares minimized are relative errors,
  // as the fit is judged. Unweighted, a prefill's tenth of a second outweighed every decode
  // step's milliseconds and the decode overheads came out 40% wrong.
  std::vector<std::array<double, kColumns>> x;
  std::vector<double> y;
  for (const auto& o : observations) {
    const double weight = o.measured_seconds > 0 ? 1.0 / o.measured_seconds : 1.0;
    auto r = row(o.work);
    for (double& v : r) v *= weight;
    x.push_back(r);
    y.push_back((o.measured_seconds - o.matrix_seconds) * weight);
  }
  // Non-negative least squares by trying every subset of columns (five columns, 32 subsets) and
  // keeping the best fit whose coefficients are all non-negative. Without a MoE observation the
  // routed-row column is all zeros, its subsets singular, and its coefficient stays 0.
  EngineOverheads best;
  double best_error = std::numeric_limits<double>::infinity();
  for (unsigned mask = 0; mask < (1U << kColumns); ++mask) {
    std::array<bool, kColumns> use{};
    for (std::size_t j = 0; j < kColumns; ++j) use[j] = (mask >> j & 1U) != 0;
    std::array<double, kColumns> coef{};
    if (!solve(x, y, use, coef)) continue;
    if (std::any_of(coef.begin(), coef.end(), [](double v) { return v < 0; })) continue;
    const EngineOverheads candidate{coef[0], coef[1], coef[2], coef[3], 0, true, coef[4], true};
    double error = 0;
    for (const auto& o : observations) {
      const double rel = (o.matrix_seconds + candidate.seconds(o.work) - o.measured_seconds) / o.measured_seconds;
      error += rel * rel;
    }
    if (error < best_error) {
      best_error = error;
      best = candidate;
      best.residual = std::sqrt(error / static_cast<double>(x.size()));
    }
  }
  return best;
}

nlohmann::json to_json(const Calibration& c) {
  nlohmann::json curves = nlohmann::json::object();
  for (const auto& [type, points] : c.curves) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& p : points) {
      list.push_back({{"batch", p.batch}, {"seconds_per_byte", p.seconds_per_byte}, {"seconds_per_row", p.seconds_per_row},
                      {"seconds_per_call", p.seconds_per_call}, {"kernel", p.kernel}});
    }
    curves[std::string(format_info(type).name)] = list;
  }
  nlohmann::json core = nlohmann::json::object();
  for (const auto& [type, gbs] : c.core_gbs) core[std::string(format_info(type).name)] = gbs;
  nlohmann::json reads = nlohmann::json::object();
  for (const auto& [type, gbs] : c.curve_read_gbs) reads[std::string(format_info(type).name)] = gbs;
  nlohmann::json runs = nlohmann::json::array();
  for (const auto& r : c.runs) {
    runs.push_back({{"model", r.model}, {"quant", r.quant}, {"concurrency", r.concurrency}, {"prompt", r.prompt}, {"gen", r.gen},
                    {"prefill_seconds_per_sequence", r.prefill_seconds_per_sequence},
                    {"decode_seconds_per_step", r.decode_seconds_per_step},
                    {"prefill_gemm_seconds_per_sequence", r.prefill_gemm_seconds_per_sequence},
                    {"decode_gemm_seconds_per_step", r.decode_gemm_seconds_per_step},
                    {"prefill_curve_seconds_per_sequence", r.prefill_curve_seconds_per_sequence},
                    {"decode_curve_seconds_per_step", r.decode_curve_seconds_per_step}});
  }
  nlohmann::json j = {{"schema", "infercast.calibration/1"}, {"measured_at", c.measured_at}, {"threads", c.threads},
                      {"dram_read_gbs", c.dram_read_gbs}, {"sweep_cv", c.sweep_cv}, {"read_cv", c.read_cv}, {"footprint_bytes", c.footprint_bytes},
                      {"matrix_residual", c.matrix_residual}, {"curves", curves}, {"curve_read_gbs", reads}, {"core_gbs", core}, {"runs", runs}};
  if (c.engine) {
    j["engine"] = {{"seconds_per_call", c.engine->seconds_per_call},
                   {"seconds_per_token_layer_dim", c.engine->seconds_per_token_layer_dim},
                   {"seconds_per_attention_op", c.engine->seconds_per_attention_op},
                   {"residual", c.engine->residual}};
    if (c.engine->decode_attention_fitted) j["engine"]["seconds_per_decode_kv_byte"] = c.engine->seconds_per_decode_kv_byte;
    if (c.engine->routed_rows_fitted) j["engine"]["seconds_per_routed_row_dim"] = c.engine->seconds_per_routed_row_dim;
  }
  return j;
}

Calibration calibration_from_json(const nlohmann::json& j) {
  try {
    if (!j.is_object() || j.value("schema", "") != "infercast.calibration/1") throw UsageError("not an infercast.calibration/1 section");
    Calibration c;
    c.measured_at = j.value("measured_at", "");
    c.threads = j.at("threads").get<unsigned>();
    c.dram_read_gbs = j.at("dram_read_gbs").get<double>();
    c.sweep_cv = j.value("sweep_cv", 0.0);
    c.read_cv = j.value("read_cv", 0.0);
    if (!(c.read_cv >= 0) || !std::isfinite(c.read_cv)) throw UsageError("read_cv is not a non-negative number");
    c.footprint_bytes = j.value("footprint_bytes", std::uint64_t{0});
    c.matrix_residual = j.value("matrix_residual", 0.0);
    for (const auto& [name, points] : j.at("curves").items()) {
      auto& list = c.curves[type_from_name(name)];
      for (const auto& p : points) {
        list.push_back({p.at("batch").get<double>(), p.at("seconds_per_byte").get<double>(), p.value("seconds_per_row", 0.0),
                        p.value("seconds_per_call", 0.0), p.value("kernel", "")});
      }
      std::sort(list.begin(), list.end(), [](const CurvePoint& a, const CurvePoint& b) { return a.batch < b.batch; });
      if (list.empty()) throw UsageError(fmt::format("curve {} is empty", name));
      for (const auto& p : list) {
        // A batch beyond any sweep's would not even convert to a row count (stale_curves asks
        // the dispatch about each point's batch).
        if (!(p.batch >= 1 && p.batch <= kMaxCurveBatch) || !(p.seconds_per_byte > 0) || p.seconds_per_row < 0 ||
            p.seconds_per_call < 0) {
          throw UsageError(fmt::format("curve {} has a point with a batch outside 1-{} or no positive time", name, kMaxCurveBatch));
        }
      }
    }
    // Named copies: a range-for over a temporary's items() would read a destroyed object.
    const nlohmann::json core = j.value("core_gbs", nlohmann::json::object());
    for (const auto& [name, gbs] : core.items()) c.core_gbs[type_from_name(name)] = gbs.get<double>();
    const nlohmann::json reads = j.value("curve_read_gbs", nlohmann::json::object());
    for (const auto& [name, gbs] : reads.items()) {
      const double v = gbs.get<double>();
      if (!(v > 0)) throw UsageError(fmt::format("curve_read_gbs of {} is not positive", name));
      c.curve_read_gbs[type_from_name(name)] = v;
    }
    const nlohmann::json runs = j.value("runs", nlohmann::json::array());
    for (const auto& r : runs) {
      c.runs.push_back({r.at("model").get<std::string>(), r.at("quant").get<std::string>(), r.at("concurrency").get<int>(),
                        r.at("prompt").get<int>(), r.at("gen").get<int>(), r.at("prefill_seconds_per_sequence").get<double>(),
                        r.at("decode_seconds_per_step").get<double>(), r.value("prefill_gemm_seconds_per_sequence", 0.0),
                        r.value("decode_gemm_seconds_per_step", 0.0), r.value("prefill_curve_seconds_per_sequence", 0.0),
                        r.value("decode_curve_seconds_per_step", 0.0)});
    }
    if (j.contains("engine")) {
      const auto& e = j.at("engine");
      const bool fitted = e.contains("seconds_per_decode_kv_byte");
      c.engine = EngineOverheads{e.at("seconds_per_call").get<double>(),
                                 e.at("seconds_per_token_layer_dim").get<double>(),
                                 e.at("seconds_per_attention_op").get<double>(),
                                 fitted ? e.at("seconds_per_decode_kv_byte").get<double>() : 0.0,
                                 e.value("residual", 0.0),
                                 fitted,
                                 e.value("seconds_per_routed_row_dim", 0.0),
                                 e.contains("seconds_per_routed_row_dim")};
      const auto& o = *c.engine;
      if (o.seconds_per_call < 0 || o.seconds_per_token_layer_dim < 0 || o.seconds_per_attention_op < 0 ||
          o.seconds_per_decode_kv_byte < 0 || o.seconds_per_routed_row_dim < 0) {
        throw UsageError("an engine overhead is negative");
      }
    }
    return c;
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(fmt::format("the profile's calibration section is malformed ({})", e.what()));
  } catch (const UsageError& e) {
    throw UsageError(fmt::format("the profile's calibration section is malformed: {}", e.what()));
  }
}

const CalibrationPlan& calibration_plan() {
  // Models no `validate` size matches, in formats and at concurrencies `validate` does not use,
  // with prompts of other lengths: the overheads are fitted apart from what is judged. Three
  // concurrencies and prompt lengths, so the five overheads (per team start, per token, per
  // routed row, per prefill attention operation, per KV byte a decode step reads) are not
  // fitted to as many configurations. The MoE model (20 experts, 4 active: neither validate
  // MoE model's routing) is what the routed-row term is seen on; one format is enough, as a
  // routed row's work is on float activations.
  static const CalibrationPlan kPlan = [] {
    ModelShape moe = llama_shape(12, 1536, 768, 12, 4, 32000);
    moe.experts = 20;
    moe.active_experts = 4;
    return CalibrationPlan{{{"calibration-0.94b", llama_shape(14, 2304, 6144, 18, 6, 32000), {"F16", "Q6_K"}},
                            {"calibration-moe-1b", moe, {"Q6_K"}}},
                           {3, 6, 8},
                           {64, 128, 256},
                           24};
  }();
  return kPlan;
}

namespace {

// Records one calibration run and the two observations (its decode steps, its prompts) the
// overheads are fitted to.
void observations_of_run(Calibration& c, const Architecture& arch, const WeightInventory& inv, const std::string& model,
                         const std::string& quant, const RunReport& rep, const RunOptions& r,
                         std::vector<OverheadObservation>& observations) {
  const double steps = r.gen_tokens - 1;
  CalibrationRun run{model,
                     quant,
                     r.concurrency,
                     r.prompt_tokens,
                     r.gen_tokens,
                     rep.prefill_seconds / r.concurrency,
                     rep.decode_seconds / steps,
                     rep.prefill_gemm_seconds / r.concurrency,
                     rep.decode_gemm_seconds / steps,
                     prefill_matrix_seconds(c, arch, inv, r.prompt_tokens),
                     matrix_seconds(c, arch, inv, r.concurrency, r.concurrency)};
  c.runs.push_back(run);
  // The overheads are fitted to what the engine measured outside its matrix products, not to
  // the difference from a prediction: a kernel-model error must not leak into them.
  const double context = r.prompt_tokens + r.gen_tokens / 2.0;
  observations.push_back({run.decode_seconds_per_step - run.decode_gemm_seconds_per_step, 0.0, decode_work(arch, r.concurrency, context)});
  observations.push_back({run.prefill_seconds_per_sequence - run.prefill_gemm_seconds_per_sequence, 0.0, prefill_work(arch, r.prompt_tokens)});
}

}  // namespace

Calibration calibrate(const CalibrationOptions& o, double dram_read_gbs, const CalibrationProgress& progress) {
  const auto report = [&](const std::string& what, double f) {
    if (progress) progress(what, f);
  };
  // The calibration model is written there after minutes of kernel sweeps: refuse a directory
  // that cannot be made before any of them.
  if (o.engine) {
    std::error_code ec;
    std::filesystem::create_directories(o.work_dir, ec);
    if (ec || !std::filesystem::is_directory(o.work_dir)) {
      throw UsageError(fmt::format("--work-dir '{}' is not a directory this process can create: {}", o.work_dir,
                                   ec ? ec.message() : "a file is in the way"));
    }
  }
  Calibration c;
  c.measured_at = utc_timestamp();
  c.threads = o.threads;
  c.dram_read_gbs = dram_read_gbs;
  c.footprint_bytes = o.footprint_bytes;

  // 1. The kernel sweep: every weight format, weights from DRAM.
  const double sweep_share = o.engine ? 0.45 : 0.9;
  const std::vector<double> reads = measure_curves(c, {weight_formats().begin(), weight_formats().end()}, o.min_time,
                                                   [&](const std::string& what, double f) { report("kernels " + what, sweep_share * f); });
  c.read_cv = reads.size() > 1 ? summarize_rates(reads).cv : 0.0;
  // Every curve to one read, the median of those around the formats' sweeps: formats measured
  // a minute apart on a drifting host then compare as they would at one moment.
  c = c.at_read(c.typical_curve_read());

  // 2. One core, weights in cache: the decode rate compute alone allows.
  Ceilings ceilings;
  ceilings.dram_read_gbs = dram_read_gbs;
  KernelSweepOptions core;
  core.formats.assign(weight_formats().begin(), weight_formats().end());
  core.levels = {active_level()};
  core.min_time = o.min_time;
  core.threads = 1;
  core.batches = {1};
  core.shapes = {{256, 4096}};
  core.footprint_bytes = 1U << 20;
  for (const auto& p : run_kernel_sweep(core, ceilings, [&](const std::string& what, double f) { report("one core " + what, sweep_share + 0.1 * f); })) {
    c.core_gbs[p.type] = p.weight_gbs;
  }
  if (!o.engine) return c;

  // 3. The engine on the calibration models.
  const CalibrationPlan& plan = calibration_plan();
  std::vector<OverheadObservation> observations;
  double runs = 0;
  for (const auto& m : plan.models) runs += static_cast<double>(2 * m.quants.size() * plan.concurrencies.size());
  double done = 0;
  for (const auto& cm : plan.models) {
    for (const auto& quant : cm.quants) {
      const std::string path = (std::filesystem::path(o.work_dir) / fmt::format("{}-{}.gguf", cm.name, quant)).string();
      report(fmt::format("generating {} {}", cm.name, quant), 0.55 + 0.45 * done / runs);
      generate_model({.shape = cm.shape, .quant = quant, .seed = o.seed, .threads = o.threads}, path);
      {
        const Model model = Model::load(path);
        const Architecture arch = architecture_from_gguf(model.file(), cm.name);
        const WeightInventory inv = weight_inventory(model.file(), arch);
        // Each configuration twice: both runs enter the fit, so one noisy run weighs half.
        for (std::size_t i = 0; i < 2 * plan.concurrencies.size(); ++i) {
          RunOptions r;
          r.threads = o.threads;
          r.concurrency = plan.concurrencies[i % plan.concurrencies.size()];
          r.prompt_tokens = plan.prompts[i % plan.prompts.size()];
          r.gen_tokens = plan.gen;
          report(fmt::format("running {} {} C={}", cm.name, quant, r.concurrency), 0.55 + 0.45 * done / runs);
          observations_of_run(c, arch, inv, cm.name, quant, run_model(model, r, nullptr), r, observations);
          done += 1;
        }
      }
      std::filesystem::remove(path);
    }
  }
  c.engine = fit_overheads(observations);
  c.matrix_residual = curve_matrix_residual(c.runs);
  report("done", 1.0);
  return c;
}

}  // namespace infercast
