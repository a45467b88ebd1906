// The front end's contract with users: bad input gets one line on stderr and exit status 2,
// and never a crash or a half-written file.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tests/gguf_patch.h"

namespace fs = std::filesystem;
using infercast::set_tensor_type;

namespace {
struct Result {
  int status = -1;
  std::string out, err;
};

Result run(const std::string& args) {
  const fs::path err_file = fs::temp_directory_path() / ("infercast-cli-err-" + std::to_string(::getpid()));
  const std::string cmd = std::string(INFERCAST_BINARY) + " " + args + " 2>" + err_file.string();
  Result r;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buf{};
  while (fgets(buf.data(), buf.size(), pipe) != nullptr) r.out += buf.data();
  const int status = pclose(pipe);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream in(err_file);
  std::stringstream s;
  s << in.rdbuf();
  r.err = s.str();
  fs::remove(err_file);
  return r;
}

int lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

void expect_usage_error(const std::string& args, const std::string& needle) {
  const Result r = run(args);
  EXPECT_EQ(r.status, 2) << args << "\n" << r.err;
  EXPECT_EQ(lines(r.err), 1) << args << "\n" << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << args << "\n" << r.err;
}
}  // namespace

TEST(Cli, VersionNeedsNoSubcommand) {
  const Result r = run("--version");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.rfind("infercast ", 0), 0U) << r.out;
  EXPECT_EQ(lines(r.out), 1) << r.out;
  EXPECT_EQ(run("").status, 2);  // without --version a subcommand is still required
}

TEST(Cli, BadOptionsExitWithStatusTwo) {
  expect_usage_error("probe --threads 0 --out ''", "--threads");
  expect_usage_error("probe --threads 100000 --out ''", "--threads");
  expect_usage_error("probe --max-memory 900TiB --out ''", "--max-memory");
  expect_usage_error("probe --max-memory lots --out ''", "--max-memory");
  expect_usage_error("probe --isa sse9 --out ''", "--isa");
  expect_usage_error("probe --bogus", "bogus");
  expect_usage_error("probe --threads abc", "--threads");
  expect_usage_error("", "subcommand");
}

TEST(Cli, UnwritableOutputFailsBeforeProbing) {
  expect_usage_error("probe --quick --out /nonexistent-dir/profile.json", "cannot write");
  expect_usage_error("probe --quick --out /tmp", "cannot write");
}

TEST(Cli, BadEnvironmentIsAUsageError) {
  for (const auto& [name, value] : {std::pair{"INFERCAST_ISA", "bogus"}, std::pair{"INFERCAST_PREFETCH", "t0"}}) {
    setenv(name, value, 1);
    const Result r = run("probe --quick --out ''");
    unsetenv(name);
    EXPECT_EQ(r.status, 2) << name;
    EXPECT_EQ(lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find(name), std::string::npos) << r.err;
  }
}

TEST(Cli, QuickProbeWritesAProfileAtomically) {
  const fs::path out = fs::temp_directory_path() / ("infercast-cli-" + std::to_string(::getpid()) + ".json");
  {
    std::ofstream old(out);
    old << "earlier results";
  }
  // A failing run leaves the earlier file alone.
  EXPECT_EQ(run("probe --threads 0 --out " + out.string()).status, 2);
  {
    std::ifstream in(out);
    std::string text;
    std::getline(in, text);
    EXPECT_EQ(text, "earlier results");
  }
  const Result r = run("probe --quick --max-memory 8MiB --min-time 0.0005 --isa avx2 --out " + out.string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("DRAM read"), std::string::npos);
  std::ifstream in(out);
  const auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j["schema"], "infercast.profile/1");
  EXPECT_EQ(j["summary"]["peak_amx_int8_gops"], nullptr);  // AVX2 cap: no AMX
  fs::remove(out);

  const Result json = run("probe --quick --max-memory 8MiB --min-time 0.0005 --json --out ''");
  ASSERT_EQ(json.status, 0) << json.err;
  EXPECT_EQ(nlohmann::json::parse(json.out)["schema"], "infercast.profile/1");
}

