#pragma once
#include <CLI/CLI.hpp>

namespace infercast::cli {

void add_calibrate_command(CLI::App& app, int& exit_status);
void add_predict_command(CLI::App& app, int& exit_status);
void add_cost_command(CLI::App& app, int& exit_status);
void add_validate_command(CLI::App& app, int& exit_status);

}  // namespace infercast::cli
