#pragma once
// One statistics policy for every measurement: the first sample is a warm-up and is dropped by
// the caller; rates are summarised by best (the peak the hardware can reach), median (what to
// expect) and the coefficient of variation (how noisy the machine was).
#include <vector>

namespace infercast {

struct Summary {
  double best = 0;    // largest value (for rates; the fastest run)
  double median = 0;
  double worst = 0;   // smallest value
  double mean = 0;
  double cv = 0;      // standard deviation / mean
  int samples = 0;
};

// Summarises values where larger is better (rates). Empty input gives all zeros.
Summary summarize_rates(std::vector<double> values);

// Median of a copy of the values; 0 for an empty vector.
double median_of(std::vector<double> values);

}  // namespace infercast
