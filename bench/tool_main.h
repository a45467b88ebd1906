#pragma once
// The bench tools' main, run as the infercast command runs a subcommand: options parsed by CLI11
// (--help printed, status 0), then the body; a bad option or a UsageError is one line on stderr,
// prefixed with the tool's name, and exit status 2.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "probes/error.h"

namespace infercast {

template <class Body>
int run_tool(CLI::App& app, const char* name, int argc, char** argv, Body&& body) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "%s: %s\n", name, e.what());
    return 2;
  }
  try {
    body();
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: %s\n", name, e.what());
    return 2;
  }
  return 0;
}

}  // namespace infercast
