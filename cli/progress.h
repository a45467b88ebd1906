#pragma once
// Progress on stderr: a single rewritten line on a terminal, one line per stage otherwise (so
// logs stay readable).
#include <string>

namespace infercast::cli {

class ProgressPrinter {
 public:
  ProgressPrinter();
  ~ProgressPrinter();
  ProgressPrinter(const ProgressPrinter&) = delete;
  ProgressPrinter& operator=(const ProgressPrinter&) = delete;
  void update(const std::string& what, double fraction);
  void finish();

 private:
  bool tty_;
  bool open_line_ = false;
  std::string last_stage_;
  double start_;
};

}  // namespace infercast::cli
