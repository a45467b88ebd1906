#pragma once
#include <CLI/CLI.hpp>

namespace infercast::cli {

// Adds `infercast gen-model`: writes a synthetic llama-family GGUF.
void add_gen_model_command(CLI::App& app, int& exit_status);
// Adds `infercast run`: prefill and batched decode of a GGUF model, measured.
void add_run_command(CLI::App& app, int& exit_status);

}  // namespace infercast::cli
