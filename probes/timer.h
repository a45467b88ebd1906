#pragma once
#include <chrono>

namespace infercast {

// Monotonic wall time in seconds; steady_clock is vDSO-backed and costs ~20 ns here.
inline double now_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

}  // namespace infercast
