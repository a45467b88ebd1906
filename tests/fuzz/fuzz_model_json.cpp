// libFuzzer target for the model descriptions a user hands `infercast predict --model FILE.json`:
// any input must parse or be refused with UsageError, and what parses must size its weights,
// KV cache and attention without a crash, an overflow the sanitizers catch, or a hang.
#include <cstddef>
#include <cstdint>

#include <nlohmann/json.hpp>

#include "kernels/recipes.h"
#include "model/architecture.h"
#include "probes/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto j = nlohmann::json::parse(data, data + size, nullptr, false);
  if (j.is_discarded()) return 0;  // not JSON: the CLI's reader refuses it before this parser
  try {
    const infercast::Architecture a = infercast::architecture_from_json(j, "fuzz.json");
    for (const char* quant : {"Q4_K_M", "Q8_0"}) {
      const auto inventory = infercast::weight_inventory(a, infercast::parse_quantization(quant));
      (void)inventory.total_bytes();
      (void)inventory.step_weight_bytes(a, 8);
      (void)inventory.active_matrix_parameters(a);
    }
    (void)infercast::kv_bytes_per_token(a, 2);
    (void)infercast::attention_ops_per_token(a, 4096);
  } catch (const infercast::UsageError&) {
  }
  return 0;
}
