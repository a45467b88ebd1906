#pragma once
// A seeded generator (splitmix64) with uniform and Gaussian draws that give the same numbers on
// every platform and compiler (std::normal_distribution does not promise that), for measurement
// data and tests that must be reproducible.
#include <cstdint>

namespace infercast {

class SeededRng {
 public:
  explicit SeededRng(std::uint64_t state) : state_(state) {}
  std::uint64_t next();
  double uniform();  // [0, 1), 53 bits
  float gaussian();  // Box-Muller, mean 0, deviation 1

 private:
  std::uint64_t state_;
};

}  // namespace infercast
