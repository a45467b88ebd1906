// The forecast's inputs (catalogs, weight inventories), its arithmetic (calibration curves,
// the overhead fit, the roofline), cost, and the validation loop on a tiny generated model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <utility>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/model.h"
#include "kernels/formats.h"
#include "kernels/gemm.h"
#include "model/cost.h"
#include "model/forecast.h"
#include "model/validate.h"
#include "probes/error.h"
#include "probes/stats.h"
#include "tests/gguf_patch.h"
#include "tests/temp_path.h"

namespace infercast {
namespace {

// A calibration with round numbers: every format streams at `gbs` at batch 1 and the time per
// byte grows by `slope` of that per extra token.
Calibration synthetic_calibration(double gbs = 20, double slope = 0.1) {
  Calibration c;
  c.threads = 2;
  c.dram_read_gbs = gbs;
  c.sweep_cv = 0.02;
  for (GgmlType t : weight_formats()) {
    for (double b : {1.0, 8.0, 256.0}) {
      c.curves[t].push_back({b, (1 + slope * (b - 1)) / (gbs * 1e9), 0.0, 0.0, b < 8 ? "avx512_vnni" : "amx_int8"});
    }
    c.core_gbs[t] = gbs;
  }
  c.engine = EngineOverheads{10e-6, 1e-9, 0.1e-9, 0.05e-9, 0.3};
  c.matrix_residual = 0.08;
  c.runs.push_back({"calibration-0.94b", "F16", 3, 64, 12, 0.3, 0.1});
  return c;
}

Hardware synthetic_cpu() {
  Hardware h;
  h.name = "test-cpu";
  h.display = "test CPU";
  h.memory_bytes = 64e9;
  h.bandwidth_gbs = 20;
  h.stream_gbs = 20;
  h.peak_fp32_gflops = 200;
  h.peak_bf16_gflops = 4000;
  h.peak_int8_gops = 8000;
  h.cores = 2;
  h.base_ghz = 2;
  return h;
}

double rel(double a, double b) { return std::abs(a - b) / std::abs(b); }

TEST(Catalog, EveryModelMatchesItsPublishedParameterCount) {
  const auto models = catalog_models();
  EXPECT_GE(models.size(), 20U);
  for (const auto& a : models) {
    const WeightInventory w = weight_inventory(a, parse_quantization("F16"));
    ASSERT_TRUE(a.published_parameters) << a.name;
    EXPECT_LT(rel(static_cast<double>(w.total_parameters()), *a.published_parameters), 0.02) << a.name << " " << w.total_parameters();
    if (a.published_active_parameters) {
      const double active = static_cast<double>(w.active_matrix_parameters(a) + w.embedding_parameters);
      EXPECT_LT(rel(active, *a.published_active_parameters), 0.03) << a.name << " active " << active;
    }
  }
  for (const char* name : {"llama-2-70b", "llama-3.1-405b", "deepseek-v3", "qwen3-30b-a3b", "phi-3-mini", "qwen2.5-72b", "mixtral-8x22b"}) {
    EXPECT_TRUE(find_catalog_model(name)) << name;
  }
  EXPECT_FALSE(find_catalog_model("gpt-5"));
}

TEST(Catalog, MlaCachesTheLatentNotPerHeadKeys) {
  const auto v3 = *find_catalog_model("deepseek-v3");
  EXPECT_EQ(kv_bytes_per_token(v3, 2), 61U * (512 + 64) * 2);
  const auto l70 = *find_catalog_model("llama-3.1-70b");
  EXPECT_EQ(kv_bytes_per_token(l70, 2), 80U * 2 * 8 * 128 * 2);
}

TEST(Catalog, BadModelDescriptionsAreUsageErrors) {
  auto j = nlohmann::json::parse(R"({"layers": 2, "dim": 64, "ffn": 128, "heads": 4, "kv_heads": 3, "vocab": 10, "context": 8})");
  EXPECT_THROW(architecture_from_json(j, "x"), UsageError);  // heads not a multiple of kv_heads
  j["kv_heads"] = 2;
  EXPECT_NO_THROW(architecture_from_json(j, "x"));
  j["layers"] = 7777740;  // found by the fuzzer: an inventory of millions of matrices
  EXPECT_THROW(architecture_from_json(j, "x"), UsageError);
  j["layers"] = 2;
  j.erase("dim");
  EXPECT_THROW(architecture_from_json(j, "x"), UsageError);
  EXPECT_THROW(architecture_from_json(nlohmann::json::array(), "x"), UsageError);
  // A field of the wrong JSON type is a usage error naming the file, not a library exception.
  j["dim"] = 64;
  j["tied_embeddings"] = "yes";
  try {
    (void)architecture_from_json(j, "bad.json");
    ADD_FAILURE() << "a string where a boolean belongs was accepted";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("bad.json: ", 0), 0U) << e.what();
  }
}

TEST(Quantization, SizesComeFromTheBlockLayouts) {
  const auto a = *find_catalog_model("llama-3.1-8b");
  const WeightInventory q8 = weight_inventory(a, parse_quantization("Q8_0"));
  // Every matrix Q8_0 (34 bytes per 32 weights), norms F32.
  EXPECT_EQ(q8.total_bytes(), (q8.total_parameters() - q8.vector_parameters) / 32 * 34 + q8.vector_bytes);
  const WeightInventory km = weight_inventory(a, parse_quantization("Q4_K_M"));
  // llama.cpp's own Q4_K_M of this model: llama-bench reports 4.58 GiB and 8.03 B parameters,
  // 4.89 bits per weight (Q4_K is 4.5; the recipe keeps the head and 16 blocks' value and down
  // projections at Q6_K's 6.5625). With every attention output at Q6_K too it came to 4.70 GiB.
  EXPECT_NEAR(static_cast<double>(km.total_bytes()) / (1ULL << 30), 4.58, 0.005);
  EXPECT_NEAR(km.bits_per_weight(), 4.89, 0.01);
  int q6_matrices = 0;
  for (const auto& m : km.matrices) {
    if (m.type != GgmlType::q6_k) continue;
    ++q6_matrices;
    EXPECT_TRUE(m.name == "output.weight" || m.name.ends_with(".attn_v.weight") || m.name.ends_with(".ffn_down.weight")) << m.name;
  }
  EXPECT_EQ(q6_matrices, 1 + 2 * 16);
  // Two more of llama.cpp's files (bartowski's quantizations; sizes in GB with a few MB of
  // metadata besides the tensors): an 80-block model's values and an eight-expert model's keys,
  // values and attention outputs follow their own rules.
  const auto gb = [](const char* name, const char* quant) {
    return static_cast<double>(weight_inventory(*find_catalog_model(name), parse_quantization(quant)).total_bytes()) / 1e9;
  };
  EXPECT_NEAR(gb("llama-3.1-70b", "Q4_K_M"), 42.52, 0.015);
  EXPECT_NEAR(gb("llama-3.1-70b", "Q5_K_M"), 49.95, 0.015);
  EXPECT_NEAR(gb("mixtral-8x22b", "Q4_K_M"), 85.58, 0.015);
  EXPECT_NEAR(gb("mixtral-8x22b", "Q5_K_M"), 99.96, 0.015);
  // Qwen2.5-0.5B's 896-wide rows cannot take 256-element K-quant blocks: they fall back.
  const WeightInventory qwen = weight_inventory(*find_catalog_model("qwen2.5-0.5b"), parse_quantization("Q4_K"));
  int fell_back = 0;
  for (const auto& m : qwen.matrices) {
    if (m.cols % 256 != 0) {
      EXPECT_NE(m.type, GgmlType::q4_k) << m.name;
      ++fell_back;
    }
  }
  EXPECT_GT(fell_back, 0);
  // As llama.cpp's quantizer: Q4_K falls back to Q5_0, Q6_K to Q8_0, and a tied table takes the
  // output head's type (Q6_K, which 896-wide rows make Q8_0).
  const WeightInventory qwen_km = weight_inventory(*find_catalog_model("qwen2.5-0.5b"), parse_quantization("Q4_K_M"));
  for (const auto& m : qwen_km.matrices) {
    if (m.name == "blk.3.ffn_gate.weight" || m.name == "blk.3.attn_q.weight") {
      EXPECT_EQ(static_cast<int>(m.type), 6) << m.name;
    } else if (m.name == "blk.0.attn_v.weight" || m.name == "token_embd.weight") {
      EXPECT_EQ(m.type, GgmlType::q8_0) << m.name;
    } else if (m.name == "blk.3.ffn_down.weight") {
      EXPECT_EQ(m.type, GgmlType::q4_k) << m.name;  // 4864 = 19 x 256
    }
  }
  // Qwen2.5-72B's 29568-wide down projections: Q5_0 outside the sensitive layers, Q8_0 in them.
  const WeightInventory qwen72 = weight_inventory(*find_catalog_model("qwen2.5-72b"), parse_quantization("Q4_K_M"));
  int q5_0_downs = 0;
  int q8_0_downs = 0;
  for (const auto& m : qwen72.matrices) {
    if (!m.name.ends_with(".ffn_down.weight")) continue;
    q5_0_downs += static_cast<int>(m.type) == 6;
    q8_0_downs += m.type == GgmlType::q8_0;
  }
  EXPECT_EQ(q5_0_downs, 40);
  EXPECT_EQ(q8_0_downs, 40);
}

TEST(Quantization, AGeneratedFileHasExactlyTheForecastInventory) {
  GenerateOptions g;
  g.shape = llama_shape(2, 256, 512, 4, 2, 300);
  g.shape.experts = 4;
  g.shape.active_experts = 2;
  g.quant = "Q4_K_M";
  const std::string path = temp_path("inventory.gguf");
  generate_model(g, path);
  const GgufFile f = GgufFile::open(path);
  const Architecture a = architecture_from_gguf(f, "tiny");
  const WeightInventory from_file = weight_inventory(f, a);
  const WeightInventory from_shape = weight_inventory(a, parse_quantization("Q4_K_M"));
  EXPECT_EQ(from_file.total_bytes(), from_shape.total_bytes());
  EXPECT_EQ(from_file.total_parameters(), from_shape.total_parameters());
  EXPECT_EQ(from_file.active_matrix_parameters(a), from_shape.active_matrix_parameters(a));
  std::filesystem::remove(path);
}

TEST(Quantization, FormatsWithoutKernelsTakeTheNearestFormatOfTheirBlockLength) {
  const auto stand_in = [](std::uint32_t raw) { return stand_in_format(static_cast<GgmlType>(raw)); };
  EXPECT_EQ(stand_in(6), GgmlType::q5_0);   // Q5_0 has kernels of its own
  EXPECT_EQ(stand_in(3), GgmlType::q4_0);   // Q4_1, 5.0 bits: Q4_0 (4.5) and Q5_0 (5.5) tie, the smaller wins
  EXPECT_EQ(stand_in(7), GgmlType::q5_0);   // Q5_1, 6.0 bits
  EXPECT_EQ(stand_in(9), GgmlType::q8_0);   // Q8_1
  EXPECT_EQ(stand_in(11), GgmlType::q4_k);  // Q3_K
  EXPECT_EQ(stand_in(23), GgmlType::q4_k);  // IQ4_XS, 4.25 bits
  EXPECT_EQ(stand_in(20), GgmlType::q4_0);  // IQ4_NL, a 32-element block
  EXPECT_EQ(stand_in(28), GgmlType::f32);   // F64
  EXPECT_EQ(stand_in_format(GgmlType::q6_k), GgmlType::q6_k);
  EXPECT_EQ(stand_in_format(GgmlType::bf16), GgmlType::bf16);
  EXPECT_FALSE(stand_in(4));  // a number ggml retired
  EXPECT_FALSE(stand_in(99));
}

// A small generated Q8_0 model whose layer-1 down projection is relabelled as ggml type `type`
// (its bytes no longer match, which an inventory never reads): its architecture and inventory.
std::pair<Architecture, WeightInventory> inventory_with_down_as(std::uint32_t type) {
  GenerateOptions g;
  g.shape = llama_shape(2, 256, 512, 4, 2, 300);
  g.quant = "Q8_0";
  const std::string path = temp_path("retyped-" + std::to_string(type) + ".gguf");
  generate_model(g, path);
  set_tensor_type(path, "blk.1.ffn_down.weight", type);
  const GgufFile f = GgufFile::open(path);
  Architecture a = architecture_from_gguf(f, "tiny");
  WeightInventory w = weight_inventory(f, a);
  std::filesystem::remove(path);
  return {std::move(a), std::move(w)};
}

// A llama.cpp file may keep some matrices in formats infercast has no kernels for (Q4_1, Q5_1,
// Q3_K, the IQ formats). The forecast counts their own bytes at the speed of their stand-in.
TEST(Quantization, AFileWithFormatsWithoutKernelsIsForecastWithStandIns) {
  const auto [a, w] = inventory_with_down_as(3);  // Q4_1
  const auto stand_ins = w.stand_ins();
  ASSERT_EQ(stand_ins.size(), 1U);
  EXPECT_EQ(static_cast<std::uint32_t>(stand_ins[0].type), 3U);
  EXPECT_EQ(stand_ins[0].measured_as, GgmlType::q4_0);
  double matrix_params = 0;
  for (const auto& m : w.matrices) matrix_params += static_cast<double>(m.parameters());
  EXPECT_NEAR(stand_ins[0].parameter_share, 256.0 * 512 / matrix_params, 1e-12);

  Calibration c = synthetic_calibration(20, 0.0);
  for (auto& point : c.curves[GgmlType::q4_0]) point.seconds_per_byte = 1 / 10e9;  // Q4_0 at half the speed
  const auto p = measured_performance(c);
  double expected = 0;
  for (const auto& m : w.matrices) {
    const bool down = m.name == "blk.1.ffn_down.weight";
    if (down) {
      EXPECT_EQ(m.bytes(), 256ULL * 512 / 32 * 20);  // Q4_1's own 20 bytes per 32 weights
    }
    expected += static_cast<double>(m.bytes()) / (down ? 10e9 : 20e9);
  }
  EXPECT_NEAR(p->matrix_seconds(a, w, 1, 1), expected, 1e-12);
  EXPECT_GT(output_error(w), 0);
}

// A profile calibrated before Q5_0 had kernels holds no Q5_0 curves: its matrices take the
// measured format nearest in block and bits, Q4_0, and the report says so.
TEST(Quantization, AFormatTheCalibrationDidNotMeasureTakesAMeasuredStandIn) {
  Calibration c = synthetic_calibration(20, 0.0);
  EXPECT_EQ(c.measured_as(GgmlType::q5_0), GgmlType::q5_0);
  c.curves.erase(GgmlType::q5_0);
  EXPECT_EQ(c.measured_as(GgmlType::q5_0), GgmlType::q4_0);
  c.curves.erase(GgmlType::q5_k);
  EXPECT_EQ(c.measured_as(GgmlType::q5_k), GgmlType::q4_k);  // 5.5 bits: Q4_K 1.0 away, Q6_K 1.06
  EXPECT_EQ(c.measured_as(GgmlType::q6_k), GgmlType::q6_k);

  const auto [a, w] = inventory_with_down_as(6);  // Q5_0
  EXPECT_TRUE(w.stand_ins().empty());  // Q5_0 has kernels
  for (auto& point : c.curves[GgmlType::q4_0]) point.seconds_per_byte = 1 / 10e9;
  const auto p = measured_performance(c);
  const auto stand_ins = w.stand_ins([&](GgmlType t) { return p->measured_as(t); });
  ASSERT_EQ(stand_ins.size(), 1U);
  EXPECT_EQ(stand_ins[0].type, GgmlType::q5_0);
  EXPECT_EQ(stand_ins[0].measured_as, GgmlType::q4_0);
  double expected = 0;
  for (const auto& m : w.matrices) expected += static_cast<double>(m.bytes()) / (m.name == "blk.1.ffn_down.weight" ? 10e9 : 20e9);
  EXPECT_NEAR(p->matrix_seconds(a, w, 1, 1), expected, 1e-12);
  }

// A profile whose curves name kernels this build would not pick (calibrated before a kernel
// changed, as the thirty-ninth session's Q5_0 row kernels) is reported; one whose names match,
// or that names none (older profiles), is not.
TEST(Quantization, CurvesMeasuredOnKernelsThisBuildNoLongerPicksAreStale) {
  Calibration c = synthetic_calibration(20, 0.0);
  const GemmContext ctx(1, active_level());
  const auto name_points = [&](GgmlType t) {
    for (auto& p : c.curves.at(t))
      p.kernel = std::string(ctx.kernel_name(t, static_cast<std::size_t>(p.batch), kLongRows[1], ctx.preferred_layout(t)));
  };
  name_points(GgmlType::q4_0);
  name_points(GgmlType::q8_0);
  for (auto& p : c.curves.at(GgmlType::q6_k)) p.kernel.clear();
  EXPECT_TRUE(stale_curves(c, {GgmlType::q4_0, GgmlType::q8_0, GgmlType::q6_k}).empty());  // Q6_K's points name no kernel

  c.curves.at(GgmlType::q4_0).front().kernel = "retired_kernel";
  const auto stale = stale_curves(c, {GgmlType::q4_0, GgmlType::q8_0});
  ASSERT_EQ(stale.size(), 1U);
  EXPECT_EQ(stale[0].type, GgmlType::q4_0);
  EXPECT_EQ(stale[0].measured.front(), "retired_kernel");
  EXPECT_EQ(std::count(stale[0].current.begin(), stale[0].current.end(), "retired_kernel"), 0);
  EXPECT_TRUE(stale_curves(c, {GgmlType::q8_0}).empty());  // only the formats asked about
}

TEST(Quantization, ABatchTouchesMoreExpertsAndReadsMoreBytes) {
  EXPECT_DOUBLE_EQ(expected_experts_touched(8, 2, 1), 2);
  EXPECT_NEAR(expected_experts_touched(8, 2, 2), 8 * (1 - 0.75 * 0.75), 1e-12);
  EXPECT_NEAR(expected_experts_touched(256, 8, 1000), 256, 1e-6);
  const auto a = *find_catalog_model("mixtral-8x7b");
  const WeightInventory w = weight_inventory(a, parse_quantization("Q4_0"));
  EXPECT_LT(w.step_weight_bytes(a, 1), 0.35 * static_cast<double>(w.total_bytes()));
  EXPECT_GT(w.step_weight_bytes(a, 16), 0.95 * static_cast<double>(w.total_bytes()));
}

TEST(Hardware, CatalogParsesAndBadDescriptionsAreUsageErrors) {
  const auto all = catalog_hardware();
  EXPECT_GE(all.size(), 18U);
  for (const auto& h : all) {
    EXPECT_GT(h.bandwidth_gbs, 0) << h.name;
    EXPECT_GT(h.peak_bf16_gflops, 0) << h.name;
    if (h.kind == DeviceKind::gpu) {
      EXPECT_TRUE(h.hourly_usd) << h.name;
    }
  }
  const auto h100 = *find_catalog_hardware("H100-SXM");
  EXPECT_EQ(h100.kind, DeviceKind::gpu);
  EXPECT_DOUBLE_EQ(h100.bandwidth_gbs, 3350);
  auto j = nlohmann::json::parse(R"({"kind": "cpu", "memory_gb": 64, "bandwidth_gbs": 50, "peak_tflops": {"bf16": 1}, "cores": 8, "base_ghz": 3})");
  EXPECT_NO_THROW(hardware_from_json(j, "mine"));
  j["kind"] = "tpu";
  EXPECT_THROW(hardware_from_json(j, "mine"), UsageError);
  j["kind"] = "cpu";
  j.erase("cores");
  EXPECT_THROW(hardware_from_json(j, "mine"), UsageError);
  EXPECT_THROW(hardware_from_profile(nlohmann::json::object(), "p.json"), UsageError);
  j["cores"] = 8;
  j["name"] = nlohmann::json::array();  // wrong type
  EXPECT_THROW(hardware_from_json(j, "mine"), UsageError);
  EXPECT_THROW(hardware_from_profile(nlohmann::json::parse(R"({"summary": {"dram_read_gbs": "fast"}})"), "p.json"), UsageError);
  // A profile written before the probe tidied the CPU's name still prints it without padding.
  const auto padded = nlohmann::json::parse(R"({"summary": {"dram_read_gbs": 40}, "cpu": {"brand": "AMD EPYC   9B45   "}, "topology": {"cores": 2, "total_memory_bytes": 1e9}})");
  EXPECT_EQ(hardware_from_profile(padded, "p.json").display, "this machine (AMD EPYC 9B45)");
  // Published runs: an array of whole, positive counts and a positive rate.
  j["name"] = "mine";
  const auto run = nlohmann::json::parse(R"({"model": "llama-2-7b", "quant": "F16", "devices": 1, "batch": 1, "prompt": 1, "gen": 128, "output_tps": 100})");
  j["published_runs"] = nlohmann::json::array({run});
  ASSERT_NO_THROW(hardware_from_json(j, "mine"));
  EXPECT_EQ(hardware_from_json(j, "mine").published_runs.at(0).gen, 128);
  for (const auto& [key, bad] : std::vector<std::pair<std::string, nlohmann::json>>{
           {"output_tps", 0}, {"devices", 1.5}, {"batch", -1}, {"gen", "many"}, {"model", 7}, {"prompt", 1e300}}) {
    auto broken = run;
    broken[key] = bad;
    j["published_runs"] = nlohmann::json::array({broken});
    EXPECT_THROW(hardware_from_json(j, "mine"), UsageError) << key;
  }
  j["published_runs"] = run;  // not an array
  EXPECT_THROW(hardware_from_json(j, "mine"), UsageError);
}

TEST(Cost, ReproducesThePublishedBenefitRatios) {
  EXPECT_NEAR(benefit_ratio(46841, 819, 60000, 20000), 19.1, 0.05);
  EXPECT_NEAR(benefit_ratio(45912, 257, 60000, 20000), 59.5, 0.05);
  EXPECT_THROW(benefit_ratio(0, 1, 1, 1), UsageError);
  CostInputs c;
  c.hourly_usd = 3.6;
  EXPECT_NEAR(cost_per_million_tokens(c, 1000), 1.0, 1e-12);
  CostInputs owned;
  owned.purchase_usd = 3 * 365.25 * 24;  // one dollar an hour over three years
  owned.power_w = 1000;
  owned.usd_per_kwh = 0.5;
  EXPECT_NEAR(hourly_cost(owned), 1.5, 1e-12);
  EXPECT_THROW(hourly_cost(CostInputs{}), UsageError);
}

// A curve measured while the read was R stands for another read R' by the share of its time the
// read accounts for: all of it at or above the read, a tenth for a kernel ten times slower.
TEST(Calibration, ScalesToAnotherReadByTheReadsShareOfTheTime) {
  Calibration c = synthetic_calibration(20, 0.0);
  c.curves[GgmlType::q4_0] = {{1, 1 / 25e9, 2e-9, 3e-6, "x"}, {64, 10 / 20e9, 4e-9, 5e-6, "x"}};
  c.curve_read_gbs[GgmlType::q4_0] = 20;
  c.curve_read_gbs[GgmlType::q8_0] = 40;
  c.curve_read_gbs[GgmlType::q6_k] = 30;
  EXPECT_DOUBLE_EQ(c.typical_curve_read(), 30);
  const Calibration at40 = c.at_read(40);
  // Above the read (25 GB/s against 20): all of it scales, to 50.
  EXPECT_NEAR(at40.seconds_per_byte(GgmlType::q4_0, 1), 1 / 50e9, 1e-24);
  // A tenth of the read's speed: 0.9 stays, 0.1 halves.
  EXPECT_NEAR(at40.seconds_per_byte(GgmlType::q4_0, 64), 10 / 20e9 * 0.95, 1e-22);
  EXPECT_DOUBLE_EQ(at40.seconds_per_row(GgmlType::q4_0, 64), 4e-9);
  EXPECT_DOUBLE_EQ(at40.seconds_per_call(GgmlType::q4_0, 1), 3e-6);
  // Measured at 40 already: unchanged. Without a read of its own: the profile's (20).
  EXPECT_DOUBLE_EQ(at40.seconds_per_byte(GgmlType::q8_0, 1), c.seconds_per_byte(GgmlType::q8_0, 1));
  EXPECT_NEAR(at40.seconds_per_byte(GgmlType::f16, 1), 0.5 / 20e9, 1e-24);
  for (const auto& [type, gbs] : at40.curve_read_gbs) EXPECT_DOUBLE_EQ(gbs, 40) << format_info(type).name;
  EXPECT_EQ(at40.curve_read_gbs.size(), c.curves.size());
  // Back again: the same curves.
  EXPECT_NEAR(at40.at_read(20).seconds_per_byte(GgmlType::q4_0, 64), c.seconds_per_byte(GgmlType::q4_0, 64), 1e-22);
  EXPECT_THROW((void)c.at_read(0), UsageError);
  EXPECT_THROW((void)c.at_read(std::nan("")), UsageError);
}

// The read's own variation widens the band by the share of the step its bytes take at the read:
// a bandwidth-bound decode by all of it, a compute-bound step by little.
TEST(Calibration, TheReadsVariationWidensTheBandOfTheBytes) {
  Calibration c = synthetic_calibration(20, 0.0);
  c.matrix_residual = 0;
  c.engine->residual = 0;
  c.sweep_cv = 0;
  EXPECT_DOUBLE_EQ(c.relative_band(0.9, 0.1, 0.9), 0.05);  // nothing uncertain: the floor
  c.read_cv = 0.2;
  EXPECT_NEAR(c.relative_band(0.9, 0.1, 0.9), 2 * 0.9 * 0.2, 1e-12);
  EXPECT_NEAR(c.relative_band(0.9, 0.1, 5.0), 2 * 1.0 * 0.2, 1e-12);  // at most the whole step
  EXPECT_DOUBLE_EQ(c.relative_band(0.9, 0.1, 0.0), 0.05);
  EXPECT_DOUBLE_EQ(calibration_from_json(to_json(c)).read_cv, 0.2);
  nlohmann::json negative = to_json(c);
  negative["read_cv"] = -0.1;
  EXPECT_THROW(calibration_from_json(negative), UsageError);
  nlohmann::json huge_batch = to_json(c);
  huge_batch["curves"]["Q4_0"][0]["batch"] = 1e30;
  EXPECT_THROW(calibration_from_json(huge_batch), UsageError);
  // A forecast of this machine: decode at batch 1 streams its weights, so its band carries the
  // read's variation; prefill of a long prompt is compute-bound and carries little of it.
  const Architecture a = *find_catalog_model("llama-3.1-8b");
  const WeightInventory w = weight_inventory(a, parse_quantization("Q4_0"));
  Workload load;
  load.prompt = 512;
  load.gen = 128;
  c.curves[GgmlType::q4_0] = {{1, 1 / 20e9, 0, 0, "x"}, {512, 40 / 20e9, 0, 0, "x"}};
  Calibration steady = c;
  steady.read_cv = 0;
  const ForecastRow moving = forecast_row(a, w, *measured_performance(c), load, 1, 1e12);
  const ForecastRow still = forecast_row(a, w, *measured_performance(steady), load, 1, 1e12);
  EXPECT_GT(moving.band, still.band + 0.2);
  EXPECT_LT((moving.prefill_high - moving.prefill_low) / (still.prefill_high - still.prefill_low), 1.2);
}

TEST(Calibration, InterpolatesExtendsAndRoundTrips) {
  Calibration c = synthetic_calibration(20, 0.1);
  const double b1 = 1 / 20e9;
  EXPECT_DOUBLE_EQ(c.seconds_per_byte(GgmlType::q4_0, 1), b1);
  EXPECT_NEAR(c.seconds_per_byte(GgmlType::q4_0, 4), b1 * 1.3, 1e-20);
  EXPECT_NEAR(c.seconds_per_byte(GgmlType::q4_0, 512), b1 * (1 + 0.1 * 511), 1e-18);
  c.curves.erase(GgmlType::q5_k);
  EXPECT_THROW((void)c.seconds_per_byte(GgmlType::q5_k, 1), UsageError);
  c.footprint_bytes = std::uint64_t{512} << 20;
  c.runs[0].prefill_curve_seconds_per_sequence = 0.25;
  c.runs[0].decode_curve_seconds_per_step = 0.08;
  const Calibration back = calibration_from_json(to_json(c));
  EXPECT_DOUBLE_EQ(back.seconds_per_byte(GgmlType::q8_0, 100), c.seconds_per_byte(GgmlType::q8_0, 100));
  EXPECT_EQ(back.footprint_bytes, c.footprint_bytes);  // validate's refreshes sweep the same bytes
  EXPECT_DOUBLE_EQ(back.curve_read(GgmlType::q4_0), 20);  // none recorded: the profile's read
  c.curve_read_gbs[GgmlType::q4_0] = 31.5;
  EXPECT_DOUBLE_EQ(calibration_from_json(to_json(c)).curve_read(GgmlType::q4_0), 31.5);
  nlohmann::json zero_read = to_json(c);
  zero_read["curve_read_gbs"]["Q4_0"] = 0.0;
  EXPECT_THROW(calibration_from_json(zero_read), UsageError);
  c.curve_read_gbs.clear();
  ASSERT_TRUE(back.engine);
  EXPECT_DOUBLE_EQ(back.engine->seconds_per_call, 10e-6);
  ASSERT_EQ(back.runs.size(), 1U);
  EXPECT_DOUBLE_EQ(back.runs[0].prefill_curve_seconds_per_sequence, 0.25);
  EXPECT_DOUBLE_EQ(back.runs[0].decode_curve_seconds_per_step, 0.08);
  EXPECT_DOUBLE_EQ(back.engine->seconds_per_decode_kv_byte, c.engine->seconds_per_decode_kv_byte);
  EXPECT_TRUE(back.engine->decode_attention_fitted);
  EXPECT_NO_THROW((void)measured_performance(back));
  // A calibration from before decode attention had a term of its own still loads (the shipped
  // reference lends described machines only its per-call and per-token terms), but this
  // machine's forecast asks for a new one rather than charge decode at the prefill rate.
  nlohmann::json old = to_json(c);
  old["engine"].erase("seconds_per_decode_kv_byte");
  const Calibration before = calibration_from_json(old);
  ASSERT_TRUE(before.engine);
  EXPECT_FALSE(before.engine->decode_attention_fitted);
  EXPECT_THROW((void)measured_performance(before), UsageError);
  // One from before MoE runs joined the calibration forecasts dense models still, but not a MoE
  // model, whose routed rows it never saw.
  c.engine->seconds_per_routed_row_dim = 0.4e-9;
  EXPECT_DOUBLE_EQ(calibration_from_json(to_json(c)).engine->seconds_per_routed_row_dim, 0.4e-9);
  EXPECT_TRUE(calibration_from_json(to_json(c)).engine->routed_rows_fitted);
  nlohmann::json dense_only = to_json(c);
  dense_only["engine"].erase("seconds_per_routed_row_dim");
  const Calibration no_moe = calibration_from_json(dense_only);
  EXPECT_FALSE(no_moe.engine->routed_rows_fitted);
  const auto p = measured_performance(no_moe);
  const auto dense = *find_catalog_model("tinyllama-1.1b");
  const auto moe = *find_catalog_model("mixtral-8x7b");
  EXPECT_GT(p->other_seconds(dense, decode_work(dense, 2, 100), 0, 2), 0);
  EXPECT_THROW((void)p->other_seconds(moe, decode_work(moe, 2, 100), 0, 2), UsageError);
  EXPECT_GT(measured_performance(c)->other_seconds(moe, decode_work(moe, 2, 100), 0, 2), 0);
  nlohmann::json negative = to_json(c);
  negative["engine"]["seconds_per_decode_kv_byte"] = -1e-12;
  EXPECT_THROW(calibration_from_json(negative), UsageError);
  EXPECT_THROW(calibration_from_json(nlohmann::json::parse(R"({"schema": "infercast.calibration/1"})")), UsageError);
  EXPECT_THROW(calibration_from_json(nlohmann::json::parse("[]")), UsageError);
}

TEST(Calibration, CurveResidualIsOverTheRunsThatCarryBothFigures) {
  const auto run = [](double prefill_gemm, double prefill_curve, double decode_gemm, double decode_curve) {
    CalibrationRun r;
    r.prefill_gemm_seconds_per_sequence = prefill_gemm;
    r.prefill_curve_seconds_per_sequence = prefill_curve;
    r.decode_gemm_seconds_per_step = decode_gemm;
    r.decode_curve_seconds_per_step = decode_curve;
    return r;
  };
  // Curves 10% short in decode, exact and 20% long in prefill; the third run has no prefill.
  const std::vector<CalibrationRun> runs{run(1.0, 1.0, 0.010, 0.009), run(2.0, 2.4, 0.020, 0.018), run(0, 0, 0.030, 0.027)};
  EXPECT_NEAR(curve_matrix_residual(runs), std::sqrt((3 * 0.01 + 0 + 0.04) / 5), 1e-12);
  // A calibration older than the curve figures: nothing to judge the curves by.
  EXPECT_EQ(curve_matrix_residual({run(1.0, 0, 0.01, 0)}), 0);
  EXPECT_EQ(curve_matrix_residual({}), 0);
}

TEST(Calibration, SplitsCallStreamingAndPerRowWork) {
  const double big = 2048.0 * 8192;
  const double small = 512.0 * 2048;
  const double per_byte = 1e-10;
  const double per_row = 50e-9;
  const double per_call = 20e-6;
  const auto time = [&](double bytes, std::size_t rows) { return ShapeTime{bytes, per_call + bytes * per_byte + static_cast<double>(rows) * per_row}; };
  const CurvePoint p = split_point(1, time(big, kLongRows[0]), time(big, kShortRows[0]), time(small, kSmall[0]), "k");
  EXPECT_NEAR(p.seconds_per_byte, per_byte, 1e-18);
  EXPECT_NEAR(p.seconds_per_row, per_row, 1e-15);
  EXPECT_NEAR(p.seconds_per_call, per_call, 1e-12);
  // Short rows measured faster than long ones, a small matrix slower than its share (noise):
  // no negative part.
  const CurvePoint q = split_point(1, {big, 1.0}, {big, 0.9}, {small, 0.0}, "k");
  EXPECT_EQ(q.seconds_per_row, 0);
  EXPECT_EQ(q.seconds_per_call, 0);
  EXPECT_NEAR(q.seconds_per_byte, 0.95 / big, 1e-18);
}

TEST(Calibration, OverheadFitRecoversKnownCoefficientsAndStaysNonNegative) {
  std::vector<OverheadObservation> obs;
  const EngineOverheads truth{20e-6, 3e-9, 0.2e-9, 0.05e-9, 0};
  for (double calls : {100.0, 300.0}) {
    for (double tokens : {1e5, 4e6}) {
      for (double attn : {1e6, 5e8}) {
        // Prefill steps attend at one rate, decode steps at another.
        const StepWork prefill{calls, tokens, attn, 0, 0};
        const StepWork decode{calls, tokens, 0, attn / 10, attn / 2};
        obs.push_back({0.01 + truth.seconds(prefill), 0.01, prefill});
        obs.push_back({0.01 + truth.seconds(decode), 0.01, decode});
      }
    }
  }
  EngineOverheads fit = fit_overheads(obs);
  EXPECT_EQ(fit.seconds_per_routed_row_dim, 0);  // no MoE run: nothing to fit the routed rows on
  EXPECT_TRUE(fit.routed_rows_fitted);
  // With MoE runs among them, their routed rows' work is told from the per-token work.
  EngineOverheads moe_truth = truth;
  moe_truth.seconds_per_routed_row_dim = 0.7e-9;
  for (double routed : {2e5, 3e6}) {
    StepWork w{200, 1e6, 2e7, 0, 0};
    w.routed_row_dims = routed;
    obs.push_back({0.01 + moe_truth.seconds(w), 0.01, w});
  }
  fit = fit_overheads(obs);
  EXPECT_NEAR(fit.seconds_per_routed_row_dim, moe_truth.seconds_per_routed_row_dim, 1e-13);
  EXPECT_NEAR(fit.seconds_per_call, truth.seconds_per_call, 1e-9);
  EXPECT_NEAR(fit.seconds_per_token_layer_dim, truth.seconds_per_token_layer_dim, 1e-12);
  EXPECT_NEAR(fit.seconds_per_attention_op, truth.seconds_per_attention_op, 1e-13);
  EXPECT_NEAR(fit.seconds_per_decode_kv_byte, truth.seconds_per_decode_kv_byte, 1e-14);
  EXPECT_LT(fit.residual, 1e-6);
  // Measurements faster than the matrices alone: no negative overhead, a visible residual.
  for (auto& o : obs) o.measured_seconds = 0.8 * o.matrix_seconds;
  const EngineOverheads none = fit_overheads(obs);
  EXPECT_GE(none.seconds_per_call, 0);
  EXPECT_GE(none.seconds_per_token_layer_dim, 0);
  EXPECT_GE(none.seconds_per_attention_op, 0);
  EXPECT_GE(none.seconds_per_decode_kv_byte, 0);
  EXPECT_NEAR(none.residual, 0.25, 1e-9);
}

// Thread-team starts counted as the engine makes them, decode attention in cache bytes read.
TEST(Forecast, StepWorkCountsTeamStartsAndCacheBytes) {
  const auto a = *find_catalog_model("tinyllama-1.1b");
  EXPECT_DOUBLE_EQ(decode_work(a, 1, 100).calls, parallel_operations(a.layers, 0, 1, 0, true));
  EXPECT_DOUBLE_EQ(decode_work(a, 4, 100).calls, parallel_operations(a.layers, 0, 4, 0, true));
  EXPECT_DOUBLE_EQ(decode_work(a, 3, 100).token_layer_dims, 3.0 * a.layers * a.dim);
  // Twice the context, twice the cache bytes read; an F32 cache twice an F16 one's.
  EXPECT_DOUBLE_EQ(decode_work(a, 2, 200).decode_kv_bytes, 2 * decode_work(a, 2, 100).decode_kv_bytes);
  EXPECT_DOUBLE_EQ(decode_work(a, 2, 100, 4).decode_kv_bytes, 2 * decode_work(a, 2, 100).decode_kv_bytes);
  EXPECT_DOUBLE_EQ(decode_work(a, 1, 100).decode_kv_bytes, 100.0 * static_cast<double>(kv_bytes_per_token(a, 2)));
  // Prefill reads no evicted cache; a prompt of 600 runs as chunks of 512 and 88, logits from the last.
  EXPECT_EQ(prefill_work(a, 600).decode_kv_bytes, 0);
  EXPECT_DOUBLE_EQ(prefill_work(a, 600).calls,
                   parallel_operations(a.layers, 0, 512, 0, false) + parallel_operations(a.layers, 0, 88, 0, true));
  // A dense model routes nothing; a MoE token sends a row to each of its active experts in every
  // MoE layer (DeepSeek-V3's first three layers are dense).
  EXPECT_EQ(decode_work(a, 4, 100).routed_row_dims, 0);
  const auto mixtral = *find_catalog_model("mixtral-8x7b");
  EXPECT_DOUBLE_EQ(decode_work(mixtral, 4, 100).routed_row_dims, 4.0 * mixtral.layers * 2 * mixtral.dim);
  EXPECT_DOUBLE_EQ(prefill_work(mixtral, 600).routed_row_dims, 600.0 * mixtral.layers * 2 * mixtral.dim);
  const auto v3 = *find_catalog_model("deepseek-v3");
  EXPECT_DOUBLE_EQ(decode_work(v3, 1, 100).routed_row_dims, (v3.layers - v3.moe.dense_layers) * 8.0 * v3.dim);
}

// The engine multiplies every touched expert's gate and up in one call and their down in a
// second: a MoE layer pays two starts of the threads whatever the number of experts, and each
// touched expert only the packing of its rows (what the per-call time grows by with the batch).
TEST(Forecast, AMoeLayerStartsTheThreadsTwiceForAllItsExperts) {
  Calibration with_calls = synthetic_calibration(20, 0.0);
  const double start = 5e-6;
  const double packing_per_row = 1e-6;
  for (auto& point : with_calls.curves[GgmlType::q8_0]) point.seconds_per_call = start + packing_per_row * (point.batch - 1);
  const Calibration without_calls = synthetic_calibration(20, 0.0);
  const auto a = *find_catalog_model("mixtral-8x7b");
  const WeightInventory w = weight_inventory(a, parse_quantization("Q8_0"));
  const auto call_seconds = [&](double batch) {
    return matrix_seconds(with_calls, a, w, batch, batch) - matrix_seconds(without_calls, a, w, batch, batch);
  };
  // One token: per layer Q (K and V in its call), the output projection and the two expert
  // calls (the router is F32, whose curve here has no call time); then the output head. A call
  // per expert and matrix would be 3 x 2 per layer.
  EXPECT_NEAR(call_seconds(1), start * (4.0 * a.layers + 1), 1e-12);
  // Four tokens: the dense calls pack 4 rows each; the experts' two calls start once and pack
  // each touched expert's share of the 4 x 2 routed rows.
  const double touched = expected_experts_touched(a.moe.experts, a.moe.active, 4);
  const double per_expert = 4.0 * a.moe.active / touched;
  const double dense = (start + 3 * packing_per_row) * (2.0 * a.layers + 1);
  const double experts = 2.0 * a.layers * (start + touched * packing_per_row * (per_expert - 1));
  EXPECT_NEAR(call_seconds(4), dense + experts, 1e-12);
}

TEST(Forecast, DecodeIsBytesOverMeasuredBandwidthPlusOverheads) {
  const Calibration c = synthetic_calibration(20, 0.0);
  const auto p = measured_performance(c);
  const auto a = *find_catalog_model("tinyllama-1.1b");
  const WeightInventory w = weight_inventory(a, parse_quantization("Q8_0"));
  Workload load;
  load.prompt = 100;
  load.gen = 20;
  const ForecastRow r = forecast_row(a, w, *p, load, 1, 64e9);
  double matrix_bytes = 0;
  for (const auto& m : w.matrices) matrix_bytes += static_cast<double>(m.bytes());
  const double expected = matrix_bytes / 20e9 + c.engine->seconds(decode_work(a, 1, 110));
  EXPECT_NEAR(1 / r.decode_tps_per_user, expected, 1e-9);
  EXPECT_EQ(r.bottleneck, "bandwidth");
  EXPECT_NEAR(r.decode_low, r.decode_tps_per_user * (1 - r.band), 1e-9);
  // The band weighs each part's calibration error by its share of the step.
  const double matrix = matrix_bytes / 20e9;
  const double other = expected - matrix;
  const double m = matrix * c.matrix_residual / expected;
  const double o = other * c.engine->residual / expected;
  EXPECT_NEAR(r.band, std::max(0.05, 2 * std::sqrt(m * m + o * o + c.sweep_cv * c.sweep_cv)), 1e-12);
  EXPECT_TRUE(r.memory.fits());
  EXPECT_GT(r.memory.kv_cache, 0);
  // Too little memory: capacity is the bottleneck.
  EXPECT_EQ(forecast_row(a, w, *p, load, 1, 1e9).bottleneck, "capacity");
}

TEST(Forecast, MeasuredPerformanceOutlivesTheCalibrationItWasMadeFrom) {
  // validate measures curves into a calibration of its own and lets it go; the performance
  // made from it must not point into it (under ASan a dangling one is a use after free).
  auto c = std::make_unique<Calibration>(synthetic_calibration(20, 0.0));
  const auto p = measured_performance(*c);
  c.reset();
  const auto a = *find_catalog_model("tinyllama-1.1b");
  const WeightInventory w = weight_inventory(a, parse_quantization("Q8_0"));
  double matrix_bytes = 0;
  for (const auto& m : w.matrices) matrix_bytes += static_cast<double>(m.bytes());
  EXPECT_NEAR(p->matrix_seconds(a, w, 1, 1), matrix_bytes / 20e9, 1e-9);
  EXPECT_DOUBLE_EQ(p->stream_gbs(), 20);
}

TEST(Forecast, LargestConcurrencyMeetingATargetIsTheEdge) {
  const Calibration c = synthetic_calibration(20, 0.3);
  const auto p = measured_performance(c);
  const auto a = *find_catalog_model("tinyllama-1.1b");
  const WeightInventory w = weight_inventory(a, parse_quantization("Q4_0"));
  Workload load;
  load.users = {1, 2, 4};
  load.prompt = 128;
  load.gen = 64;
  load.target_tps_per_user = 5;
  const Forecast f = forecast(a, w, "Q4_0", synthetic_cpu(), *p, load);
  ASSERT_TRUE(f.max_users_meeting_target);
  const int n = *f.max_users_meeting_target;
  ASSERT_GT(n, 0);
  EXPECT_GE(forecast_row(a, w, *p, load, n, 64e9).decode_tps_per_user, 5);
  EXPECT_LT(forecast_row(a, w, *p, load, n + 1, 64e9).decode_tps_per_user, 5);
  EXPECT_GT(f.rows[2].decode_tps, f.rows[0].decode_tps);  // aggregate grows with users
  load.prompt = 4000;
  EXPECT_THROW(forecast(a, w, "Q4_0", synthetic_cpu(), *p, load), UsageError);  // beyond the context
}

TEST(Forecast, DescribedGpuDecodeIsItsStreamingBandwidthAndSplitsAcrossDevices) {
  const Reference ref{synthetic_cpu(), synthetic_calibration(), "a test calibration"};
  const auto h100 = *find_catalog_hardware("h100-sxm");
  const auto a = *find_catalog_model("llama-3.1-8b");
  const WeightInventory w = weight_inventory(a, parse_quantization("Q8_0"));
  Workload load;
  load.prompt = 128;
  load.gen = 128;
  const auto p = described_performance(h100, ref, 1);
  EXPECT_DOUBLE_EQ(p->stream_gbs(), 3000);  // the catalog's measured figure
  const ForecastRow r = forecast_row(a, w, *p, load, 1, h100.memory_bytes);
  // A step streams the weights and pays each layer's launches and synchronization.
  EXPECT_LT(rel(1 / r.decode_tps_per_user, w.step_weight_bytes(a, 1) / 3000e9 + a.layers * gpu_launch_latency().per_layer), 0.05);
  // A 512-token prompt is compute-bound. A read of the cache per query once made its attention
  // traffic half its time here (and held an RTX 4090's forecast to a third of llama.cpp's prefill).
  load.prompt = 512;
  const ForecastRow prompt = forecast_row(a, w, *p, load, 1, h100.memory_bytes);
  EXPECT_LT(prompt.prefill_other_seconds, 0.1 * prompt.prefill_matrix_seconds);
  load.prompt = 128;
  EXPECT_NE(p->basis().find("not measured"), std::string::npos);
  // 70B in F16 (141 GB) does not fit one 80 GB card; two hold it and decode faster.
  const auto big = *find_catalog_model("llama-3.1-70b");
  const WeightInventory f16 = weight_inventory(big, parse_quantization("F16"));
  EXPECT_FALSE(memory_fit(big, f16, load, 1, h100.memory_bytes).fits());
  EXPECT_TRUE(memory_fit(big, f16, load, 1, 2 * h100.memory_bytes).fits());
  const auto two = described_performance(h100, ref, 2);
  EXPECT_GT(forecast_row(big, f16, *two, load, 1, 2 * h100.memory_bytes).decode_tps_per_user,
            1.5 * forecast_row(big, f16, *p, load, 1, 2 * h100.memory_bytes).decode_tps_per_user);
  // A described CPU with no measurement of its own learns the catalog's streaming fraction.
  const auto epyc = *find_catalog_hardware("epyc-9965");
  const auto cpu = described_performance(epyc, ref, 1);
  EXPECT_LT(cpu->stream_gbs(), epyc.bandwidth_gbs);
  EXPECT_GT(cpu->stream_gbs(), 0.5 * epyc.bandwidth_gbs);
}

// The engine splits a step's per-token work among its threads by token, so a described CPU
// with more cores than the reference does a batch's in fewer seconds; one token runs inline on
// either. Team starts scale by clock alone.
TEST(Forecast, ADescribedCpuSplitsABatchsPerTokenWorkAmongItsCores) {
  const Reference ref{synthetic_cpu(), synthetic_calibration(), "a test calibration"};
  Hardware many = synthetic_cpu();
  many.cores = 16;
  const auto a = *find_catalog_model("llama-3.1-8b");
  const auto p = described_performance(many, ref, 1);
  const EngineOverheads& e = *ref.calibration.engine;
  for (double batch : {1.0, 2.0, 8.0, 16.0, 64.0}) {
    const StepWork work = decode_work(a, batch, 300);
    const double busy_there = std::min(batch, 2.0);
    const double busy_here = std::min(batch, 16.0);
    const double expected = work.calls * e.seconds_per_call + work.token_layer_dims * e.seconds_per_token_layer_dim * busy_there / busy_here;
    EXPECT_NEAR(p->overhead_seconds(work, batch), expected, 1e-12 * expected) << batch;
  }
  // A MoE layer's routed rows are split with their tokens.
  Reference moe_ref = ref;
  moe_ref.calibration.engine->seconds_per_routed_row_dim = 0.5e-9;
  const auto mixtral = *find_catalog_model("mixtral-8x7b");
  const StepWork routed = decode_work(mixtral, 8, 300);
  const EngineOverheads& m = *moe_ref.calibration.engine;
  const double routed_expected = routed.calls * m.seconds_per_call +
                                 (routed.token_layer_dims * m.seconds_per_token_layer_dim + routed.routed_row_dims * m.seconds_per_routed_row_dim) * 2 / 8;
  EXPECT_NEAR(described_performance(many, moe_ref, 1)->overhead_seconds(routed, 8), routed_expected, 1e-12 * routed_expected);
  EXPECT_GT(routed_expected, p->overhead_seconds(routed, 8));
  // A prompt keeps as many threads busy as a chunk has tokens.
  const StepWork prompt = prefill_work(a, 2048);
  EXPECT_NEAR(p->overhead_seconds(prompt, 2048),
              prompt.calls * e.seconds_per_call + prompt.token_layer_dims * e.seconds_per_token_layer_dim * 2 / 16, 1e-15);
  // At half the clock everything takes twice as long; a GPU has no engine overheads.
  Hardware slow = many;
  slow.base_ghz = many.base_ghz / 2;
  const StepWork work = decode_work(a, 8, 300);
  EXPECT_NEAR(described_performance(slow, ref, 1)->overhead_seconds(work, 8), 2 * p->overhead_seconds(work, 8), 1e-15);
  EXPECT_EQ(described_performance(*find_catalog_hardware("h100-sxm"), ref, 1)->overhead_seconds(work, 8), 0);
  // Attention is one task per token and KV head (8 here): one user with a short cache keeps 8 of
  // the 16 cores busy.
  const auto attention_per_op = [&](double batch, double context) {
    const StepWork w = decode_work(a, batch, context);
    const double kv = batch * context * static_cast<double>(kv_bytes_per_token(a, 2));
    return (p->other_seconds(a, w, kv, batch) - p->overhead_seconds(w, batch) - kv / (p->stream_gbs() * 1e9)) / w.decode_attention_ops;
  };
  EXPECT_NEAR(attention_per_op(1, 100), 2 * attention_per_op(2, 100), 1e-9 * attention_per_op(1, 100));
  EXPECT_NEAR(attention_per_op(4, 100), attention_per_op(2, 100), 1e-9 * attention_per_op(1, 100));
  // A cache of 4096 positions is cut in two parts for the other 8 cores.
  EXPECT_NEAR(attention_per_op(1, 4096), attention_per_op(2, 4096), 1e-9 * attention_per_op(1, 4096));
}

// The bottleneck names the largest part of a decode step: its bytes at streaming bandwidth, the
// engine's fixed costs, or the operations (what neither explains). Once a step dominated by
// overheads was called "compute".
TEST(Forecast, TheBottleneckIsTheLargestPartOfAStep) {
  const auto a = *find_catalog_model("tinyllama-1.1b");
  const WeightInventory w = weight_inventory(a, parse_quantization("Q4_0"));
  Workload load;
  load.prompt = 100;
  load.gen = 20;
  Calibration slow_starts = synthetic_calibration(20, 0.0);
  slow_starts.engine->seconds_per_call = 1e-3;
  const ForecastRow overhead = forecast_row(a, w, *measured_performance(slow_starts), load, 4, 64e9);
  EXPECT_EQ(overhead.bottleneck, "overhead");
  EXPECT_GT(overhead.decode_overhead_seconds, 0.5 / overhead.decode_tps_per_user);
  EXPECT_NEAR(overhead.decode_overhead_seconds, slow_starts.engine->seconds({decode_work(a, 4, 110).calls, decode_work(a, 4, 110).token_layer_dims, 0, 0, 0}),
              1e-12);
  // Products whose time grows with the batch far past their bytes' are compute-bound.
  const ForecastRow compute = forecast_row(a, w, *measured_performance(synthetic_calibration(20, 1.0)), load, 64, 64e9);
  EXPECT_EQ(compute.bottleneck, "compute");
  EXPECT_EQ(forecast_row(a, w, *measured_performance(synthetic_calibration(20, 0.0)), load, 1, 64e9).bottleneck, "bandwidth");
}

// A described CPU's compute comes from the reference's fraction of the peak of the family its
// kernels ran on: INT8 on the vector units for the interleaved and VNNI kernels of the block
// formats, FP32 for the float kernels the AVX-512 table names "avx512_vnni", the BF16 dot for
// the BF16 kernels. Read from the kernel's name alone, the interleaved kernels were held to the
// FP32 peak, which they pass, and the fraction was capped at 1.
TEST(Forecast, DescribedCpuComputeFollowsTheFamilyItsKernelsRanOn) {
  Calibration c = synthetic_calibration(20, 0.1);
  for (auto& [type, points] : c.curves) {
    const bool integer = format_info(type).activation != GgmlType::f32;
    for (auto& q : points) q.kernel = type == GgmlType::bf16 ? "avx512_bf16_round" : integer ? "avx512_x8" : "avx512_vnni";
  }
  Hardware ref_cpu = synthetic_cpu();
  ref_cpu.peak_vector_int8_gops = 800;  // the batch-256 Q4_0 point runs 687 GOPS: 0.86 of it
  const Reference ref{ref_cpu, c, "a test calibration"};
  Hardware big = synthetic_cpu();
  big.cores = 64;
  big.bandwidth_gbs = big.stream_gbs.emplace(5000);
  big.peak_fp32_gflops = 2000;
  big.peak_bf16_gflops = 8000;
  big.peak_vector_int8_gops = 20000;
  const auto a = *find_catalog_model("llama-3.1-8b");
  const auto seconds = [&](const Hardware& h, const char* quant) {
    return described_performance(h, ref, 1)->matrix_seconds(a, weight_inventory(a, parse_quantization(quant)), 256, 0);
  };
  Hardware more_int8 = big;
  more_int8.peak_vector_int8_gops *= 2;
  Hardware more_fp32 = big;
  more_fp32.peak_fp32_gflops *= 2;
  Hardware more_bf16 = big;
  more_bf16.peak_bf16_gflops *= 2;
  // Q8_0 keeps every matrix in Q8_0; F16 and BF16 keep theirs in the float formats.
  EXPECT_LT(rel(seconds(more_int8, "Q8_0"), seconds(big, "Q8_0") / 2), 0.02);
  EXPECT_LT(rel(seconds(more_fp32, "Q8_0"), seconds(big, "Q8_0")), 0.001);
  EXPECT_LT(rel(seconds(more_fp32, "F16"), seconds(big, "F16") / 2), 0.02);
  EXPECT_LT(rel(seconds(more_int8, "F16"), seconds(big, "F16")), 0.001);
  EXPECT_LT(rel(seconds(more_bf16, "BF16"), seconds(big, "BF16") / 2), 0.02);
  EXPECT_LT(rel(seconds(more_fp32, "BF16"), seconds(big, "BF16")), 0.001);
}

// An efficiency measured on AMX tiles is a fraction of a peak twenty times the vector units'.
// A CPU without tiles once took that fraction of its vector peak for every batch the reference
// ran on tiles: an 8B model on a 96-core EPYC forecast 153 tokens/s at 4 users and 29 at 8,
// with a prefill of 90 tokens/s. Its vector units take those batches at the best efficiency the
// reference's vector kernels showed.
TEST(Forecast, ADescribedCpuWithoutTilesRunsTheirBatchesOnItsVectorUnits) {
  const Calibration c = synthetic_calibration(20, 0.1);  // batches of 8 and more on amx_int8
  Hardware tiles = synthetic_cpu();
  tiles.amx = true;
  tiles.peak_vector_int8_gops = 400;
  const Reference ref{tiles, c, "a test calibration with tiles"};
  Hardware vector = synthetic_cpu();
  vector.cores = 64;
  vector.bandwidth_gbs = vector.stream_gbs.emplace(400);
  vector.peak_int8_gops = vector.peak_vector_int8_gops = 20000;
  const auto a = *find_catalog_model("llama-3.1-8b");
  const WeightInventory w = weight_inventory(a, parse_quantization("Q8_0"));
  const auto aggregate = [&](const Hardware& h, double batch) {
    return batch / described_performance(h, ref, 1)->matrix_seconds(a, w, batch, batch);
  };
  double last = 0;
  for (double b : {1.0, 2.0, 4.0, 8.0, 16.0, 64.0, 256.0}) {
    EXPECT_GE(aggregate(vector, b), last) << "batch " << b;
    last = aggregate(vector, b);
  }
  // Compute-bound at 256: the vector peak sets the time, not the INT8 (tile) one...
  Hardware more_vector = vector;
  more_vector.peak_vector_int8_gops *= 2;
  EXPECT_LT(rel(aggregate(more_vector, 256), 2 * aggregate(vector, 256)), 0.02);
  // ...and a machine with tiles takes the reference's tile efficiency of its own tile peak.
  Hardware with_tiles = vector;
  with_tiles.amx = true;
  with_tiles.peak_int8_gops = 200000;
  Hardware more_tiles = with_tiles;
  more_tiles.peak_int8_gops *= 2;
  EXPECT_LT(rel(aggregate(more_tiles, 256), 2 * aggregate(with_tiles, 256)), 0.02);
  EXPECT_NE(described_performance(vector, ref, 1)->basis().find("best vector-kernel efficiency"), std::string::npos);
  EXPECT_EQ(described_performance(with_tiles, ref, 1)->basis().find("best vector-kernel efficiency"), std::string::npos);
}

TEST(Forecast, ADescribedMachineLearnsFromAReferenceOfItsKind) {
  Hardware local = synthetic_cpu();
  Hardware tiles = synthetic_cpu();
  tiles.amx = true;
  const std::vector<Reference> both{{local, synthetic_calibration(), "local"}, {tiles, synthetic_calibration(), "tiles"}};
  Hardware xeon = synthetic_cpu();
  xeon.amx = true;
  EXPECT_EQ(reference_for(xeon, both).origin, "tiles");
  EXPECT_EQ(reference_for(synthetic_cpu(), both).origin, "local");  // the first of its kind
  EXPECT_EQ(reference_for(synthetic_cpu(), {both[1]}).origin, "tiles");  // none of its kind: the first
  EXPECT_THROW(reference_for(xeon, {}), UsageError);
  // infercast ships one of each kind, calibrated.
  const std::vector<Reference> shipped = shipped_references();
  EXPECT_TRUE(std::any_of(shipped.begin(), shipped.end(), [](const Reference& r) { return r.hardware.amx; }));
  EXPECT_TRUE(std::any_of(shipped.begin(), shipped.end(), [](const Reference& r) { return !r.hardware.amx; }));
  for (const Reference& r : shipped) {
    EXPECT_TRUE(r.calibration.engine) << r.origin;
    for (const char* q : {"Q4_0", "Q8_0", "Q4_K", "Q6_K", "F16", "BF16"}) EXPECT_TRUE(r.calibration.has(*parse_format(q))) << r.origin << " " << q;
  }
}

// Every catalog CPU, learning from the shipped reference of its kind: more users never lower the
// aggregate decode by more than the step between two measured batches can (10%), and a prompt
// goes through faster than one user's decode.
TEST(Catalog, EveryCpuForecastServesMoreUsersAtLeastAsFast) {
  const std::vector<Reference> refs = shipped_references();
  const auto a = *find_catalog_model("llama-3.1-8b");
  Workload load;
  load.users = {1, 2, 4, 8, 16, 32, 64};
  load.prompt = 512;
  load.gen = 128;
  for (const char* quant : {"Q4_K_M", "Q8_0", "F16"}) {
    const WeightInventory w = weight_inventory(a, parse_quantization(quant));
    for (const Hardware& h : catalog_hardware()) {
      if (h.kind != DeviceKind::cpu) continue;
      const auto p = described_performance(h, reference_for(h, refs), 1);
      const Forecast f = forecast(a, w, quant, h, *p, load, 1);
      for (std::size_t i = 1; i < f.rows.size(); ++i) {
        EXPECT_GE(f.rows[i].decode_tps, 0.9 * f.rows[i - 1].decode_tps) << h.name << " " << quant << " at " << f.rows[i].users << " users";
      }
      EXPECT_GT(f.rows[0].prefill_tps, f.rows[0].decode_tps) << h.name << " " << quant;
    }
  }
}

// A GPU decode step pays a fixed time per layer (launches, synchronization, kernels too short
// to reach the roofline), learned from the catalog's published runs of other engines. Each run,
// forecast with the latency learned from the others alone, must come within 25% of what was
// published: the runs agree with each other, not only with their own fit.
TEST(Forecast, AGpuDecodeStepPaysALaunchLatencyLearnedFromPublishedRuns) {
  const GpuLaunchLatency& l = gpu_launch_latency();
  ASSERT_GE(l.samples.size(), 6U);
  EXPECT_GT(l.per_layer, 10e-6);
  EXPECT_LT(l.per_layer, 300e-6);
  EXPECT_GE(l.per_layer_parallel, 0);
  const auto median_without = [&](std::size_t skip, bool parallel) {
    std::vector<double> v;
    for (std::size_t j = 0; j < l.samples.size(); ++j) {
      if (j != skip && (l.samples[j].run.devices > 1) == parallel) v.push_back(l.samples[j].seconds_per_layer_step);
    }
    return v.empty() ? 0.0 : median_of(v);
  };
  for (std::size_t i = 0; i < l.samples.size(); ++i) {
    const LaunchLatencySample& s = l.samples[i];
    const auto a = *find_catalog_model(s.run.model);
    const double single = median_without(i, false);
    const double latency = s.run.devices == 1 ? single : median_without(i, true);
    const double measured = s.run.batch * s.run.gen / s.run.output_tps;
    // The sample is the run's excess per layer and step over the forecast without latency.
    const double forecast = measured - (s.seconds_per_layer_step - latency) * s.run.gen * a.layers;
    EXPECT_LT(rel(measured / forecast, 1.0), 0.25) << s.gpu << " " << s.run.model << " " << s.run.quant << " x" << s.run.devices;
  }
  // The forecast of a published run with the learned latency is what the samples say it is.
  const Reference none{};
  const auto& first = l.samples.front();
  const auto h = *find_catalog_hardware(first.gpu);
  const auto a = *find_catalog_model(first.run.model);
  const WeightInventory w = weight_inventory(a, parse_quantization(first.run.quant));
  const double measured = first.run.batch * first.run.gen / first.run.output_tps;
  const double expected = measured - (first.seconds_per_layer_step - l.per_layer) * first.run.gen * a.layers;
  EXPECT_LT(rel(published_run_seconds(a, w, *described_performance(h, none, 1), first.run), expected), 1e-9);
  // One user of a 70B model across four H200s waits on launches, not on memory.
  const auto h200 = *find_catalog_hardware("h200-sxm");
  const auto big = *find_catalog_model("llama-3.1-70b");
  Workload load;
  load.prompt = 128;
  load.gen = 128;
  const auto four = described_performance(h200, none, 4);
  const ForecastRow one = forecast_row(big, weight_inventory(big, parse_quantization("Q4_K_M")), *four, load, 1, 4 * h200.memory_bytes);
  EXPECT_EQ(one.bottleneck, "latency");
  EXPECT_DOUBLE_EQ(one.decode_launch_seconds, big.layers * (l.per_layer + l.per_layer_parallel));
  EXPECT_NE(four->basis().find("published runs"), std::string::npos);
}

// A prompt's keys and values go to memory once and come back once per tile of 128 queries.
TEST(Forecast, APromptReadsItsCacheOncePerTileOfQueries) {
  EXPECT_DOUBLE_EQ(prefill_kv_bytes(1, 100), 100 * (1 + 1));
  EXPECT_DOUBLE_EQ(prefill_kv_bytes(128, 100), 100 * (128 + 128));
  EXPECT_DOUBLE_EQ(prefill_kv_bytes(200, 100), 100 * (200 + 128 + 200));
  EXPECT_DOUBLE_EQ(prefill_kv_bytes(512, 100), 100 * (512 + 128 + 256 + 384 + 512));
  // Quadratic in the prompt, but with a 128th of the slope of a read per query.
  EXPECT_LT(prefill_kv_bytes(8192, 1), 8192.0 * 8193 / 2 / 100);
}

TEST(Validate, RefusesToJudgeWhatWasFittedOn) {
  const Calibration c = synthetic_calibration();
  ValidateOptions o;
  o.threads = 2;
  EXPECT_NO_THROW(check_held_out(o, c));
  o.quants = {"Q4_0", "f16"};
  EXPECT_THROW(check_held_out(o, c), UsageError);
  o.quants = {"Q4_0"};
  o.concurrencies = {1, 3};
  EXPECT_THROW(check_held_out(o, c), UsageError);
  o.concurrencies = {1};
  o.models = {{"calibration-0.94b", {}}};
  EXPECT_THROW(check_held_out(o, c), UsageError);
  o.models = validation_models();
  o.threads = 1;
  EXPECT_THROW(check_held_out(o, c), UsageError);  // calibrated at another thread count
  o.threads = 2;
  o.settled_read = -0.1;
  EXPECT_THROW(check_held_out(o, c), UsageError);
  o.settled_read = 0.1;
  o.unsettled_retries = 6;
  EXPECT_THROW(check_held_out(o, c), UsageError);
  o.unsettled_retries = 0;
  EXPECT_NO_THROW(check_held_out(o, c));
  // A calibration without MoE runs judges dense models only, and says so before any run.
  Calibration dense_only = c;
  dense_only.engine->routed_rows_fitted = false;
  EXPECT_NO_THROW(check_held_out(o, dense_only));
  o.models = moe_validation_models();
  EXPECT_NO_THROW(check_held_out(o, c));
  EXPECT_THROW(check_held_out(o, dense_only), UsageError);
}

// The calibration fits on a dense and a MoE model that validate never judges, in formats and at
// concurrencies it never uses.
TEST(Validate, TheCalibrationPlanIsHeldOutFromEveryValidationModel) {
  const CalibrationPlan& plan = calibration_plan();
  const ValidateOptions defaults;
  std::vector<ValidationModel> judged = validation_models();
  for (auto& m : moe_validation_models()) judged.push_back(m);
  bool has_moe = false;
  for (const auto& cm : plan.models) {
    has_moe = has_moe || cm.shape.experts > 0;
    for (const auto& vm : judged) {
      EXPECT_NE(cm.name, vm.name);
      EXPECT_FALSE(cm.shape.experts == vm.shape.experts && cm.shape.active_experts == vm.shape.active_experts && cm.shape.dim == vm.shape.dim)
          << cm.name << " has " << vm.name << "'s shape";
    }
    for (const auto& q : cm.quants) EXPECT_EQ(std::find(defaults.quants.begin(), defaults.quants.end(), q), defaults.quants.end()) << q;
  }
  EXPECT_TRUE(has_moe);
  for (int conc : plan.concurrencies) {
    EXPECT_EQ(std::find(defaults.concurrencies.begin(), defaults.concurrencies.end(), conc), defaults.concurrencies.end()) << conc;
  }
}

TEST(Validate, ChoosesDenseAndMoeModelsByName) {
  const auto chosen = validation_models_named({"validate-moe-fine", "tinyllama-1.1b", "moe-mini"});
  ASSERT_EQ(chosen.size(), 3U);
  EXPECT_EQ(chosen[0].shape.experts, 64);
  EXPECT_EQ(chosen[0].shape.active_experts, 8);
  EXPECT_EQ(chosen[1].shape.experts, 0);
  EXPECT_EQ(chosen[2].shape.experts, 8);
  EXPECT_EQ(chosen[2].shape.active_experts, 2);
  EXPECT_THROW(validation_models_named({"gpt-5"}), UsageError);
  // None of them is the calibration's model.
  ValidateOptions o;
  o.threads = 2;
  o.models = chosen;
  EXPECT_NO_THROW(check_held_out(o, synthetic_calibration()));
}

TEST(Validate, RunsTheEngineAndSetsTheForecastBesideIt) {
  const Calibration c = synthetic_calibration(20, 0.05);
  ValidateOptions o;
  o.threads = 2;
  o.work_dir = temp_path("validate");
  o.models = {{"tiny", llama_shape(2, 256, 512, 4, 2, 300)}, {"tinier", llama_shape(1, 256, 256, 4, 2, 300)}};
  o.quants = {"Q8_0", "Q4_0"};
  o.concurrencies = {1, 2};
  o.prompt = 8;
  o.gen = 4;
  o.repeats = 2;
  o.refresh_kernels = false;  // the synthetic curves stay: the test checks the loop, not the machine
  o.read_bytes = std::uint64_t{4} << 20;
  o.settled_read = 0;
  o.unsettled_retries = 1;
  const ValidationReport r = validate_forecast(o, c);
  ASSERT_EQ(r.rows.size(), 8U);
  // Reported in plan order (format, model, concurrency) although the second pass ran the
  // models the other way round.
  const std::vector<std::string> models{"tiny", "tiny", "tinier", "tinier", "tiny", "tiny", "tinier", "tinier"};
  double worst = 0;
  double worst_at_reads = 0;
  for (std::size_t i = 0; i < r.rows.size(); ++i) {
    const auto& row = r.rows[i];
    EXPECT_EQ(row.model, models[i]);
    EXPECT_EQ(row.quant, i < 4 ? "Q8_0" : "Q4_0");
    EXPECT_EQ(row.concurrency, i % 2 == 0 ? 1 : 2);
    EXPECT_EQ(row.runs, 2);
    EXPECT_GT(row.measured_decode_tps, 0);
    EXPECT_GT(row.predicted_decode_tps, 0);
    EXPECT_GT(row.measured_prefill_tps, 0);
    EXPECT_LE(row.decode_low, row.predicted_decode_tps);
    // The forecast's step split adds up to its rate (its curves are fixed, so every pass agrees);
    // the measured split is the engine's.
    EXPECT_GT(row.predicted_step_matrix_seconds, 0);
    EXPECT_GT(row.predicted_step_other_seconds, 0);
    EXPECT_NEAR(row.concurrency / (row.predicted_step_matrix_seconds + row.predicted_step_other_seconds), row.predicted_decode_tps,
                1e-9 * row.predicted_decode_tps);
    EXPECT_GT(row.measured_step_matrix_seconds, 0);
    EXPECT_GT(row.measured_step_other_seconds, 0);
    // One prompt's split likewise: the forecast's adds up to its prefill rate.
    EXPECT_NEAR(o.prompt / (row.predicted_prompt_matrix_seconds + row.predicted_prompt_other_seconds), row.predicted_prefill_tps,
                1e-9 * row.predicted_prefill_tps);
    EXPECT_GT(row.measured_prompt_matrix_seconds, 0);
    EXPECT_GT(row.measured_prompt_other_seconds, 0);
    // The row is one of its passes, paired: its error is that pass's own.
    ASSERT_EQ(row.decode_pass_errors.size(), 2U);
    ASSERT_EQ(row.prefill_pass_errors.size(), 2U);
    ASSERT_TRUE(row.decode_pass == 0 || row.decode_pass == 1);
    EXPECT_NEAR(row.decode_error(), row.decode_pass_errors[static_cast<std::size_t>(row.decode_pass)], 1e-12);
    EXPECT_NEAR(row.prefill_error(), row.prefill_pass_errors[static_cast<std::size_t>(row.prefill_pass)], 1e-12);
    worst = std::max(worst, std::abs(row.decode_error()));
    // The forecast at the read around the run is faster than the headline one, made at the
    // curves' own read, exactly when the run's read was higher than theirs.
    EXPECT_GT(row.read_gbs, 0);
    EXPECT_NEAR(row.read_gbs, 0.5 * (row.read_before_gbs + row.read_after_gbs), 1e-9 * row.read_gbs);
    // No tolerance: every run is unsettled (two medians of measured reads are never equal), so
    // each of the two passes runs it once more and keeps the second try.
    EXPECT_EQ(row.reruns, 2);
    EXPECT_DOUBLE_EQ(row.curve_read_gbs, 20);
    EXPECT_EQ(row.predicted_decode_tps_at_run_read > row.predicted_decode_tps, row.read_gbs > row.curve_read_gbs);
    worst_at_reads = std::max(worst_at_reads, std::abs(row.decode_error_at_run_read()));
    // A dense model's step reads every matrix and its tokens' embedding rows: the forecast's
    // count, less only the norm vectors it adds (1.5% of these tiny models' bytes).
    EXPECT_GT(row.measured_step_weight_bytes, 0.97 * row.predicted_step_weight_bytes);
    EXPECT_LE(row.measured_step_weight_bytes, row.predicted_step_weight_bytes);
  }
  EXPECT_DOUBLE_EQ(r.worst_decode_error, worst);
  EXPECT_DOUBLE_EQ(r.worst_decode_error_at_run_read, worst_at_reads);
  EXPECT_FALSE(std::filesystem::exists(o.work_dir + "/tiny-Q8_0-s11.gguf"));  // not kept
  EXPECT_FALSE(std::filesystem::exists(o.work_dir + "/tinier-Q4_0-s11.gguf"));
  std::filesystem::remove_all(o.work_dir);
}

TEST(Validate, AFailedRunLeavesNoGeneratedModelBehind) {
  const Calibration c = synthetic_calibration(20, 0.05);
  ValidateOptions o;
  o.threads = 2;
  o.work_dir = temp_path("validate-fails");
  o.models = {{"tiny", llama_shape(2, 256, 512, 4, 2, 300, 64)}};
  o.quants = {"Q8_0"};
  o.concurrencies = {1};
  o.prompt = 100;  // longer than the model's context of 64: the run fails after generation
  o.gen = 4;
  o.repeats = 1;
  o.refresh_kernels = false;
  EXPECT_THROW(validate_forecast(o, c), UsageError);
  EXPECT_FALSE(std::filesystem::exists(o.work_dir + "/tiny-Q8_0-s11.gguf"));
  std::filesystem::remove_all(o.work_dir);
}

// A host that slows in one pass slows its curves and its runs alike; the paired pass keeps the
// forecast beside the run it was made for.
TEST(Validate, ARowIsItsPassOfMedianPairedError) {
  // Pass 1 ran on a slow host: forecast and measurement both low, and close.
  const std::vector<double> predicted{100, 70, 130};
  const std::vector<double> measured{72, 98, 128};
  // Ratios 1.39, 0.71, 1.02: the median is pass 2's (the columns' medians, 100 and 98, are
  // from different passes).
  EXPECT_EQ(median_pass(predicted, measured), 2U);
  EXPECT_EQ(median_pass({1.0}, {2.0}), 0U);
  // An even count takes the lower middle ratio; ties keep pass order.
  EXPECT_EQ(median_pass({1.0, 3.0, 2.0, 4.0}, {1.0, 1.0, 1.0, 1.0}), 2U);
  EXPECT_EQ(median_pass({1.0, 1.0, 1.0}, {1.0, 1.0, 1.0}), 1U);
  EXPECT_THROW(median_pass({}, {}), UsageError);
  EXPECT_THROW(median_pass({1.0, 2.0}, {1.0}), UsageError);
}

TEST(Validate, EachPassStartsWithAnotherModel) {
  EXPECT_EQ(pass_order(3, 0), (std::vector<std::size_t>{0, 1, 2}));
  // Over three passes every model runs once in each position.
  std::vector<std::vector<int>> seen(3, std::vector<int>(3, 0));
  for (int pass = 0; pass < 3; ++pass) {
    const auto order = pass_order(3, pass);
    ASSERT_EQ(order.size(), 3U);
    for (std::size_t at = 0; at < 3; ++at) ++seen[order[at]][at];
  }
  for (const auto& model : seen) EXPECT_EQ(model, (std::vector<int>{1, 1, 1}));
  EXPECT_EQ(pass_order(1, 5), (std::vector<std::size_t>{0}));
  EXPECT_TRUE(pass_order(0, 2).empty());
}

}  // namespace
}  // namespace infercast
