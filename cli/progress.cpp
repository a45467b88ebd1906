#include "cli/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

#include "probes/timer.h"

namespace infercast::cli {

ProgressPrinter::ProgressPrinter() : tty_(isatty(STDERR_FILENO) != 0), start_(now_seconds()) {}
ProgressPrinter::~ProgressPrinter() { finish(); }

void ProgressPrinter::update(const std::string& what, double fraction) {
  const int percent = static_cast<int>(fraction * 100.0 + 0.5);
  if (tty_) {
    fmt::print(stderr, "\r\033[K[{:3d}%] {}", percent, what);
    std::fflush(stderr);
    open_line_ = true;
    return;
  }
  // One line per stage: the first word ("bandwidth", "latency", "compute"), with the time.
  const std::string stage = what.substr(0, what.find(' '));
  if (stage != last_stage_) {
    fmt::print(stderr, "[{:3d}%] {:6.1f} s  {}\n", percent, now_seconds() - start_, stage);
    last_stage_ = stage;
  }
}

void ProgressPrinter::finish() {
  if (open_line_) {
    fmt::print(stderr, "\r\033[K");
    std::fflush(stderr);
    open_line_ = false;
  }
}

}  // namespace infercast::cli
