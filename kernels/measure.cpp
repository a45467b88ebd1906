#include "kernels/measure.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>

#include "kernels/formats.h"
#include "kernels/gemm.h"
#include "probes/bandwidth.h"
#include "probes/error.h"
#include "probes/memory.h"
#include "probes/random.h"
#include "probes/stats.h"
#include "probes/timer.h"
#include "probes/topology.h"
#include "probes/units.h"

namespace infercast {
namespace {

std::optional<double> number_at(const nlohmann::json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_number()) return std::nullopt;
  return j[key].get<double>();
}

std::vector<float> gaussian_vector(std::size_t n, std::uint64_t seed, float sigma) {
  SeededRng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = sigma * rng.gaussian();
  return v;
}

// Weights for one (format, shape): `copies` matrices back to back, so a pass over them all
// streams from DRAM. Rows repeat a few dozen distinct quantized rows: what matters to the
// kernels is the bytes they stream, not the values.
struct WeightSet {
  PageBuffer buffer;
  std::size_t matrix_bytes = 0;
  std::size_t copies = 0;
  WeightLayout layout = WeightLayout::gguf;
  bool warmed = false;  // its warm-up passes have run

  [[nodiscard]] WeightView matrix(GgmlType type, Shape shape, std::size_t c) const {
    WeightView v = make_weight_view(type, buffer.as<std::uint8_t>() + c * matrix_bytes, shape.rows, shape.cols);
    v.layout = layout;
    return v;
  }
};

WeightSet make_weights(GgmlType type, Shape shape, std::size_t footprint, WeightLayout layout) {
  const auto& f = format_info(type);
  const std::size_t row_bytes = f.row_bytes(shape.cols);
  WeightSet set;
  set.matrix_bytes = row_bytes * shape.rows;
  set.copies = std::max<std::size_t>(1, (footprint + set.matrix_bytes - 1) / set.matrix_bytes);
  set.buffer = PageBuffer(set.matrix_bytes * set.copies);
  constexpr std::size_t kDistinct = 61;
  const std::vector<float> src = gaussian_vector(kDistinct * shape.cols, 42, 0.02F);
  std::vector<std::uint8_t> rows(kDistinct * row_bytes);
  for (std::size_t r = 0; r < kDistinct; ++r) f.quantize(src.data() + r * shape.cols, rows.data() + r * row_bytes, shape.cols);
  auto* out = set.buffer.as<std::uint8_t>();
  for (std::size_t r = 0; r < shape.rows * set.copies; ++r) std::memcpy(out + r * row_bytes, rows.data() + (r % kDistinct) * row_bytes, row_bytes);
  for (std::size_t c = 0; c < set.copies; ++c) set.layout = relayout(set.matrix(type, shape, c), out + c * set.matrix_bytes, layout).layout;
  return set;
}

}  // namespace

std::size_t default_footprint() { return static_cast<std::size_t>(dram_working_set(host_topology(), 4)); }

namespace {

// Where the profile's read curves reach DRAM: the largest whole working set (bytes per thread
// times threads) from which any thread count's read sat on its DRAM plateau. A last-level cache
// that keeps serving part of a set shows here, not in the load latency.
std::optional<double> read_plateau_bytes(const nlohmann::json& profile) {
  if (!profile.contains("bandwidth") || !profile["bandwidth"].is_object()) return std::nullopt;
  const auto& by_threads =
      profile["bandwidth"].value("read_plateaus_by_threads", nlohmann::json::object());
  if (!by_threads.is_object()) return std::nullopt;
  std::optional<double> largest;
  for (const auto& [threads, plateaus] : by_threads.items()) {
    const double n = std::strtod(threads.c_str(), nullptr);
    if (!(n >= 1 && n <= 65536) || !plateaus.is_array()) continue;
    for (const auto& p : plateaus) {
      if (!p.is_object() || p.value("level", nlohmann::json()) != "DRAM") continue;
      const auto from = number_at(p, "from_bytes");
      if (from && *from > 0 && *from < 1e18) largest = std::max(largest.value_or(0.0), *from * n);
    }
  }
  return largest;
}

}  // namespace

