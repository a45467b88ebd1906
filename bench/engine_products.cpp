// infercast_engine_products: the engine's decode products timed inside its steps and replayed
// alone, in turn, round after round. A decode step runs its products between norms, RoPE,
// attention and the cache writes; the kernel sweep the forecast stands on runs them back to
// back. If the two differ per byte, the difference is what the step's other work does to the
// products (caches, prefetchers, the team's wake-ups); if they agree, any gap between the engine
// and the sweep lies in the sweep's shapes and fit. Alternating the two each round keeps a
// shared host's moving bandwidth out of their ratio, which is printed as the median over rounds.
//
// With --sweep-shapes, each round also runs the kernel sweep (as `infercast kernels` and the
// calibration do: one shape, weights cycled through the default footprint) for each format of
// the model, and sets its bandwidth beside the replay's products of that format alone. With
// --curves, the sweep runs the calibration's three shapes and the curve point they give
// (model/calibration.h) forecasts each replayed product: the forecast's matrix time against the
// engine's, free of the minutes that separate a calibration from the runs it forecasts.
//
//   infercast_engine_products --model M.gguf [--rounds 15] [--steps 16] [--concurrency 1]
//                             [--threads N] [--sweep-shapes 2048x8192,8192x2048] [--curves]
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "bench/tool_main.h"
#include "engine/engine.h"
#include "engine/model.h"
#include "kernels/formats.h"
#include "kernels/measure.h"
#include "model/calibration.h"
#include "probes/bandwidth.h"
#include "probes/cpu_features.h"
#include "probes/error.h"
#include "probes/stats.h"
#include "probes/topology.h"

