#include "model/hardware.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "model/catalog.h"
#include "model/json_input.h"
#include "probes/error.h"
#include "probes/units.h"

namespace infercast {
namespace {

double positive(const nlohmann::json& j, const char* key, const std::string& origin) {
  if (!j.contains(key) || !j.at(key).is_number() || !(j.at(key).get<double>() > 0)) {
    throw UsageError(fmt::format("{}: '{}' must be a positive number", origin, key));
  }
  return j.at(key).get<double>();
}

double number_or(const nlohmann::json& j, const char* key, double fallback) {
  return j.contains(key) && j.at(key).is_number() ? j.at(key).get<double>() : fallback;
}

std::optional<double> optional_number(const nlohmann::json& j, const char* key) {
  if (j.contains(key) && j.at(key).is_number() && j.at(key).get<double>() > 0) return j.at(key).get<double>();
  return std::nullopt;
}

std::vector<std::string> strings(const nlohmann::json& j, const char* key) {
  std::vector<std::string> out;
  if (j.contains(key) && j.at(key).is_array()) {
    for (const auto& s : j.at(key)) {
      if (s.is_string()) out.push_back(s.get<std::string>());
    }
  }
  return out;
}

std::vector<PublishedRun> published_runs(const nlohmann::json& j, const std::string& origin) {
  std::vector<PublishedRun> out;
  if (!j.contains("published_runs")) return out;
  if (!j.at("published_runs").is_array()) throw UsageError(fmt::format("{}: 'published_runs' must be an array", origin));
  for (const auto& r : j.at("published_runs")) {
    const std::string where = fmt::format("{}: published_runs[{}]", origin, out.size());
    if (!r.is_object()) throw UsageError(fmt::format("{} must be an object", where));
    const auto count = [&](const char* key) {
      const double v = positive(r, key, where);
      // The bound first: converting a larger double to int is undefined.
      if (v > 1e6 || v != static_cast<int>(v)) throw UsageError(fmt::format("{}: '{}' must be a whole number up to a million", where, key));
      return static_cast<int>(v);
    };
    PublishedRun p;
    p.model = r.at("model").get<std::string>();
    p.quant = r.at("quant").get<std::string>();
    p.devices = count("devices");
    p.batch = count("batch");
    p.prompt = count("prompt");
    p.gen = count("gen");
    p.output_tps = positive(r, "output_tps", where);
    p.engine = r.value("engine", "");
    p.source = r.value("source", "");
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace

std::string_view to_string(DeviceKind kind) { return kind == DeviceKind::gpu ? "gpu" : "cpu"; }

namespace {

Hardware parse_hardware(const nlohmann::json& j, const std::string& origin) {
  if (!j.is_object()) throw UsageError(fmt::format("{}: a hardware description must be a JSON object", origin));
  Hardware h;
  h.name = j.value("name", origin);
  h.display = j.value("display", h.name);
  const std::string kind = j.value("kind", "");
  if (kind != "cpu" && kind != "gpu") throw UsageError(fmt::format("{}: 'kind' must be \"cpu\" or \"gpu\"", origin));
  h.kind = kind == "gpu" ? DeviceKind::gpu : DeviceKind::cpu;
  h.memory_bytes = positive(j, "memory_gb", origin) * 1e9;
  if (j.contains("isa") && j.at("isa").is_object()) {
    h.avx512 = j.at("isa").value("avx512", false);
    h.amx = j.at("isa").value("amx", false);
  }
  h.bandwidth_gbs = positive(j, "bandwidth_gbs", origin);
  if (!j.contains("peak_tflops") || !j.at("peak_tflops").is_object()) throw UsageError(fmt::format("{}: 'peak_tflops' is missing", origin));
  const auto& peak = j.at("peak_tflops");
  h.peak_bf16_gflops = 1e3 * number_or(peak, "bf16", number_or(peak, "fp16", 0));
  h.peak_fp32_gflops = 1e3 * number_or(peak, "fp32", h.peak_bf16_gflops / 2);
  h.peak_int8_gops = 1e3 * number_or(peak, "int8", h.peak_bf16_gflops);
  // VNNI: four INT8 multiply-adds where FP32 does one, unless the file says otherwise.
  h.peak_vector_int8_gops = 1e3 * number_or(peak, "vector_int8", h.amx ? 4 * h.peak_fp32_gflops / 1e3 : h.peak_int8_gops / 1e3);
  if (!(h.peak_bf16_gflops > 0)) throw UsageError(fmt::format("{}: 'peak_tflops' needs a positive bf16 (or fp16) figure", origin));
  h.cores = static_cast<int>(number_or(j, "cores", 0));
  h.base_ghz = number_or(j, "base_ghz", 0);
  if (h.kind == DeviceKind::cpu && (h.cores <= 0 || !(h.base_ghz > 0))) {
    throw UsageError(fmt::format("{}: a CPU needs positive 'cores' and 'base_ghz'", origin));
  }
  h.power_w = number_or(j, "power_w", 0);
  h.interconnect_gbs = number_or(j, "interconnect_gbs", 0);
  if (j.contains("measured") && j.at("measured").is_object()) {
    h.stream_gbs = optional_number(j.at("measured"), "stream_gbs");
    if (const auto g = optional_number(j.at("measured"), "gemm_bf16_tflops")) h.gemm_bf16_gflops = 1e3 * *g;
  }
  if (j.contains("price") && j.at("price").is_object()) {
    const auto& p = j.at("price");
    h.purchase_usd = optional_number(p, "purchase_usd");
    h.hourly_usd = optional_number(p, "hourly_usd");
    h.price_source = p.value("source", "");
  }
  h.sources = strings(j, "sources");
  h.unverified = strings(j, "unverified");
  h.published_runs = published_runs(j, origin);
  return h;
}

Hardware parse_profile(const nlohmann::json& profile, const std::string& origin) {
  if (!profile.is_object() || !profile.contains("summary") || !profile.at("summary").is_object()) {
    throw UsageError(fmt::format("{} is not an infercast probe profile (no summary)", origin));
  }
  const auto& s = profile.at("summary");
  Hardware h;
  h.name = "this-machine";
  h.measured_here = true;
  h.kind = DeviceKind::cpu;
  h.bandwidth_gbs = positive(s, "dram_read_gbs", origin + " summary");
  h.stream_gbs = h.bandwidth_gbs;
  h.peak_fp32_gflops = number_or(s, "peak_fp32_gflops", 0);
  h.peak_bf16_gflops = number_or(s, "peak_amx_bf16_gflops", number_or(s, "peak_bf16_gflops", h.peak_fp32_gflops));
  // The best INT8 path this machine has: AMX tiles, else VNNI, else AVX2's vpmaddubsw.
  const double vector_int8 = number_or(s, "peak_int8_vnni_gops", number_or(s, "peak_int8_avx2_gops", h.peak_fp32_gflops));
  h.peak_int8_gops = number_or(s, "peak_amx_int8_gops", vector_int8);
  h.peak_vector_int8_gops = vector_int8;
  h.base_ghz = number_or(s, "core_ghz", 0);
  std::string brand = "this machine";
  if (profile.contains("cpu") && profile.at("cpu").is_object()) {
    // Profiles from before the probe tidied the name keep CPUID's padding.
    brand = tidy_cpu_name(profile.at("cpu").value("brand", brand));
    const std::string isa = profile.at("cpu").value("max_isa_level", "");
    h.amx = isa == "amx";
    h.avx512 = h.amx || isa == "avx512";
  }
  h.display = fmt::format("this machine ({})", brand);
  if (profile.contains("topology") && profile.at("topology").is_object()) {
    const auto& t = profile.at("topology");
    h.cores = static_cast<int>(number_or(t, "cores", 0));
    h.memory_bytes = number_or(t, "available_memory_bytes", number_or(t, "total_memory_bytes", 0));
  }
  if (!(h.memory_bytes > 0)) throw UsageError(fmt::format("{}: the profile's topology has no memory size", origin));
  h.sources = {origin};
  return h;
}

}  // namespace

Hardware hardware_from_json(const nlohmann::json& j, const std::string& origin) {
  return refuse_bad_json(origin, [&] { return parse_hardware(j, origin); });
}

Hardware hardware_from_profile(const nlohmann::json& profile, const std::string& origin) {
  return refuse_bad_json(origin, [&] { return parse_profile(profile, origin); });
}

std::vector<Hardware> catalog_hardware() {
  std::vector<Hardware> out;
  for (const auto& e : hardware_catalog()) {
    out.push_back(hardware_from_json(nlohmann::json::parse(e.json), fmt::format("catalog hardware {}", e.name)));
  }
  return out;
}

std::optional<Hardware> find_catalog_hardware(std::string_view name) {
  for (const auto& e : hardware_catalog()) {
    if (iequals(e.name, name)) return hardware_from_json(nlohmann::json::parse(e.json), fmt::format("catalog hardware {}", e.name));
  }
  return std::nullopt;
}

std::string catalog_hardware_names(std::optional<DeviceKind> kind) {
  std::string names;
  for (const auto& h : catalog_hardware()) {
    if (kind && h.kind != *kind) continue;
    names += (names.empty() ? "" : ", ") + h.name;
  }
  return names;
}

}  // namespace infercast
