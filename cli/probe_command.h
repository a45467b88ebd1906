#pragma once
#include <CLI/CLI.hpp>

namespace infercast::cli {

// Adds `infercast probe` to the app; the callback runs the probe and sets the exit status.
void add_probe_command(CLI::App& app, int& exit_status);

}  // namespace infercast::cli