namespace {
// A profile with the ceilings `infercast kernels` reads; the rest of a probe profile is
// irrelevant to it and must survive the update untouched.
fs::path write_profile(const std::string& name, const std::string& text) {
  const fs::path p = fs::temp_directory_path() / (name + "-" + std::to_string(::getpid()) + ".json");
  std::ofstream(p) << text;
  return p;
}
const char* kProfile = R"({"schema": "infercast.profile/1", "keep": [1, 2, 3],
  "summary": {"dram_read_gbs": 20.0, "peak_fp32_gflops": 200.0, "peak_int8_vnni_gops": 500.0,
              "peak_bf16_gflops": 100.0, "peak_amx_int8_gops": null, "peak_amx_bf16_gflops": null}})";
// The `kernels` section `infercast kernels` wrote into a profile.
nlohmann::json kernels_section(const fs::path& profile) {
  std::ifstream in(profile);
  return nlohmann::json::parse(in).at("kernels");
}
}  // namespace

TEST(CliKernels, BadInputExitsWithStatusTwo) {
  const fs::path good = write_profile("kernels-good", kProfile);
  const fs::path broken = write_profile("kernels-broken", "{\"summary\": ");
  const fs::path empty = write_profile("kernels-empty", "{}");
  const std::string p = " --profile " + good.string();
  expect_usage_error("kernels --profile /nonexistent/profile.json", "infercast probe");
  expect_usage_error("kernels --profile " + broken.string(), "not valid JSON");
  expect_usage_error("kernels --profile " + empty.string(), "summary");
  expect_usage_error("kernels" + p + " --formats Q3_K", "Q3_K");
  expect_usage_error("kernels" + p + " --formats Q4_K --shapes 64x100", "multiples of 256");
  expect_usage_error("kernels" + p + " --shapes 64by100", "ROWSxCOLS");
  expect_usage_error("kernels" + p + " --threads 100000", "--threads");
  expect_usage_error("kernels" + p + " --isa sse9", "sse9");
  expect_usage_error("kernels" + p + " --batches 0", "batch 0");
  expect_usage_error("kernels" + p + " --footprint 900TiB --shapes 64x256", "memory");
  expect_usage_error("kernels" + p + " --layout tiled", "--layout");
  expect_usage_error("kernels" + p + " --rounds 0", "--rounds");
  expect_usage_error("kernels" + p + " --rounds 101", "--rounds");
  fs::remove(good);
  fs::remove(broken);
  fs::remove(empty);
}