std::size_t footprint_from_profile(const nlohmann::json& profile) {
  return footprint_from_profile(profile, default_footprint());
}

std::size_t footprint_from_profile(const nlohmann::json& profile, std::size_t fallback) {
  if (!profile.is_object()) return fallback;
  std::optional<double> from;  // where the latency reached DRAM
  if (profile.contains("latency") && profile["latency"].is_object()) {
    const auto& plateaus = profile["latency"].value("plateaus", nlohmann::json::array());
    for (const auto& p : plateaus.is_array() ? plateaus : nlohmann::json::array()) {
      if (!p.is_object() || !p.contains("level") || !p["level"].is_string() ||
          p["level"].get<std::string>() != "DRAM")
        continue;
      from = number_at(p, "from_bytes");
      if (!from || !(*from > 0) || *from > 1e18)
        throw UsageError(
            "the profile's DRAM latency plateau has no positive size "
            "(latency.plateaus[].from_bytes)");
      break;
    }
  }
  const std::optional<double> read_from = read_plateau_bytes(profile);
  if (!from && !read_from) return fallback;
  const double twice = 2 * std::max(from.value_or(0.0), read_from.value_or(0.0));
  // Never below the floor, unless memory is too short for the floor (then the fallback is).
  const std::size_t floor = std::min<std::size_t>(kDramFloorBytes, fallback);
  return std::clamp(static_cast<std::size_t>(std::min(twice, 1e18)), floor, fallback);
}

Ceilings ceilings_from_profile(const nlohmann::json& profile) {
  if (!profile.is_object() || !profile.contains("summary") || !profile["summary"].is_object()) {
    throw UsageError("profile has no summary: write one with `infercast probe --out FILE`");
  }
  const auto& s = profile["summary"];
  const auto dram = number_at(s, "dram_read_gbs");
  if (!dram || *dram <= 0) throw UsageError("profile has no DRAM read bandwidth (summary.dram_read_gbs)");
  Ceilings c{*dram,
             number_at(s, "peak_fp32_gflops"),
             number_at(s, "peak_bf16_gflops"),
             number_at(s, "peak_int8_vnni_gops"),
             number_at(s, "peak_int8_avx2_gops"),
             number_at(s, "peak_amx_int8_gops"),
             number_at(s, "peak_amx_bf16_gflops"),
             number_at(s, "peak_fp32_avx2_gflops")};
  // Which width the summary's peaks were measured at: the probe lists its compute kernels. A
  // profile without that list keeps the assumption that they are AVX-512's.
  const auto& compute = profile.value("compute", nlohmann::json::object());
  const auto& peaks = compute.is_object() ? compute.value("peaks", nlohmann::json::array()) : nlohmann::json::array();
  if (peaks.is_array() && !peaks.empty()) {
    const auto measured = [&](const char* kernel) {
      return std::any_of(peaks.begin(), peaks.end(), [&](const nlohmann::json& p) {
        return p.is_object() && p.contains("kernel") && p["kernel"].is_string() && p["kernel"].get<std::string>() == kernel;
      });
    };
    c.fp32_is_avx512 = measured("fp32_fma_avx512");
    c.int8_vnni_is_avx512 = measured("int8_vnni_avx512");
  }
  return c;
}

std::optional<ComputeFamily> compute_family(GgmlType type, std::string_view kernel) {
  const bool integer = format_info(type).activation != GgmlType::f32;
  if (kernel == "amx_int8") return ComputeFamily::amx_int8;
  if (kernel == "amx_bf16") return ComputeFamily::amx_bf16;
  if (kernel.starts_with("avx512_bf16")) return ComputeFamily::bf16;
  // The AVX-512 and AVX2 tables carry one name for all formats ("avx512_vnni" names the float
  // kernels of a VNNI machine too), so the format decides.
  if (kernel.starts_with("avx512") || kernel.starts_with("avx2")) return integer ? ComputeFamily::vector_int8 : ComputeFamily::fp32;
  return std::nullopt;
}

