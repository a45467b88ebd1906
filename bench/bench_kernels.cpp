// Google Benchmark targets for the kernels: every weight format x ISA level x batch at a
// 4096x4096 projection, all cores (`gemm/...`), and each format's GEMV on one core with the
// weights hot in cache (`gemv_hot/...`), and its batches of 8 and 64 likewise (`gemm_hot/...`).
// Bytes/s is weight bytes streamed; `gops` counts 2 ops per
// multiply-add. For DRAM-resident figures against the roofline use `infercast kernels`, which
// cycles through weights far larger than the last-level cache. Also one attention task per ISA
// level (the vector primitives of kernels/vec.h on one thread, cache-resident): what a decode
// step pays per KV head and token once the cache lines have arrived; and that task with its
// keys and values in DRAM (`attention_dram/...`, each task's blocks one after another, and
// `attention_scattered/...`, every block apart), what it pays when they have not. And the AMX
// kernels' decode of a 16-row group into tile rows from each layout (`amx_decode/...`, one
// core, in cache): plain AVX-512, so any AVX-512 machine measures what an AMX machine pays for
// it. And the activation quantizers (`quantize_act/...`, one core, in cache): a GEMV quantizes
// its input row on one thread while the others wait, so at a decode step's small matrices this
// is part of its time.
#include <benchmark/benchmark.h>

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "engine/ops.h"
#include "kernels/amx_decode.h"
#include "kernels/formats.h"
#include "kernels/gemm.h"
#include "kernels/half.h"
#include "kernels/interleave.h"
#include "kernels/simd_quantize.h"
#include "kernels/vec.h"
#include "probes/memory.h"
#include "probes/random.h"
#include "probes/topology.h"