namespace {

using namespace infercast;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string key_of(const ProductTime& p) { return fmt::format("{} {}", to_string(p.role), p.formats); }

// `steps` decode steps of `concurrency` sequences after a 16-token prompt each; products by kind.
std::vector<ProductTime> engine_steps(Engine& engine, const ModelConfig& cfg, int steps, int concurrency) {
  std::vector<int> seqs;
  std::vector<float> logits;
  for (int c = 0; c < concurrency; ++c) {
    const int s = engine.add_sequence();
    seqs.push_back(s);
    std::vector<StepToken> prompt;
    for (int i = 0; i < 16; ++i) prompt.push_back({s, (7 * i + c + 1) % cfg.vocab, i == 15});
    engine.step(prompt, logits);
  }
  std::vector<ProductTime> total;
  for (int g = 0; g < steps; ++g) {
    std::vector<StepToken> batch;
    for (int s : seqs) batch.push_back({s, (g * 13 + s + 5) % cfg.vocab, true});
    engine.step(batch, logits);
    accumulate(total, engine.last_step_products());
  }
  for (int s : seqs) engine.remove_sequence(s);
  return total;
}

// Calls `product(role, {matrices})` for each product of a dense model's decode step, in the
// engine's order and grouping.
template <class Product>
void for_each_product(const Model& model, Product&& product) {
  for (const LayerWeights& w : model.layers()) {
    product(ProductRole::attention_qkv, {w.wq, w.wk, w.wv});
    product(ProductRole::attention_output, {w.wo});
    product(ProductRole::ffn_gate_up, {w.gate, w.up});
    product(ProductRole::ffn_down, {w.down});
  }
  product(ProductRole::output, {model.output()});
}

// The same products in the same order and calls, back to back, nothing between them.
std::vector<ProductTime> replay(GemmContext& ctx, const Model& model, int steps, int concurrency) {
  const ModelConfig& cfg = model.config();
  const auto n = static_cast<std::size_t>(concurrency);
  std::vector<float> x(n * static_cast<std::size_t>(std::max({cfg.dim, cfg.ffn, cfg.q_dim()})), 0.01F);
  std::vector<float> a(n * static_cast<std::size_t>(cfg.vocab)), b(a.size()), c(a.size());
  std::vector<ProductTime> total;
  for (int g = 0; g < steps; ++g) {
    for_each_product(model, [&](ProductRole role, std::initializer_list<WeightView> ws) {
      std::vector<float*> ys{a.data(), b.data(), c.data()};
      const auto t0 = std::chrono::steady_clock::now();
      ctx.gemm_shared(std::span(ws.begin(), ws.size()), x.data(), n, std::span(ys.data(), ws.size()));
      accumulate(total, product_time(role, std::span(ws.begin(), ws.size()), seconds_since(t0)));
    });
  }
  return total;
}

// The calibration's curve point for each format from this round's sweep of its three shapes,
// then each replayed kind's seconds as the forecast would give them (matrices sharing a call pay
// its fixed cost once), against the replay's.
void record_curve_forecast(const Model& model, const std::vector<KernelPoint>& points, int batch,
                           const std::vector<ProductTime>& replayed, int steps,
                           std::map<std::string, std::vector<double>>& ratios) {
  Calibration c;
  const auto at = [&](GgmlType type, std::size_t rows) {
    for (const KernelPoint& k : points) {
      if (k.type == type && k.shape.rows == rows) return ShapeTime{static_cast<double>(k.weight_bytes), k.seconds};
    }
    throw UsageError("sweep point missing");
  };
  for (const KernelPoint& k : points) {
    if (k.shape.rows != kLongRows[0]) continue;
    c.curves[k.type] = {split_point(batch, at(k.type, kLongRows[0]), at(k.type, kShortRows[0]), at(k.type, kSmall[0]), k.kernel)};
  }
  std::map<std::string, double> forecast;
  for_each_product(model, [&](ProductRole role, std::initializer_list<WeightView> ws) {
    double seconds = 0;
    bool first = true;  // matrices after the first share its call
    for (const WeightView& w : ws) {
      seconds += c.product_seconds(w.type, static_cast<double>(w.rows * w.row_bytes), static_cast<double>(w.rows), batch, first ? 1 : 0);
      first = false;
    }
    forecast[key_of(product_time(role, std::span(ws.begin(), ws.size()), 0))] += seconds * steps;
  });
  double all_forecast = 0, all_replayed = 0;
  for (const ProductTime& p : replayed) {
    const double f = forecast[key_of(p)];
    ratios[key_of(p)].push_back(f / p.seconds);
    all_forecast += f;
    all_replayed += p.seconds;
  }
  ratios["all products"].push_back(all_forecast / all_replayed);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"The engine's decode products timed in its steps and replayed alone, alternately"};
  std::string path;
  int rounds = 15;
  int steps = 16;
  int concurrency = 1;
  unsigned threads = host_topology().cores;
  std::vector<std::string> sweep_shapes;
  bool curves = false;
  app.add_option("--model", path)->required();
  app.add_flag("--curves", curves);
  app.add_option("--sweep-shapes", sweep_shapes)->delimiter(',');
  app.add_option("--rounds", rounds)->check(CLI::Range(1, 1000));
  app.add_option("--steps", steps)->check(CLI::Range(1, 1000));
  app.add_option("--concurrency", concurrency)->check(CLI::Range(1, 512));
  app.add_option("--threads", threads)->check(CLI::Range(1U, host_topology().cores));
  return run_tool(app, "infercast_engine_products", argc, argv, [&] {
    const Model model = Model::load(path);
    if (model.config().is_moe()) throw UsageError("the replay covers dense models only");
    EngineOptions eo;
    eo.threads = threads;
    eo.kv_tokens = static_cast<std::size_t>(concurrency) * 64;
    Engine engine(model, eo);
    engine_steps(engine, model.config(), 2, concurrency);  // warm-up: first touch, first wake-ups
    replay(engine.context(), model, 1, concurrency);
    std::map<std::string, std::vector<double>> ratio;  // replay seconds / in-step seconds, per round
    std::map<std::string, std::vector<double>> in_step_gbs, replay_gbs;
    std::vector<double> reads;
    KernelSweepOptions sweep;
    for (const auto& text : sweep_shapes) {
      const auto x = text.find('x');
      if (x == std::string::npos) throw UsageError(fmt::format("shape '{}' is not ROWSxCOLS", text));
      sweep.shapes.push_back({std::stoul(text.substr(0, x)), std::stoul(text.substr(x + 1))});
    }
    if (curves) {
      sweep.shapes = {{kLongRows[0], kLongRows[1]}, {kShortRows[0], kShortRows[1]}, {kSmall[0], kSmall[1]}};
    }
    sweep.levels = {engine.context().level()};
    sweep.batches = {static_cast<std::size_t>(concurrency)};
    sweep.threads = threads;
    sweep.min_time = 0.1;
    sweep.footprint_bytes = default_footprint();
    for (const LayerWeights& w : model.layers()) {
      for (const WeightView* v : {&w.wq, &w.wk, &w.wv, &w.wo, &w.gate, &w.up, &w.down}) {
        if (std::find(sweep.formats.begin(), sweep.formats.end(), v->type) == sweep.formats.end()) sweep.formats.push_back(v->type);
      }
    }
    std::map<std::string, std::vector<double>> sweep_gbs, sweep_over_replay;
    std::map<std::string, std::vector<double>> curve_over_replay;  // forecast seconds / replayed seconds
    for (int r = 0; r < rounds; ++r) {
      reads.push_back(measure_dram_read_gbs(threads, engine.context().level()));
      // Alternate which goes first, so neither always follows the read.
      const bool engine_first = r % 2 == 0;
      std::vector<ProductTime> in_step, alone;
      if (engine_first) in_step = engine_steps(engine, model.config(), steps, concurrency);
      alone = replay(engine.context(), model, steps, concurrency);
      if (!engine_first) in_step = engine_steps(engine, model.config(), steps, concurrency);
      double in_total = 0, alone_total = 0;
      for (const ProductTime& p : in_step) {
        for (const ProductTime& q : alone) {
          if (key_of(p) != key_of(q)) continue;
          ratio[key_of(p)].push_back(q.seconds / p.seconds);
          in_step_gbs[key_of(p)].push_back(static_cast<double>(p.bytes) / p.seconds / 1e9);
          replay_gbs[key_of(p)].push_back(static_cast<double>(q.bytes) / q.seconds / 1e9);
          in_total += p.seconds;
          alone_total += q.seconds;
        }
      }
      ratio["all products"].push_back(alone_total / in_total);
      if (!sweep.shapes.empty()) {
        const std::vector<KernelPoint> points = run_kernel_sweep(sweep, Ceilings{});
        if (curves) record_curve_forecast(model, points, concurrency, alone, steps, curve_over_replay);
        for (const KernelPoint& k : points) {
          const std::string name{format_info(k.type).name};
          double bytes = 0, seconds = 0;  // the replay's products of this format alone
          for (const ProductTime& q : alone) {
            if (q.formats == name) {
              bytes += static_cast<double>(q.bytes);
              seconds += q.seconds;
            }
          }
          const std::string key = fmt::format("{} {}x{}", name, k.shape.rows, k.shape.cols);
          sweep_gbs[key].push_back(k.weight_gbs);
          if (seconds > 0) sweep_over_replay[key].push_back(k.weight_gbs / (bytes / seconds / 1e9));
        }
      }
      fmt::print(stderr, "round {:2d}: read {:5.1f} GB/s, replayed / in-step time {:.3f}\n", r + 1, reads.back(),
                 alone_total / in_total);
    }
    fmt::print("DRAM read over the rounds: median {:.1f} GB/s ({:.1f}-{:.1f}); {} rounds of {} steps at C={}\n",
               median_of(reads), *std::min_element(reads.begin(), reads.end()), *std::max_element(reads.begin(), reads.end()),
               rounds, steps, concurrency);
    fmt::print("{:<34} {:>12} {:>12} {:>16}\n", "product", "in-step GB/s", "alone GB/s", "time alone/in step");
    for (const auto& [key, values] : ratio) {
      const bool all = key == "all products";
      fmt::print("{:<34} {:>12} {:>12} {:>16.3f}\n", key, all ? "" : fmt::format("{:.1f}", median_of(in_step_gbs[key])),
                 all ? "" : fmt::format("{:.1f}", median_of(replay_gbs[key])), median_of(values));
    }
    if (!curve_over_replay.empty()) {
      fmt::print("\n{:<34} {:>28}\n", "curve forecast, batch " + std::to_string(concurrency), "forecast / replayed time");
      for (const auto& [key, values] : curve_over_replay) fmt::print("{:<34} {:>28.3f}\n", key, median_of(values));
    }
    if (!sweep_gbs.empty()) {
      fmt::print("\n{:<34} {:>12} {:>28}\n", "kernel sweep, batch " + std::to_string(concurrency), "GB/s",
                 "over the replay, same format");
      for (const auto& [key, values] : sweep_gbs) {
        const auto& r = sweep_over_replay[key];
        fmt::print("{:<34} {:>12.1f} {:>28}\n", key, median_of(values), r.empty() ? "-" : fmt::format("{:.3f}", median_of(r)));
      }
    }
  });
}