TEST(CliKernels, JsonRecordsAndProfileUpdate) {
  const fs::path profile = write_profile("kernels-run", kProfile);
  const Result r = run("kernels --profile " + profile.string() +
                       " --shapes 64x256 --batches 1,3 --formats Q4_0,F16,Q6_K --footprint 1MiB --min-time 0.01 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto records = nlohmann::json::parse(r.out);
  ASSERT_TRUE(records.is_array());
  EXPECT_EQ(records.size(), 6U);
  for (const auto& rec : records) {
    for (const char* key : {"format", "isa", "batch", "rows", "cols", "threads", "weight_gbs", "gops", "roofline_fraction"}) {
      EXPECT_TRUE(rec.contains(key)) << key;
    }
    EXPECT_GT(rec["gops"].get<double>(), 0.0);
    EXPECT_EQ(rec["rows"].get<int>(), 64);
  }
  std::ifstream in(profile);
  EXPECT_EQ(nlohmann::json::parse(in)["keep"], nlohmann::json({1, 2, 3}));  // earlier content kept
  const auto kernels = kernels_section(profile);
  EXPECT_EQ(kernels["schema"], "infercast.kernels/1");
  EXPECT_EQ(kernels["records"].size(), 6U);
  EXPECT_EQ(kernels["quality"].size(), 6U);  // 3 formats x 2 weight distributions
  EXPECT_EQ(kernels["dram_read_gbs"].get<double>(), 20.0);  // the profile's, no read taken
  EXPECT_TRUE(kernels["dram_read_measured_around"].is_null());
  fs::remove(profile);
}

// --rounds: every point is timed once per round, and its figure is the median of the rounds
// (odd count: bytes over the median time is the median of the rounds' GB/s).
TEST(CliKernels, RoundsGiveEachPointTheMedianOfItsRounds) {
  const fs::path profile = write_profile("kernels-rounds", kProfile);
  const Result r = run("kernels --profile " + profile.string() +
                       " --shapes 64x256 --batches 1,4 --formats Q8_0 --footprint 1MiB --min-time 0.01 --no-quality --rounds 3 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto records = nlohmann::json::parse(r.out);
  ASSERT_EQ(records.size(), 2U);
  for (const auto& rec : records) {
    EXPECT_EQ(rec["rounds"].get<int>(), 3);
    std::vector<double> gbs = rec["round_weight_gbs"].get<std::vector<double>>();
    ASSERT_EQ(gbs.size(), 3U);
    std::sort(gbs.begin(), gbs.end());
    EXPECT_GT(gbs.front(), 0.0);
    EXPECT_NEAR(rec["weight_gbs"].get<double>(), gbs[1], 1e-9 * gbs[1]);
  }
  EXPECT_EQ(kernels_section(profile)["rounds"].get<int>(), 3);
  fs::remove(profile);
}

// Whether a table row ends with "   LOW-HIGH", each a number with one decimal (e.g. 27.0-28.8).
bool ends_with_a_range(const std::string& line) {
  const std::size_t gap = line.rfind("   ");
  if (gap == std::string::npos) return false;
  const std::string range = line.substr(gap + 3);
  const std::size_t dash = range.find('-');
  const auto one_decimal = [](const std::string& n) {
    const std::size_t dot = n.find('.');
    return dot != std::string::npos && dot > 0 && dot + 2 == n.size() &&
           std::all_of(n.begin(), n.end(), [](char c) { return c == '.' || (c >= '0' && c <= '9'); });
  };
  return dash != std::string::npos && one_decimal(range.substr(0, dash)) && one_decimal(range.substr(dash + 1));
}

// The table's columns line up whatever the kernels are called (a BF16 batch kernel's name is
// longer than the column once was), and with rounds it gives each point's range of them.
TEST(CliKernels, TableColumnsLineUpAndShowTheRoundsRange) {
  const fs::path profile = write_profile("kernels-table", kProfile);
  const Result r = run("kernels --profile " + profile.string() +
                       " --shapes 64x256 --batches 1,8 --formats BF16,Q8_0 --isa all --footprint 1MiB --min-time 0.01 --no-quality "
                       "--no-update --rounds 2");
  ASSERT_EQ(r.status, 0) << r.err;
  std::istringstream lines(r.out);
  std::string line;
  std::size_t header_end = std::string::npos;
  int rows = 0;
  while (std::getline(lines, line)) {
    if (line.find("format") != std::string::npos && line.find("roofline") != std::string::npos) {
      EXPECT_NE(line.find("rounds GB/s"), std::string::npos) << line;
      header_end = line.find("GB/s") + 4;
    } else if (header_end != std::string::npos && (line.find("  BF16 ") == 0 || line.find("  Q8_0 ") == 0)) {
      // The GB/s figure ends where its heading does, and the range follows the roofline.
      ASSERT_GT(line.size(), header_end) << line;
      EXPECT_NE(line[header_end - 1], ' ') << line;
      EXPECT_EQ(line[header_end], ' ') << line;
      EXPECT_TRUE(ends_with_a_range(line)) << line;
      ++rows;
    }
  }
  EXPECT_GE(rows, 3);  // scalar skips batch 8; every other level has both batches
  fs::remove(profile);
}

// --read-now: the memory ceiling is the mean of two reads taken around the sweep, so a
// memory-bound point's ceiling is its operations per byte times that read, not the profile's 20.
TEST(CliKernels, ReadNowSetsTheMemoryCeilingFromReadsAroundTheSweep) {
  const fs::path profile = write_profile("kernels-read-now", kProfile);
  const Result r = run("kernels --profile " + profile.string() +
                       " --shapes 64x256 --batches 1 --formats Q8_0 --footprint 1MiB --min-time 0.01 --no-quality --read-now --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto kernels = kernels_section(profile);
  const auto around = kernels["dram_read_measured_around"];
  ASSERT_EQ(around.size(), 2U);
  EXPECT_GT(around[0].get<double>(), 0.0);
  EXPECT_GT(around[1].get<double>(), 0.0);
  const double read = kernels["dram_read_gbs"].get<double>();
  EXPECT_DOUBLE_EQ(read, 0.5 * (around[0].get<double>() + around[1].get<double>()));
  const auto& rec = kernels["records"][0];
  ASSERT_EQ(rec["bound"], "memory");  // batch 1 of Q8_0: 2 operations per 1.06 bytes
  const double ops_per_byte = rec["gops"].get<double>() / rec["weight_gbs"].get<double>();
  EXPECT_NEAR(rec["ceiling_gops"].get<double>(), ops_per_byte * read, 1e-9 * ops_per_byte * read);
  fs::remove(profile);
}

// A llama.cpp file can hold types without kernels here: predict forecasts it with a stand-in it
// names, run refuses it naming the type.
TEST(CliModel, AFileWithATypeWithoutKernelsIsForecastNotRun) {
  const fs::path model = fs::temp_directory_path() / ("infercast-cli-q41-" + std::to_string(::getpid()) + ".gguf");
  const Result gen = run("gen-model --layers 2 --dim 128 --ffn 256 --heads 4 --kv-heads 2 --vocab 600 --quant Q8_0 --seed 5 --out " + model.string());
  ASSERT_EQ(gen.status, 0) << gen.err;
  set_tensor_type(model.string(), "blk.1.ffn_down.weight", 3);
  const Result p = run("predict --model " + model.string() + " --users 1 --hardware xeon-8480plus --compare none --json");
  ASSERT_EQ(p.status, 0) << p.err;
  const auto j = nlohmann::json::parse(p.out);
  ASSERT_EQ(j[0]["stand_in_formats"].size(), 1U);
  EXPECT_EQ(j[0]["stand_in_formats"][0]["format"], "Q4_1");
  EXPECT_EQ(j[0]["stand_in_formats"][0]["measured_as"], "Q4_0");
  const Result text = run("predict --model " + model.string() + " --users 1 --hardware xeon-8480plus --compare none");
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("Q4_1 ("), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("forecast with Q4_0's"), std::string::npos) << text.out;
  const Result r = run("run --model " + model.string() + " --prompt-tokens 4 --gen-tokens 2");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("'blk.1.ffn_down.weight' is Q4_1"), std::string::npos) << r.err;
  fs::remove(model);
}

// A profile calibrated before a kernel changed: predict names the formats whose curves were
// measured on kernels this build no longer picks, in the table's notes and in JSON, and says
// nothing where the curves name no kernel (profiles older than the names).
nlohmann::json calibrated_profile(const std::string& q4_0_kernel) {
  nlohmann::json curves = nlohmann::json::object();
  for (const char* format : {"F32", "F16", "Q8_0", "Q4_0", "Q6_K"}) {
    for (double batch : {1.0, 8.0, 64.0}) {
      // 20 GB/s at one row, compute-bound beyond eight.
      curves[format].push_back({{"batch", batch},
                                {"seconds_per_byte", std::max(1.0, batch / 8) / 20e9},
                                {"kernel", std::string(format) == "Q4_0" ? q4_0_kernel : ""}});
    }
  }
  nlohmann::json p = nlohmann::json::parse(kProfile);
  p["topology"] = {{"total_memory_bytes", 64ULL << 30}, {"available_memory_bytes", 60ULL << 30}, {"cores", 2}, {"threads", 2}};
  p["calibration"] = {{"schema", "infercast.calibration/1"},
                      {"threads", 2},
                      {"dram_read_gbs", 20.0},
                      {"curves", curves},
                      {"engine",
                       {{"seconds_per_call", 3e-6},
                        {"seconds_per_token_layer_dim", 4e-9},
                        {"seconds_per_attention_op", 4e-12},
                        {"seconds_per_decode_kv_byte", 4e-11},
                        {"seconds_per_routed_row_dim", 0.0}}}};
  return p;
}

TEST(CliForecast, CurvesFromKernelsThisBuildNoLongerPicksAreNamed) {
  const fs::path stale = write_profile("predict-stale", calibrated_profile("retired_kernel").dump());
  const std::string args = " --model llama-2-7b --quant Q4_0 --users 1 --compare none --profile ";
  const Result text = run("predict" + args + stale.string());
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("Q4_0 was calibrated on retired_kernel; this build runs"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("run `infercast calibrate` again"), std::string::npos) << text.out;
  // The profile carries no calibration date, and the basis line says nothing of one.
  EXPECT_NE(text.out.find("measured on this machine (2 threads)\n"), std::string::npos) << text.out;
  const Result json = run("predict" + args + stale.string() + " --json");
  ASSERT_EQ(json.status, 0) << json.err;
  const auto s = nlohmann::json::parse(json.out)[0]["stale_curves"];
  ASSERT_EQ(s.size(), 1U) << s;
  EXPECT_EQ(s[0]["format"], "Q4_0");
  EXPECT_EQ(s[0]["measured_kernels"], nlohmann::json::array({"retired_kernel"}));
  ASSERT_FALSE(s[0]["current_kernels"].empty());
  for (const auto& k : s[0]["current_kernels"]) EXPECT_NE(k, "retired_kernel");

  const fs::path unnamed = write_profile("predict-unnamed", calibrated_profile("").dump());
  const Result quiet = run("predict" + args + unnamed.string());
  ASSERT_EQ(quiet.status, 0) << quiet.err;
  EXPECT_EQ(quiet.out.find("was calibrated on"), std::string::npos) << quiet.out;
  const Result quiet_json = run("predict" + args + unnamed.string() + " --json");
  ASSERT_EQ(quiet_json.status, 0) << quiet_json.err;
  EXPECT_TRUE(nlohmann::json::parse(quiet_json.out)[0]["stale_curves"].empty());
  fs::remove(stale);
  fs::remove(unnamed);
}

TEST(CliModel, GenModelAndRunReportTheFigures) {
  const fs::path model = fs::temp_directory_path() / ("infercast-cli-model-" + std::to_string(::getpid()) + ".gguf");
  const Result gen = run("gen-model --layers 2 --dim 128 --ffn 256 --heads 4 --kv-heads 2 --vocab 600 --quant Q4_K_M --seed 5 --out " + model.string());
  ASSERT_EQ(gen.status, 0) << gen.err;
  EXPECT_NE(gen.out.find("wrote"), std::string::npos);
  const Result r = run("run --model " + model.string() + " --threads 2 --prompt-tokens 16 --gen-tokens 6 --concurrency 3 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  for (const char* key : {"prefill_tps", "decode_tps", "decode_tps_per_seq", "ttft_ms", "weight_bytes", "decode_weight_gbs",
                          "kv_cache_bytes", "peak_rss_bytes"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_GT(j["decode_tps"].get<double>(), j["decode_tps_per_seq"].get<double>());
  // Where decode's time went: the parts are inside the whole, and attention is never free.
  const double decode_seconds = j["decode_seconds"].get<double>();
  EXPECT_GT(j["decode_attention_seconds"].get<double>(), 0.0);
  EXPECT_GT(j["decode_token_seconds"].get<double>(), 0.0);
  EXPECT_LT(j["decode_gemm_seconds"].get<double>() + j["decode_attention_seconds"].get<double>() +
                j["decode_token_seconds"].get<double>(),
            decode_seconds);
  EXPECT_GT(j["prefill_token_seconds"].get<double>(), 0.0);
  EXPECT_LT(j["prefill_gemm_seconds"].get<double>() + j["prefill_attention_seconds"].get<double>() +
                j["prefill_token_seconds"].get<double>(),
            j["prefill_seconds"].get<double>());
  // ... and the products' time by kind adds up to the products' whole.
  double product_seconds = 0;
  for (const auto& p : j["decode_products"]) {
    EXPECT_FALSE(p["kind"].get<std::string>().empty());
    EXPECT_GT(p["weight_gbs"].get<double>(), 0.0);
    product_seconds += p["seconds"].get<double>();
  }
  EXPECT_GE(j["decode_products"].size(), 5U);  // QKV, attention output, gate/up, down, output head
  EXPECT_NEAR(product_seconds, j["decode_gemm_seconds"].get<double>(), 1e-9);
  EXPECT_FALSE(j.contains("decode_read_fraction"));  // only measured on request
  EXPECT_EQ(j["tokens"].size(), 3U);
  EXPECT_EQ(j["tokens"][0].size(), 6U);
  const Result checked = run("run --model " + model.string() + " --threads 1 --prompt-tokens 4 --gen-tokens 3 --check-read --json");
  ASSERT_EQ(checked.status, 0) << checked.err;
  const auto c = nlohmann::json::parse(checked.out);
  EXPECT_GT(c["dram_read_before_gbs"].get<double>(), 0.0);
  EXPECT_GT(c["dram_read_after_gbs"].get<double>(), 0.0);
  const double mean_read = 0.5 * (c["dram_read_before_gbs"].get<double>() + c["dram_read_after_gbs"].get<double>());
  EXPECT_NEAR(c["decode_read_fraction"].get<double>(), c["decode_weight_gbs"].get<double>() / mean_read, 1e-9);
  // Repeated: the headline figures are medians of the samples beside them.
  const Result repeated = run("run --model " + model.string() + " --threads 1 --prompt-tokens 4 --gen-tokens 3 --repetitions 3 --json");
  ASSERT_EQ(repeated.status, 0) << repeated.err;
  const auto rj = nlohmann::json::parse(repeated.out);
  EXPECT_EQ(rj["repetitions"].get<int>(), 3);
  EXPECT_TRUE(rj["warmed_up"].get<bool>());
  auto decode = rj["samples"]["decode_tps"].get<std::vector<double>>();
  ASSERT_EQ(decode.size(), 3U);
  std::sort(decode.begin(), decode.end());
  EXPECT_DOUBLE_EQ(rj["decode_tps"].get<double>(), decode[1]);
  EXPECT_GE(rj["decode_tps_cv"].get<double>(), 0.0);
  EXPECT_EQ(j["repetitions"].get<int>(), 1);
  expect_usage_error("run --model " + model.string() + " --repetitions 0", "--repetitions");
  const Result text = run("run --model " + model.string() + " --prompt \"hello world\" --gen-tokens 3 --products");
  EXPECT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("continues:"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("decode products per step"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("ffn_gate_up"), std::string::npos) << text.out;
  // Existing output survives a failed generation.
  expect_usage_error("gen-model --layers 2 --dim 128 --ffn 256 --heads 3 --vocab 600 --out " + model.string(), "--heads");
  EXPECT_EQ(run("run --model " + model.string() + " --gen-tokens 2 --prompt-tokens 2").status, 0);
  fs::remove(model);
}

TEST(CliModel, BadInputExitsWithStatusTwo) {
  const fs::path junk = fs::temp_directory_path() / ("infercast-cli-junk-" + std::to_string(::getpid()) + ".gguf");
  std::ofstream(junk) << "GGUF\x03\x00\x00\x00 this is not a model";
  expect_usage_error("run --model " + junk.string(), junk.string());
  expect_usage_error("run --model /nonexistent.gguf", "cannot open");
  expect_usage_error("gen-model --preset gpt-5 --out /tmp/x.gguf", "unknown preset");
  expect_usage_error("gen-model --out /tmp/x.gguf", "--preset");
  expect_usage_error("gen-model --preset tinyllama-1.1b --quant Q3_K --out /tmp/x.gguf", "Q3_K");
  expect_usage_error("gen-model --layers 1 --dim 64 --ffn 128 --heads 2 --vocab 300 --out /nonexistent/dir/x.gguf", "cannot write");
  const fs::path model = fs::temp_directory_path() / ("infercast-cli-small-" + std::to_string(::getpid()) + ".gguf");
  ASSERT_EQ(run("gen-model --layers 1 --dim 64 --ffn 128 --heads 2 --vocab 300 --out " + model.string()).status, 0);
  expect_usage_error("run --model " + model.string() + " --concurrency 0", "--concurrency");
  expect_usage_error("run --model " + model.string() + " --kv-type q4", "--kv-type");
  expect_usage_error("run --model " + model.string() + " --prompt-tokens 5000", "context");
  expect_usage_error("run --model " + model.string() + " --isa sse9", "--isa");
  expect_usage_error("run --model " + model.string() + " --threads 100000", "--threads");
  expect_usage_error("gen-model --layers 1 --dim 64 --ffn 128 --heads 2 --vocab 300 --threads 100000 --out " + model.string(), "--threads");
  // A wide model whose KV cache for 4096 long sequences (about 275 GB) cannot fit.
  ASSERT_EQ(run("gen-model --layers 1 --dim 4096 --ffn 128 --heads 32 --vocab 300 --out " + model.string()).status, 0);
  expect_usage_error("run --model " + model.string() + " --concurrency 4096 --prompt-tokens 4000 --gen-tokens 90", "KV cache");
  fs::remove(model);
  fs::remove(junk);
}

TEST(CliForecast, CostReproducesThePublishedRatios) {
  const Result offline = run("cost --gpu-tps 46841 --cpu-tps 819 --gpu-cost 60000 --cpu-cost 20000 --json");
  ASSERT_EQ(offline.status, 0) << offline.err;
  EXPECT_NEAR(nlohmann::json::parse(offline.out)["benefit_ratio"].get<double>(), 19.1, 0.05);
  const Result server = run("cost --gpu-tps 45912 --cpu-tps 257 --gpu-cost 60000 --cpu-cost 20000");
  ASSERT_EQ(server.status, 0) << server.err;
  EXPECT_NE(server.out.find("59.5"), std::string::npos) << server.out;
  expect_usage_error("cost --gpu-tps 0 --cpu-tps 1 --gpu-cost 1 --cpu-cost 1", "positive");
}

TEST(CliForecast, ADescribedMachineNeedsNoProbe) {
  // No profile at this path: the catalog machine learns from the reference calibration.
  const std::string none = (fs::temp_directory_path() / "infercast-no-profile.json").string();
  const Result r = run("predict --model llama-3.1-8b --quant Q4_K_M,Q8_0 --users 1,8 --prompt 256 --gen 64 --hardware xeon-8480plus "
                       "--profile " + none + " --compare h100-sxm --target 10 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 2U);
  for (const auto& f : j) {
    EXPECT_NE(f["basis"].get<std::string>().find("not measured"), std::string::npos);
    ASSERT_EQ(f["rows"].size(), 2U);
    EXPECT_GT(f["rows"][1]["decode_tps"].get<double>(), f["rows"][0]["decode_tps"].get<double>());
    EXPECT_TRUE(f["rows"][0]["memory"]["fits"].get<bool>());
    EXPECT_TRUE(f.contains("max_users_meeting_target"));
    ASSERT_EQ(f["comparisons"].size(), 1U);
    EXPECT_TRUE(f["comparisons"][0]["rows"][0]["benefit_ratio"].is_number());
  }
  // A CPU step has no launch latency; a GPU's has, learned from published runs.
  EXPECT_EQ(j[0]["rows"][0]["decode_step_launch_seconds"].get<double>(), 0.0);
  const Result gpu = run("predict --model llama-3.1-8b --users 1 --hardware h100-sxm --profile " + none + " --json");
  ASSERT_EQ(gpu.status, 0) << gpu.err;
  const auto g = nlohmann::json::parse(gpu.out)[0]["rows"][0];
  EXPECT_GT(g["decode_step_launch_seconds"].get<double>(), 0);
  EXPECT_LT(g["decode_step_launch_seconds"].get<double>(), g["decode_step_other_seconds"].get<double>() + 1e-12);
  // Q8_0 weighs more than Q4_K_M and so decodes slower on a bandwidth-bound CPU.
  EXPECT_GT(j[1]["weight_bytes"].get<double>(), j[0]["weight_bytes"].get<double>());
  EXPECT_GT(j[0]["rows"][0]["decode_tps"].get<double>(), j[1]["rows"][0]["decode_tps"].get<double>());
  // A user's own machine description works the same way.
  const fs::path hw = fs::temp_directory_path() / ("infercast-cli-hw-" + std::to_string(::getpid()) + ".json");
  std::ofstream(hw) << R"({"name": "box", "kind": "cpu", "memory_gb": 16, "bandwidth_gbs": 50, "cores": 8, "base_ghz": 3,
                           "peak_tflops": {"fp32": 1.5, "bf16": 3, "int8": 6}})";
  const Result own = run("predict --model qwen2.5-7b --quant Q4_0 --hardware " + hw.string() + " --profile " + none + " --compare none");
  EXPECT_EQ(own.status, 0) << own.err;
  EXPECT_NE(own.out.find("Qwen2.5 7B"), std::string::npos) << own.out;
  std::ofstream(hw) << "{\"kind\": \"cpu\"}";
  expect_usage_error("predict --model qwen2.5-7b --hardware " + hw.string() + " --profile " + none, "memory_gb");
  fs::remove(hw);
}

TEST(CliForecast, BadInputExitsWithStatusTwo) {
  const std::string none = (fs::temp_directory_path() / "infercast-no-profile.json").string();
  expect_usage_error("predict --model gpt-5 --hardware h100-sxm", "catalog model");
  expect_usage_error("predict --model llama-2-7b --hardware tpu-v9", "catalog machine");
  expect_usage_error("predict --model llama-2-7b --profile " + none, "infercast probe");
  expect_usage_error("predict --model llama-2-7b --hardware h100-sxm --quant Q3_K", "Q3_K");
  expect_usage_error("predict --model llama-2-7b --hardware h100-sxm --users 0", "--users");
  expect_usage_error("predict --model llama-2-7b --hardware h100-sxm --prompt 5000", "context");
  expect_usage_error("predict --model llama-2-7b --hardware h100-sxm --compare tpu", "--compare");
  const fs::path junk = fs::temp_directory_path() / ("infercast-cli-junk-" + std::to_string(::getpid()) + ".json");
  std::ofstream(junk) << "{ not json";
  expect_usage_error("predict --model llama-2-7b --hardware " + junk.string(), "not valid JSON");
  expect_usage_error("validate --profile " + junk.string(), "not valid JSON");
  fs::remove(junk);
  // A work directory that cannot exist is refused before minutes of kernel sweeps.
  const fs::path profile = write_profile("calibrate-profile", R"({"schema": "infercast.profile/1",
    "summary": {"dram_read_gbs": 20.0, "peak_fp32_gflops": 200.0},
    "topology": {"total_memory_bytes": 25000000000, "available_memory_bytes": 20000000000, "cores": 2}})");
  expect_usage_error("calibrate --profile " + profile.string() + " --work-dir " + profile.string() + "/models", "--work-dir");
  expect_usage_error("calibrate --profile " + profile.string() + " --footprint lots", "--footprint");
  expect_usage_error("validate --profile " + profile.string() + " --settled-read -0.5", "--settled-read");
  expect_usage_error("validate --profile " + profile.string() + " --unsettled-retries 9", "--unsettled-retries");
  expect_usage_error("validate --profile " + profile.string() + " --models validate-0.85b,gpt-5", "moe-mini");
  fs::remove(profile);
}