// The probe's FP32 and VNNI peaks are its widest vectors' (AVX-512 where there is any). An AVX2
// float kernel gets the 256-bit FMA peak the probe measured, or else half the 512-bit one (same
// ports, half the width: true of Intel's 512-bit units, not of Zen 4's split ones); AVX2
// kernels without VNNI get the measured vpmaddubsw peak.
std::optional<double> compute_ceiling(const Ceilings& c, GgmlType type, std::string_view kernel) {
  const auto family = compute_family(type, kernel);
  if (!family) return std::nullopt;
  const bool avx2 = kernel.starts_with("avx2");
  const auto halve = [](std::optional<double> v) { return v ? std::optional<double>(*v / 2) : std::nullopt; };
  switch (*family) {
    case ComputeFamily::amx_int8: return c.amx_int8_gops;
    case ComputeFamily::amx_bf16: return c.amx_bf16_gflops;
    case ComputeFamily::bf16: return c.bf16_gflops;
    case ComputeFamily::fp32:
      if (avx2 && c.fp32_avx2_gflops) return c.fp32_avx2_gflops;
      return avx2 && c.fp32_is_avx512 ? halve(c.fp32_gflops) : c.fp32_gflops;
    case ComputeFamily::vector_int8:
      if (!avx2) return c.int8_vnni_gops;
      if (kernel.starts_with("avx2_vnni")) return c.int8_vnni_is_avx512 ? halve(c.int8_vnni_gops) : c.int8_vnni_gops;
      return c.int8_avx2_gops ? c.int8_avx2_gops : halve(c.int8_vnni_gops);
  }
  return std::nullopt;
}

Shape parse_shape(const std::string& text) {
  const auto x = text.find_first_of("xX");
  try {
    if (x != std::string::npos) {
      std::size_t used_rows = 0;
      std::size_t used_cols = 0;
      const auto rows = std::stoull(text.substr(0, x), &used_rows);
      const auto cols = std::stoull(text.substr(x + 1), &used_cols);
      if (used_rows == x && used_cols == text.size() - x - 1 && rows > 0 && cols > 0) return Shape{rows, cols};
    }
  } catch (const std::exception&) {
  }
  throw UsageError(fmt::format("shape '{}' is not ROWSxCOLS (e.g. 4096x14336)", text));
}

std::vector<Shape> default_shapes() { return {{4096, 4096}, {14336, 4096}, {4096, 14336}}; }
std::vector<std::size_t> default_batches() { return {1, 2, 4, 8, 16, 32, 64}; }

namespace {

// Untimed passes over a newly made weight set before its first point (at most; short sweeps,
// the tests', warm up for five of their points).
constexpr double kWarmUpSeconds = 0.5;

// One point's timed passes at the sweep's minimum time (after a warm-up pass, and the set's
// warm-up when its weights are new): each pass streams every copy once.
std::vector<double> time_passes(GemmContext& ctx, WeightSet& w, GgmlType type, Shape shape, const float* x,
                                std::size_t batch, float* y, const KernelSweepOptions& o) {
  const auto pass = [&] {
    const double t0 = now_seconds();
    for (std::size_t c = 0; c < w.copies; ++c) ctx.gemm(w.matrix(type, shape, c), x, batch, y);
    return (now_seconds() - t0) / static_cast<double>(w.copies);
  };
  pass();  // warm-up: page tables, scratch buffers, clocks
  if (!w.warmed) {
    // Weights just written run slow for a while on some hosts: on a KVM guest, 3 of 4
    // fresh processes measured F16 GEMV at half its rate (23-26 against 46-51 GB/s)
    // for their first 0.3-0.5 s, a burst no single pass absorbs; half a second of
    // passes first, 0 of 4 (docs/PERFORMANCE.md, twenty-sixth session).
    const double warm_until = now_seconds() + std::min(kWarmUpSeconds, 5 * o.min_time);
    while (now_seconds() < warm_until) pass();
    w.warmed = true;
  }
  std::vector<double> times;
  const double start = now_seconds();
  while (times.size() < static_cast<std::size_t>(o.min_passes) || now_seconds() - start < o.min_time) {
    times.push_back(pass());
    if (times.size() >= 3 && now_seconds() - start > 10 * o.min_time) break;  // slow kernels: enough
  }
  return times;
}

}  // namespace