namespace infercast {
namespace {

constexpr std::size_t kRows = 4096;
constexpr std::size_t kCols = 4096;
// The hot GEMV: a matrix small enough to stay in one core's L2 (or just past it for the 8- and
// 16-bit formats), so the figure is the kernel's own decode rate, with no DRAM in it. A format
// whose hot rate is not well above the DRAM read cannot stream at that read.
constexpr std::size_t kHotRows = 512;
constexpr std::size_t kHotCols = 2048;

// The matrix of one format, layout and shape, built once.
struct Matrix {
  std::vector<std::uint8_t> bytes;
  WeightView view;
};

const Matrix& weights(GgmlType type, WeightLayout layout, std::size_t rows, std::size_t cols) {
  static std::map<std::tuple<GgmlType, WeightLayout, std::size_t, std::size_t>, Matrix> cache;
  Matrix& m = cache[{type, layout, rows, cols}];
  if (m.bytes.empty()) {
    const auto& f = format_info(type);
    std::vector<float> row(cols);
    for (std::size_t k = 0; k < cols; ++k) row[k] = 0.02F * static_cast<float>((k * 2654435761U) % 2001) / 1000.0F - 0.02F;
    m.bytes.resize(f.row_bytes(cols) * rows);
    for (std::size_t r = 0; r < rows; ++r) f.quantize(row.data(), m.bytes.data() + r * f.row_bytes(cols), cols);
    m.view = relayout(make_weight_view(type, m.bytes.data(), rows, cols), m.bytes.data(), layout);
  }
  return m;
}

GemmContext& context(IsaLevel level, unsigned threads) {
  static std::map<std::pair<IsaLevel, unsigned>, std::unique_ptr<GemmContext>> contexts;
  auto& c = contexts[{level, threads}];
  if (!c) c = std::make_unique<GemmContext>(threads, level);
  return *c;
}

void run_gemm(benchmark::State& state, GgmlType type, IsaLevel level, WeightLayout layout, std::size_t batch,
              std::size_t rows, std::size_t cols, unsigned threads) {
  const Matrix& w = weights(type, layout, rows, cols);
  GemmContext& ctx = context(level, threads);
  const WeightView& view = w.view;
  std::vector<float> x(batch * cols, 0.5F);
  std::vector<float> y(batch * rows);
  for (auto _ : state) {
    ctx.gemm(view, x.data(), batch, y.data());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * w.bytes.size()));
  state.counters["gops"] = benchmark::Counter(2.0 * static_cast<double>(rows * cols * batch) * static_cast<double>(state.iterations()) / 1e9,
                                              benchmark::Counter::kIsRate);
  state.SetLabel(std::string(ctx.kernel_name(type, batch, cols, view.layout)));
}

// One (token, KV head) task as the engine runs it: eight query heads of size 64 against `len`
// cached positions in F16, keys in the column layout, values in rows, block by block. With
// `footprint` bytes, each iteration takes the next of as many tasks' keys and values as fill it
// (huge pages, as the engine's pool), so a footprint beyond the last-level cache gives a task
// whose lines come from DRAM, as a decode step's do once the weights have streamed through.
//
// With `longest` above `len`, the task's length steps through [len, longest] from one iteration
// to the next, as a decode's tasks do (each sequence at its own position, each step one further):
// a task of one fixed length lets the branch predictor learn every loop of it, and its last block
// is always full.
//
// A task's blocks lie one after another, as a prompt's do in the engine's pool (a run of blocks
// per layer and KV head), unless `scattered`: then every block of every task has its own place
// in the footprint, as the blocks a decode adds do when many sequences grow at once, and the
// core's stream prefetchers see no run.
void run_attention(benchmark::State& state, IsaLevel level, std::size_t len, std::size_t footprint = 0, std::size_t longest = 0,
                   bool scattered = false) {
  const VecOps& ops = vec_ops(level);
  constexpr std::size_t kHeads = 8;
  constexpr std::size_t kDim = 64;
  const std::size_t shortest = len;
  len = std::max(len, longest);  // what the buffers must hold
  const std::size_t lengths = len - shortest + 1;
  const std::size_t blocks = (len + kKeyBlock - 1) / kKeyBlock;
  const std::size_t per_task = blocks * kKeyBlock * kDim;  // elements of keys, and of values
  const std::size_t tasks = std::max<std::size_t>(1, footprint / (2 * per_task * sizeof(std::uint16_t)));
  PageBuffer cache(2 * tasks * per_task * sizeof(std::uint16_t));
  auto* keys = cache.as<std::uint16_t>();
  std::uint16_t* values = keys + tasks * per_task;
  for (std::size_t i = 0; i < tasks * per_task; ++i) {
    keys[i] = fp32_to_fp16(0.01F * static_cast<float>(i % 97) - 0.5F);
    values[i] = fp32_to_fp16(0.02F * static_cast<float>(i % 89) - 0.9F);
  }
  // Block b of task t is keys (or values) slot place[2 t blocks + b] (or + blocks).
  std::vector<std::size_t> place(2 * tasks * blocks);
  for (std::size_t t = 0; t < tasks; ++t) {
    for (std::size_t b = 0; b < blocks; ++b) {
      place[2 * t * blocks + b] = t * blocks + b;
      place[2 * t * blocks + blocks + b] = (tasks + t) * blocks + b;
    }
  }
  if (scattered) std::shuffle(place.begin(), place.end(), std::mt19937_64(5));
  std::vector<float> q(kHeads * kDim, 0.03F), scores(kHeads * len), out(kHeads * kDim);
  std::size_t task = 0;
  std::size_t step = 0;
  double positions = 0;
  for (auto _ : state) {
    const std::size_t* at = &place[2 * task * blocks];
    // 37 is prime to every range used here: each length once per `lengths` iterations, in a
    // scrambled order.
    const std::size_t now = shortest + (step * 37) % lengths;
    positions += static_cast<double>(now);
    attend<std::uint16_t>(
        ops, q.data(), kHeads, kDim, now, 0.125F, [keys, at](std::size_t b) { return keys + at[b] * kKeyBlock * kDim; },
        [keys, at, blocks](std::size_t b) { return keys + at[blocks + b] * kKeyBlock * kDim; }, scores.data(), out.data());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
    task = task + 1 == tasks ? 0 : task + 1;
    step = step + 1 == lengths ? 0 : step + 1;
  }
  if (footprint > 0) state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * 2 * per_task * sizeof(std::uint16_t)));
  // Scores and the weighted sum: 2 x 2 x heads x positions x head size.
  state.counters["gflops"] = benchmark::Counter(4.0 * kHeads * kDim * positions / 1e9, benchmark::Counter::kIsRate);
}

