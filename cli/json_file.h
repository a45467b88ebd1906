#pragma once
// Reading the JSON files users hand the CLI (profiles, hardware and model descriptions).
#include <nlohmann/json.hpp>
#include <string>

namespace infercast::cli {

// Throws UsageError with one line: the file is missing (`missing_hint` says what to run) or not JSON.
nlohmann::json read_json_file(const std::string& path, const std::string& missing_hint);

}  // namespace infercast::cli