void validate_sweep(const KernelSweepOptions& o) {
  if (o.formats.empty()) throw UsageError("no formats to measure");
  if (o.batches.empty() || o.shapes.empty()) throw UsageError("no batches or shapes to measure");
  if (o.rounds < 1 || o.rounds > kMaxRounds) throw UsageError(fmt::format("--rounds must be between 1 and {}", kMaxRounds));
  const Topology& topo = host_topology();
  if (o.threads == 0 || o.threads > topo.cores) {
    throw UsageError(fmt::format("--threads must be between 1 and {} (the physical cores)", topo.cores));
  }
  for (IsaLevel l : o.levels) {
    if (l > max_supported_level(host_cpu())) {
      throw UsageError(fmt::format("this machine cannot run the {} kernels", to_string(l)));
    }
  }
  for (std::size_t b : o.batches) {
    if (b == 0 || b > 4096) throw UsageError(fmt::format("batch {} is outside 1..4096", b));
  }
  std::size_t largest = 0;
  for (const Shape& s : o.shapes) {
    for (GgmlType t : o.formats) {
      const auto& f = format_info(t);
      if (s.cols % static_cast<std::size_t>(f.block_elems) != 0) {
        throw UsageError(fmt::format("{} needs columns in multiples of {}; shape {}x{} has {}", f.name, f.block_elems,
                                     s.rows, s.cols, s.cols));
      }
      largest = std::max(largest, f.row_bytes(s.cols) * s.rows);
    }
  }
  const std::size_t footprint = std::max(o.footprint_bytes != 0 ? o.footprint_bytes : default_footprint(), largest);
  if (footprint > topo.available_memory_bytes / 2) {
    throw UsageError(fmt::format("the weights need {} but only {} of memory is available",
                                 format_size(footprint), format_size(topo.available_memory_bytes)));
  }
}

