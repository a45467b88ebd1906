// infercast: a thin front end. It parses options, calls the libraries and prints; every
// measurement and decision lives in the libraries.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <exception>

#include "cli/forecast_commands.h"
#include "cli/kernels_command.h"
#include "cli/model_commands.h"
#include "cli/probe_command.h"
#include "probes/cpu_features.h"
#include "probes/error.h"

namespace {
constexpr int kExitUsage = 2;
constexpr int kExitFailure = 1;
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"infercast: can this machine serve a large language model, and how fast?"};
  app.set_version_flag("--version", "infercast " INFERCAST_VERSION);
  app.require_subcommand(1);
  int exit_status = 0;
  infercast::cli::add_probe_command(app, exit_status);
  infercast::cli::add_kernels_command(app, exit_status);
  infercast::cli::add_gen_model_command(app, exit_status);
  infercast::cli::add_run_command(app, exit_status);
  infercast::cli::add_calibrate_command(app, exit_status);
  infercast::cli::add_predict_command(app, exit_status);
  infercast::cli::add_cost_command(app, exit_status);
  infercast::cli::add_validate_command(app, exit_status);
  try {
    // A misspelt INFERCAST_PREFETCH is a usage error here; the kernels, which read it once at
    // start-up, would otherwise fall back to the host's default without a word.
    infercast::prefetch_hint_from_environment();
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "infercast: {}\n", e.what());
    return kExitUsage;
  } catch (const infercast::UsageError& e) {
    fmt::print(stderr, "infercast: {}\n", e.what());
    return kExitUsage;
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "infercast: out of memory (try a smaller --max-memory)\n");
    return kExitUsage;
  } catch (const std::exception& e) {
    fmt::print(stderr, "infercast: error: {}\n", e.what());
    return kExitFailure;
  }
  return exit_status;
}
