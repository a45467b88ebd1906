#pragma once
#include <CLI/CLI.hpp>

namespace infercast::cli {

// Adds `infercast kernels`: measures the quantized kernels and stores them in the profile.
void add_kernels_command(CLI::App& app, int& exit_status);

}  // namespace infercast::cli