std::vector<KernelPoint> run_kernel_sweep(const KernelSweepOptions& o, const Ceilings& ceilings,
                                          const KernelProgress& progress) {
  validate_sweep(o);
  const std::size_t footprint = o.footprint_bytes != 0 ? o.footprint_bytes : default_footprint();
  const std::size_t max_batch = *std::max_element(o.batches.begin(), o.batches.end());
  std::vector<std::unique_ptr<GemmContext>> contexts;
  for (IsaLevel l : o.levels) contexts.push_back(std::make_unique<GemmContext>(o.threads, l));
  // The scalar reference is there to be measured as GEMV; batched it would take minutes.
  const auto skipped = [&](std::size_t li, std::size_t batch) { return o.levels[li] == IsaLevel::scalar && batch > 1; };

  const auto rounds = static_cast<std::size_t>(o.rounds);
  const std::size_t total = o.shapes.size() * o.formats.size() * o.levels.size() * o.batches.size() * rounds;
  std::size_t done = 0;
  std::vector<KernelPoint> points;
  for (const Shape& shape : o.shapes) {
    const std::vector<float> x = gaussian_vector(max_batch * shape.cols, 7, 1.0F);
    std::vector<float> y(max_batch * shape.rows);
    for (GgmlType type : o.formats) {
      const auto& f = format_info(type);
      if (progress) progress(fmt::format("{} {}x{}: preparing weights", f.name, shape.rows, shape.cols), static_cast<double>(done) / static_cast<double>(total));
      // Each level multiplies the layout its kernels prefer (or the one asked for), as a
      // loaded model would hold it; a set is built once per layout.
      std::vector<WeightSet> sets;
      const auto weights_in = [&](WeightLayout layout) -> WeightSet& {
        for (WeightSet& s : sets) {
          if (s.layout == layout) return s;
        }
        sets.push_back(make_weights(type, shape, footprint, layout));
        return sets.back();
      };
      // Per (level, batch): every pass of every round, and each round's median.
      const auto slot = [&](std::size_t li, std::size_t bi) { return li * o.batches.size() + bi; };
      std::vector<std::vector<double>> passes(o.levels.size() * o.batches.size());
      std::vector<std::vector<double>> round_medians(passes.size());
      for (std::size_t r = 0; r < rounds; ++r) {
        for (std::size_t li = 0; li < o.levels.size(); ++li) {
          GemmContext& ctx = *contexts[li];
          WeightSet& w = weights_in(o.layout ? *o.layout : ctx.preferred_layout(type));
          for (std::size_t bi = 0; bi < o.batches.size(); ++bi) {
            const std::size_t batch = o.batches[bi];
            ++done;
            if (skipped(li, batch)) continue;
            if (progress) {
              const std::string round = rounds > 1 ? fmt::format(", round {}/{}", r + 1, rounds) : "";
              progress(fmt::format("{} {}x{} {} batch {}{}", f.name, shape.rows, shape.cols, to_string(o.levels[li]), batch, round),
                       static_cast<double>(done) / static_cast<double>(total));
            }
            const std::vector<double> times = time_passes(ctx, w, type, shape, x.data(), batch, y.data(), o);
            passes[slot(li, bi)].insert(passes[slot(li, bi)].end(), times.begin(), times.end());
            round_medians[slot(li, bi)].push_back(median_of(times));
          }
        }
      }
      for (std::size_t li = 0; li < o.levels.size(); ++li) {
        const WeightSet& w = weights_in(o.layout ? *o.layout : contexts[li]->preferred_layout(type));
        for (std::size_t bi = 0; bi < o.batches.size(); ++bi) {
          if (skipped(li, o.batches[bi])) continue;
          KernelPoint p;
          p.type = type;
          p.level = o.levels[li];
          p.kernel = std::string(contexts[li]->kernel_name(type, o.batches[bi], shape.cols, w.layout));
          p.batch = o.batches[bi];
          p.shape = shape;
          p.threads = o.threads;
          p.weight_bytes = w.matrix_bytes;
          p.round_seconds = round_medians[slot(li, bi)];
          p.seconds = median_of(p.round_seconds);
          std::vector<double> rates;
          for (double t : passes[slot(li, bi)]) rates.push_back(1.0 / t);
          p.cv = summarize_rates(rates).cv;
          const double ops = 2.0 * double(shape.rows) * double(shape.cols) * double(p.batch);
          p.weight_gbs = double(w.matrix_bytes) / p.seconds / 1e9;
          p.gops = ops / p.seconds / 1e9;
          place_on_roofline(p, ceilings);
          points.push_back(p);
        }
      }
    }
  }
  if (progress) progress("done", 1.0);
  return points;
}

std::vector<KernelPoint> run_kernel_sweep_at_current_read(const KernelSweepOptions& o, Ceilings& ceilings, ReadAround& read,
                                                          const KernelProgress& progress) {
  validate_sweep(o);  // before a read is spent on options that cannot run
  read.before = measure_dram_read_gbs(o.threads, active_level());
  std::vector<KernelPoint> points = run_kernel_sweep(o, ceilings, progress);
  read.after = measure_dram_read_gbs(o.threads, active_level());
  ceilings.dram_read_gbs = read.mean();
  for (auto& p : points) place_on_roofline(p, ceilings);
  return points;
}

void place_on_roofline(KernelPoint& p, const Ceilings& ceilings) {
  const double ops_per_byte = 2.0 * double(p.shape.rows) * double(p.shape.cols) * double(p.batch) / double(p.weight_bytes);
  const double memory_ceiling = ops_per_byte * ceilings.dram_read_gbs;
  const auto compute = compute_ceiling(ceilings, p.type, p.kernel);
  p.bound = compute && *compute < memory_ceiling ? "compute" : "memory";
  p.ceiling_gops = compute ? std::min(*compute, memory_ceiling) : memory_ceiling;
  p.roofline_fraction = p.gops / *p.ceiling_gops;
}

