#include "cli/json_file.h"

#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include "probes/error.h"

namespace infercast::cli {

nlohmann::json read_json_file(const std::string& path, const std::string& missing_hint) {
  std::ifstream in(path);
  if (!in) throw UsageError(fmt::format("cannot read {}{}", path, missing_hint.empty() ? "" : ": " + missing_hint));
  std::stringstream text;
  text << in.rdbuf();
  try {
    return nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::parse_error& e) {
    throw UsageError(fmt::format("{} is not valid JSON ({})", path, e.what()));
  }
}

}  // namespace infercast::cli
