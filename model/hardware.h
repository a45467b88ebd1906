#pragma once
// A machine to forecast for: this one, from its probe profile, or a described one, from the
// catalog (model/catalog/hardware/*.json) or a user's JSON file of the same form. A described
// machine needs no probe run: that is how a user sizes hardware before buying it.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace infercast {

enum class DeviceKind { cpu, gpu };

// A published measurement of a model served on a described machine: `batch` sequences of
// `prompt` tokens each generating `gen` tokens on `devices` devices (tensor parallel), at
// `output_tps` generated tokens per second in all. What the forecast learns a GPU's per-step
// latency from (model/forecast.h).
struct PublishedRun {
  std::string model;  // a catalog model
  std::string quant;  // a format or recipe
  int devices = 1;
  int batch = 1;
  int prompt = 1;
  int gen = 1;
  double output_tps = 0;
  std::string engine;
  std::string source;
};

struct Hardware {
  std::string name;
  std::string display;
  DeviceKind kind = DeviceKind::cpu;
  bool measured_here = false;       // a probe profile of the machine infercast runs on
  double memory_bytes = 0;          // per device
  double bandwidth_gbs = 0;         // theoretical (datasheet) or, for a profile, measured DRAM read
  std::optional<double> stream_gbs;         // measured streaming bandwidth, where known
  std::optional<double> gemm_bf16_gflops;   // measured dense BF16 GEMM, where known
  double peak_fp32_gflops = 0;
  double peak_bf16_gflops = 0;      // also FP16
  double peak_int8_gops = 0;          // the best INT8 path (AMX tiles where there are any)
  double peak_vector_int8_gops = 0;   // INT8 dot products on vector registers (VNNI)
  int cores = 0;
  double base_ghz = 0;
  bool avx512 = false;
  bool amx = false;
  double power_w = 0;
  double interconnect_gbs = 0;      // GPU to GPU, per direction
  std::optional<double> purchase_usd;
  std::optional<double> hourly_usd;  // cloud price per device-hour
  std::string price_source;
  std::vector<std::string> sources;
  std::vector<std::string> unverified;  // fields the sources do not settle
  std::vector<PublishedRun> published_runs;
};

// Throws UsageError naming the field and the origin.
Hardware hardware_from_json(const nlohmann::json& j, const std::string& origin);
// This machine, from `infercast probe`'s profile (summary, topology, cpu sections).
Hardware hardware_from_profile(const nlohmann::json& profile, const std::string& origin);
std::vector<Hardware> catalog_hardware();
std::optional<Hardware> find_catalog_hardware(std::string_view name);  // case-insensitive
std::string catalog_hardware_names(std::optional<DeviceKind> kind = std::nullopt);

std::string_view to_string(DeviceKind kind);

}  // namespace infercast