std::vector<QualityRow> measure_quality(const std::vector<GgmlType>& formats) {
  constexpr std::size_t kRows = 256;
  constexpr std::size_t kCols = 4096;
  constexpr std::size_t kBatch = 4;
  const std::vector<float> x = gaussian_vector(kBatch * kCols, 3, 1.0F);
  std::vector<QualityRow> rows;
  GemmContext reference(1, IsaLevel::scalar);
  for (const char* kind : {"gaussian", "heavy_tailed"}) {
    std::vector<float> w = gaussian_vector(kRows * kCols, 5, 0.02F);
    if (std::string_view(kind) == "heavy_tailed") {
      // One weight in a hundred ten times larger: the outliers real checkpoints carry.
      SeededRng rng(9);
      for (auto& v : w) {
        if (rng.uniform() < 0.01) v *= 10.0F;
      }
    }
    std::vector<double> exact(kBatch * kRows);
    for (std::size_t b = 0; b < kBatch; ++b) {
      for (std::size_t r = 0; r < kRows; ++r) {
        double s = 0;
        for (std::size_t k = 0; k < kCols; ++k) s += double(w[r * kCols + k]) * double(x[b * kCols + k]);
        exact[b * kRows + r] = s;
      }
    }
    for (GgmlType type : formats) {
      const auto& f = format_info(type);
      std::vector<std::uint8_t> q(f.row_bytes(kCols) * kRows);
      std::vector<float> back(kCols);
      double err = 0;
      double norm = 0;
      for (std::size_t r = 0; r < kRows; ++r) {
        f.quantize(w.data() + r * kCols, q.data() + r * f.row_bytes(kCols), kCols);
        f.dequantize(q.data() + r * f.row_bytes(kCols), back.data(), kCols);
        for (std::size_t k = 0; k < kCols; ++k) {
          const double d = double(back[k]) - double(w[r * kCols + k]);
          err += d * d;
          norm += double(w[r * kCols + k]) * double(w[r * kCols + k]);
        }
      }
      std::vector<float> y(kBatch * kRows);
      reference.gemm(make_weight_view(type, q.data(), kRows, kCols), x.data(), kBatch, y.data());
      double out_err = 0;
      double out_norm = 0;
      for (std::size_t i = 0; i < y.size(); ++i) {
        out_err += (double(y[i]) - exact[i]) * (double(y[i]) - exact[i]);
        out_norm += exact[i] * exact[i];
      }
      rows.push_back({type, kind, std::sqrt(err / norm), std::sqrt(out_err / out_norm)});
    }
  }
  return rows;
}

std::vector<double> round_weight_gbs(const KernelPoint& p) {
  std::vector<double> gbs;
  for (double t : p.round_seconds) gbs.push_back(double(p.weight_bytes) / t / 1e9);
  return gbs;
}

nlohmann::json to_json(const KernelPoint& p) {
  nlohmann::json j = {{"format", format_info(p.type).name},
                      {"isa", to_string(p.level)},
                      {"kernel", p.kernel},
                      {"batch", p.batch},
                      {"rows", p.shape.rows},
                      {"cols", p.shape.cols},
                      {"threads", p.threads},
                      {"weight_bytes", p.weight_bytes},
                      {"seconds", p.seconds},
                      {"cv", p.cv},
                      {"weight_gbs", p.weight_gbs},
                      {"gops", p.gops},
                      {"bound", p.bound}};
  j["ceiling_gops"] = p.ceiling_gops ? nlohmann::json(*p.ceiling_gops) : nlohmann::json(nullptr);
  j["roofline_fraction"] = p.roofline_fraction ? nlohmann::json(*p.roofline_fraction) : nlohmann::json(nullptr);
  j["rounds"] = p.round_seconds.size();
  j["round_weight_gbs"] = round_weight_gbs(p);
  return j;
}

nlohmann::json to_json(const QualityRow& q) {
  return {{"format", format_info(q.type).name},
          {"weights", q.weights},
          {"weight_rel_rms", q.weight_rel_rms},
          {"output_rel_rms", q.output_rel_rms}};
}

}  // namespace infercast