// Sixteen rows of kCols decoded as the AMX kernels do per row group, from one layout: to signed
// bytes and scales for the INT8 tiles, or to bf16 with the scales applied for the BF16 tiles.
void run_amx_decode(benchmark::State& state, GgmlType type, WeightLayout layout, bool bf16) {
  constexpr std::size_t kGroupRows = 16;
  const Matrix& w = weights(type, layout, kGroupRows, kCols);
  const std::size_t nsub = kCols / decoded_sub_block(type);
  const std::size_t ldq = kCols + 64;
  const std::size_t ldw = kCols + 32;
  std::vector<std::int8_t> q(kGroupRows * ldq);
  std::vector<float> scale(kGroupRows * nsub), offset(kGroupRows * nsub);
  std::vector<std::uint16_t> out_bf16(kGroupRows * ldw);
  const DecodedRows out{q.data(), scale.data(), offset.data(), ldq, nsub};
  const auto* bytes = w.bytes.data();
  const std::size_t row_bytes = w.view.row_bytes;
  for (auto _ : state) {
    if (layout == WeightLayout::interleaved8) {
      for (std::size_t r = 0; r < kGroupRows; r += 8) {
        if (bf16) {
          decode_x8_group_bf16(type, bytes + r * row_bytes, kCols, out_bf16.data() + r * ldw, ldw, out);
        } else {
          decode_x8_group(type, bytes + r * row_bytes, kCols, out, r);
        }
      }
    } else {
      for (std::size_t r = 0; r < kGroupRows; ++r) {
        if (bf16) {
          decode_gguf_row_bf16(type, bytes + r * row_bytes, kCols, out_bf16.data() + r * ldw, out);
        } else {
          decode_gguf_row(type, bytes + r * row_bytes, kCols, out, r);
        }
      }
    }
    benchmark::DoNotOptimize(q.data());
    benchmark::DoNotOptimize(out_bf16.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * w.bytes.size()));
}

// One activation row of `cols` floats quantized to Q8_0 or Q8_K blocks, as a GEMV's front does.
void run_quantize(benchmark::State& state, const ActivationQuantizers& q, bool k_blocks, std::size_t cols) {
  std::vector<float> x(cols);
  for (std::size_t k = 0; k < cols; ++k) x[k] = static_cast<float>((k * 2654435761U) % 2001) / 1000.0F - 1.0F;
  std::vector<BlockQ8_0> q8_0(cols / kQk);
  std::vector<BlockQ8_K> q8_k(cols / kQkK);
  for (auto _ : state) {
    if (k_blocks) {
      q.q8_k(x.data(), q8_k.data(), cols);
    } else {
      q.q8_0(x.data(), q8_0.data(), cols);
    }
    benchmark::DoNotOptimize(q8_0.data());
    benchmark::DoNotOptimize(q8_k.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * cols * sizeof(float)));
}

std::vector<float> gaussian(std::size_t n, std::uint64_t seed) {
  SeededRng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = rng.gaussian();
  return v;
}

