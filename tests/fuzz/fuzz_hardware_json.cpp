// libFuzzer target for the hardware descriptions a user hands `infercast predict --hardware`
// (a device JSON file or a probe profile): any input must parse or be refused with UsageError.
// Anything else (a crash, a sanitizer report, a JSON library exception escaping) is a bug.
#include <cstddef>
#include <cstdint>

#include <nlohmann/json.hpp>

#include "model/hardware.h"
#include "probes/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto j = nlohmann::json::parse(data, data + size, nullptr, false);
  if (j.is_discarded()) return 0;  // not JSON: the CLI's reader refuses it before these parsers
  try {
    (void)infercast::hardware_from_json(j, "fuzz.json");
  } catch (const infercast::UsageError&) {
  }
  try {
    (void)infercast::hardware_from_profile(j, "fuzz.json");
  } catch (const infercast::UsageError&) {
  }
  return 0;
}
