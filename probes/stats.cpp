#include "probes/stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace infercast {

double median_of(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

Summary summarize_rates(std::vector<double> values) {
  Summary s;
  if (values.empty()) return s;
  s.samples = static_cast<int>(values.size());
  s.best = *std::max_element(values.begin(), values.end());
  s.worst = *std::min_element(values.begin(), values.end());
  s.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(s.samples);
  double squares = 0;
  for (double v : values) squares += (v - s.mean) * (v - s.mean);
  const double stddev = s.samples > 1 ? std::sqrt(squares / (s.samples - 1)) : 0.0;
  s.cv = s.mean != 0 ? stddev / s.mean : 0.0;
  s.median = median_of(std::move(values));
  return s;
}

}  // namespace infercast