// The per-token pieces a decode step runs between its products, on one thread.
void run_rms_norm(benchmark::State& state, std::size_t n) {
  std::vector<float> x = gaussian(n, 5);
  const std::vector<float> w = gaussian(n, 6);
  std::vector<float> out(n);
  for (auto _ : state) {
    rms_norm(x.data(), w.data(), out.data(), n, 1e-5F);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
}

void run_to_f16(benchmark::State& state, const VecOps& ops, std::size_t n) {
  const std::vector<float> x = gaussian(n, 7);
  std::vector<std::uint16_t> out(n);
  for (auto _ : state) {
    ops.to_f16(x.data(), out.data(), n);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
}

// SwiGLU over one token's FFN activations in cache: the engine's per-token rate without the
// trip its inputs make from the cores that computed them. Each iteration copies the gate row
// back first (the kernel works in place); the copy is part of the time.
void run_swiglu(benchmark::State& state, const VecOps& ops, std::size_t n) {
  const std::vector<float> gate = gaussian(n, 9);
  const std::vector<float> up = gaussian(n, 10);
  std::vector<float> out(n);
  for (auto _ : state) {
    std::copy(gate.begin(), gate.end(), out.begin());
    ops.swiglu(out.data(), up.data(), n);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(n));
}

void run_argmax(benchmark::State& state, const VecOps& ops, std::size_t n) {
  const std::vector<float> x = gaussian(n, 8);
  for (auto _ : state) benchmark::DoNotOptimize(ops.argmax(x.data(), n));
}

void register_all() {
  const CpuFeatures& cpu = host_cpu();
  for (int l = static_cast<int>(IsaLevel::avx2); l <= std::min(static_cast<int>(max_supported_level(cpu)), static_cast<int>(IsaLevel::avx512)); ++l) {
    const auto level = static_cast<IsaLevel>(l);
    const ActivationQuantizers& q = level == IsaLevel::avx2 ? avx2_activation_quantizers() : avx512_activation_quantizers();
    for (bool k_blocks : {false, true}) {
      for (std::size_t cols : {2048, 5632}) {
        benchmark::RegisterBenchmark(fmt::format("quantize_act/{}/{}/cols:{}", k_blocks ? "Q8_K" : "Q8_0", to_string(level), cols).c_str(),
                                     [=, &q](benchmark::State& s) { run_quantize(s, q, k_blocks, cols); })
            ->Unit(benchmark::kNanosecond);
      }
    }
  }
  if (cpu.avx512f && cpu.avx512bw && cpu.avx512vl && cpu.avx512dq && cpu.os_avx512) {
    for (bool bf16 : {false, true}) {
      if (bf16 && !cpu.avx512_bf16) continue;
      for (GgmlType type : weight_formats()) {
        if (!has_interleaved_layout(type)) continue;
        for (WeightLayout layout : {WeightLayout::gguf, WeightLayout::interleaved8}) {
          benchmark::RegisterBenchmark(fmt::format("amx_decode{}/{}/{}", bf16 ? "_bf16" : "", format_info(type).name,
                                                   layout == WeightLayout::gguf ? "gguf" : "x8")
                                           .c_str(),
                                       [=](benchmark::State& s) { run_amx_decode(s, type, layout, bf16); })
              ->Unit(benchmark::kMicrosecond);
        }
      }
    }
  }
  for (int l = 0; l <= static_cast<int>(max_supported_level(host_cpu())); ++l) {
    const auto level = static_cast<IsaLevel>(l);
    for (std::size_t len : {48, 128, 512, 2048}) {
      benchmark::RegisterBenchmark(fmt::format("attention/{}/positions:{}", to_string(level), len).c_str(),
                                   [=](benchmark::State& s) { run_attention(s, level, len); })
          ->Unit(benchmark::kMicrosecond);
    }
    // A short decode's tasks as they come: 17 to 79 positions (a 16-token prompt and 64 tokens
    // generated), 48 on average.
    benchmark::RegisterBenchmark(fmt::format("attention/{}/positions:17-79", to_string(level)).c_str(),
                                 [=](benchmark::State& s) { run_attention(s, level, 17, 0, 79); })
        ->Unit(benchmark::kMicrosecond);
  }
  // The same task from DRAM at the best level: 1 GiB of keys and values, beyond the last-level
  // caches of the hosts in docs/PERFORMANCE.md (32-105 MiB, or 508 MiB as some Zen 5 guests
  // report theirs), at 48 positions (a short decode's), 512, and 2048, a long context.
  for (std::size_t len : {48, 512, 2048}) {
    benchmark::RegisterBenchmark(fmt::format("attention_dram/{}/positions:{}", to_string(max_supported_level(host_cpu())), len).c_str(),
                                 [=](benchmark::State& s) { run_attention(s, max_supported_level(host_cpu()), len, std::size_t{1} << 30); })
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(fmt::format("attention_scattered/{}/positions:{}", to_string(max_supported_level(host_cpu())), len).c_str(),
                                 [=](benchmark::State& s) { run_attention(s, max_supported_level(host_cpu()), len, std::size_t{1} << 30, 0, true); })
        ->Unit(benchmark::kMicrosecond);
  }
  benchmark::RegisterBenchmark("rms_norm/n:2048", [](benchmark::State& s) { run_rms_norm(s, 2048); })->Unit(benchmark::kNanosecond);
  for (int l = 0; l <= static_cast<int>(max_supported_level(host_cpu())); ++l) {
    const VecOps& ops = vec_ops(static_cast<IsaLevel>(l));
    benchmark::RegisterBenchmark(fmt::format("to_f16/{}/n:256", ops.name).c_str(), [&ops](benchmark::State& s) { run_to_f16(s, ops, 256); })
        ->Unit(benchmark::kNanosecond);
    benchmark::RegisterBenchmark(fmt::format("swiglu/{}/n:5632", ops.name).c_str(), [&ops](benchmark::State& s) { run_swiglu(s, ops, 5632); })
        ->Unit(benchmark::kNanosecond);
    benchmark::RegisterBenchmark(fmt::format("argmax/{}/n:32000", ops.name).c_str(), [&ops](benchmark::State& s) { run_argmax(s, ops, 32000); })
        ->Unit(benchmark::kMicrosecond);
  }
  const IsaLevel best = max_supported_level(host_cpu());
  for (GgmlType type : weight_formats()) {
    for (int l = 0; l <= static_cast<int>(best); ++l) {
      const auto level = static_cast<IsaLevel>(l);
      // The GGUF layout at every level, and the interleaved one where the level prefers it.
      std::vector<WeightLayout> layouts{WeightLayout::gguf};
      if (preferred_layout(type, level) != WeightLayout::gguf) layouts.push_back(preferred_layout(type, level));
      for (WeightLayout layout : layouts) {
        const std::string variant = fmt::format("{}/{}{}", format_info(type).name, to_string(level), layout == WeightLayout::gguf ? "" : "_x8");
        benchmark::RegisterBenchmark(fmt::format("gemv_hot/{}", variant).c_str(),
                                     [=](benchmark::State& s) { run_gemm(s, type, level, layout, 1, kHotRows, kHotCols, 1); })
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
        // The batch kernels hot on one core: their compute rate with no DRAM in it, to set
        // beside the probe's per-core peak of their instruction family.
        for (std::size_t batch : {8, 64}) {
          if (level == IsaLevel::scalar) continue;
          benchmark::RegisterBenchmark(fmt::format("gemm_hot/{}/batch:{}", variant, batch).c_str(),
                                       [=](benchmark::State& s) { run_gemm(s, type, level, layout, batch, kHotRows, kHotCols, 1); })
              ->Unit(benchmark::kMicrosecond)
              ->UseRealTime();
        }
        for (std::size_t batch : {1, 2, 4, 8, 16, 32, 64}) {
          if (level == IsaLevel::scalar && batch > 1) continue;  // the reference is for GEMV only
          benchmark::RegisterBenchmark(fmt::format("gemm/{}/batch:{}", variant, batch).c_str(),
                                       [=](benchmark::State& s) { run_gemm(s, type, level, layout, batch, kRows, kCols, host_topology().cores); })
              ->Unit(benchmark::kMicrosecond)
              ->UseRealTime();
        }
      }
    }
  }
}

}  // namespace
}  // namespace infercast

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  infercast::register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
