#pragma once
// The kernels' calibration run behind `infercast kernels`: GEMV and batched GEMM per weight
// format, ISA level and batch at LLM shapes, with weights sized well beyond the last-level cache
// so every figure is what a decode step sees; each placed against the machine's roofline. Also
// the accuracy of every format (quantize -> dequantize and GEMV output against F32).
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/blocks.h"
#include "kernels/gemm.h"
#include "probes/cpu_features.h"

namespace infercast {

// Machine ceilings, read from a probe profile's summary; absent figures stay empty.
struct Ceilings {
  double dram_read_gbs = 0;
  std::optional<double> fp32_gflops;
  std::optional<double> bf16_gflops;
  std::optional<double> int8_vnni_gops;
  std::optional<double> int8_avx2_gops;  // vpmaddubsw, the AVX2 kernels without VNNI
  std::optional<double> amx_int8_gops;
  std::optional<double> amx_bf16_gflops;
  // FMA at 256 bits as the probe measured it: the AVX2 float kernels' ceiling. Absent (an older
  // profile), they get half of a 512-bit fp32_gflops, which is wrong where the core splits
  // 512-bit instructions in two (Zen 4 measured 29 flops per cycle at 256 bits, 33 at 512).
  std::optional<double> fp32_avx2_gflops;
  // Whether fp32_gflops and int8_vnni_gops are 512-bit peaks, which a 256-bit kernel reaches
  // half of (when no 256-bit figure was measured).
  bool fp32_is_avx512 = true;
  bool int8_vnni_is_avx512 = true;
};
// Throws UsageError when the profile has no DRAM read bandwidth (not a probe profile).
Ceilings ceilings_from_profile(const nlohmann::json& profile);

// The instruction family a kernel's products run on, whose peak is its compute ceiling: FP32
// FMA for the float kernels (F16 and BF16 weights converted), the BF16 dot, INT8 on the vector
// units (VNNI or vpmaddubsw) for the formats with quantized activations, or the AMX tiles.
// Empty for the scalar reference.
enum class ComputeFamily { fp32, bf16, vector_int8, amx_int8, amx_bf16 };
std::optional<ComputeFamily> compute_family(GgmlType type, std::string_view kernel);

// The ceiling of a kernel that ran: the probe's peak for its family and vector width.
std::optional<double> compute_ceiling(const Ceilings& c, GgmlType type, std::string_view kernel);

// Weight bytes a sweep point cycles through when none is given: 4x the last-level cache CPUID
// reports, at least kDramFloorBytes (1 GiB, probes/bandwidth.h: a small model's weights, and
// where caches stopped speeding GEMV up on the hosts measured), at most a quarter of the
// available memory unless that is below kDramLeastBytes (dram_working_set at 4x the cache).
std::size_t default_footprint();
// The same for a machine the probe has measured: twice the working set from which its load
// latency, or its read bandwidth at any thread count (whichever is larger), sat on the DRAM
// plateau, at least kDramFloorBytes and at most `fallback` (the default). (A 16-core Xeon's loads
// reached DRAM latency from 8 MiB on, while its 300 MiB L3 still sped up reads of 256 MiB by
// half.) A VM can report a cache it does not have (one host here claimed 508 MiB of L3 per core
// while loads reached DRAM latency from 256 MiB on, and the default swept 4 GiB per point).
// `fallback` when the profile has no DRAM plateau; throws UsageError when its plateau has no
// positive size.
std::size_t footprint_from_profile(const nlohmann::json& profile, std::size_t fallback);
std::size_t footprint_from_profile(const nlohmann::json& profile);

struct Shape {
  std::size_t rows = 0;  // output features
  std::size_t cols = 0;  // input features
};
// "4096x14336" (rows x cols); throws UsageError on anything else.
Shape parse_shape(const std::string& text);

struct KernelSweepOptions {
  std::vector<GgmlType> formats;
  std::vector<IsaLevel> levels;
  std::vector<std::size_t> batches;
  std::vector<Shape> shapes;
  unsigned threads = 1;
  std::size_t footprint_bytes = 0;  // weights cycled per point; 0 = default_footprint()
  double min_time = 0.3;            // seconds of timed passes per point (per round)
  int min_passes = 5;
  // Passes over every format's points: each round times all of a format's levels and batches in
  // turn, so a neighbour's burst on a shared host, which lasts seconds, slows one round of a
  // point rather than all its passes; the point's time is the median of its rounds.
  int rounds = 1;
  std::optional<WeightLayout> layout;  // default: each level's preferred layout
};
inline constexpr int kMaxRounds = 100;

// Default shapes: the attention/FFN projections of an 8B llama (4096 hidden, 14336 FFN).
std::vector<Shape> default_shapes();
std::vector<std::size_t> default_batches();

struct KernelPoint {
  GgmlType type = GgmlType::f32;
  IsaLevel level = IsaLevel::scalar;
  std::string kernel;  // implementation that ran, e.g. "amx_int8"
  std::size_t batch = 0;
  Shape shape;
  unsigned threads = 0;
  std::size_t weight_bytes = 0;  // one matrix
  double seconds = 0;            // median time per product (of the rounds' medians)
  double cv = 0;                 // of the per-pass times, all rounds together
  std::vector<double> round_seconds;  // each round's median time per product
  double weight_gbs = 0;         // weight bytes / time
  double gops = 0;               // 2 * rows * cols * batch / time
  std::string bound;             // "memory" or "compute": the lower roofline ceiling
  std::optional<double> ceiling_gops;
  std::optional<double> roofline_fraction;
};

// Each round's weight GB/s of a point, in the order the rounds ran.
std::vector<double> round_weight_gbs(const KernelPoint& p);

using KernelProgress = std::function<void(const std::string& what, double fraction)>;

// Sets the point's bound, ceiling and fraction of it from its GOPS, shape and bytes: the lower of
// the memory ceiling (operations per weight byte x the DRAM read) and its family's compute peak.
void place_on_roofline(KernelPoint& p, const Ceilings& ceilings);

std::vector<KernelPoint> run_kernel_sweep(const KernelSweepOptions& options, const Ceilings& ceilings,
                                          const KernelProgress& progress = {});

// The DRAM read (the probe's kernel) just before and just after a sweep.
struct ReadAround {
  double before = 0;
  double after = 0;
  [[nodiscard]] double mean() const { return 0.5 * (before + after); }
};

// run_kernel_sweep between two DRAM reads, every point placed against their mean instead of
// `ceilings.dram_read_gbs`, which is set to it: a shared host's read moves by tens of percent
// within minutes, and a probe's of another hour is no ceiling for this sweep.
std::vector<KernelPoint> run_kernel_sweep_at_current_read(const KernelSweepOptions& options, Ceilings& ceilings,
                                                          ReadAround& read, const KernelProgress& progress = {});

// Throws UsageError for options that cannot run here (shape not a block multiple, no formats,
// a level the machine lacks, more threads than cores, not enough memory).
void validate_sweep(const KernelSweepOptions& options);

struct QualityRow {
  GgmlType type = GgmlType::f32;
  std::string weights;          // "gaussian" or "heavy_tailed"
  double weight_rel_rms = 0;    // ||dequant(quant(w)) - w|| / ||w||
  double output_rel_rms = 0;    // ||GEMV(quant) - GEMV(F32)|| / ||GEMV(F32)||, activations quantized as the kernels do
};
std::vector<QualityRow> measure_quality(const std::vector<GgmlType>& formats);

nlohmann::json to_json(const KernelPoint& p);
nlohmann::json to_json(const QualityRow& q);

}  // namespace infercast
