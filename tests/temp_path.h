#pragma once
// A per-process path in the temporary directory, so parallel test runs never share files.
#include <unistd.h>

#include <filesystem>
#include <string>

namespace infercast {

inline std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("infercast-test-" + std::to_string(getpid()) + "-" + name)).string();
}

}  // namespace infercast
