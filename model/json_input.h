#pragma once
// User-supplied JSON (model and hardware descriptions): a field of the wrong type is bad input
// like any other, so it must surface as a UsageError naming the file, not a library exception.
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <string>

#include "probes/error.h"

namespace infercast {

// Runs parse(), turning the JSON library's type and range errors into a one-line UsageError.
template <class Parse>
auto refuse_bad_json(const std::string& origin, Parse parse) -> decltype(parse()) {
  try {
    return parse();
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(fmt::format("{}: {}", origin, e.what()));
  }
}

}  // namespace infercast
