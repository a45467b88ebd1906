#include "kernels/thread_pool.h"

#include <algorithm>
#include <cmath>

namespace infercast {

RowRange split_rows(std::size_t rows, std::size_t step, unsigned member, unsigned members) {
  if (step == 0) step = 1;
  const std::size_t steps = (rows + step - 1) / step;
  const std::size_t base = steps / members;
  const std::size_t extra = steps % members;
  const std::size_t first = member * base + (member < extra ? member : extra);
  const std::size_t count = base + (member < extra ? 1 : 0);
  RowRange r{first * step, (first + count) * step};
  if (r.begin > rows) r.begin = rows;
  if (r.end > rows) r.end = rows;
  return r;
}

SpeedSplit::SpeedSplit(unsigned members)
    : samples_(std::max(1U, members)), shares_(std::max(1U, members), 1.0 / std::max(1U, members)) {}

RowRange SpeedSplit::range(std::size_t rows, std::size_t step, unsigned member) const {
  if (step == 0) step = 1;
  const std::size_t steps = (rows + step - 1) / step;
  double before = 0;
  for (unsigned m = 0; m < member; ++m) before += shares_[m];
  const auto boundary = [&](double share_before) {
    return std::min(steps, static_cast<std::size_t>(std::llround(share_before * static_cast<double>(steps))));
  };
  const std::size_t first = boundary(before);
  const std::size_t last = member + 1 == members() ? steps : boundary(before + shares_[member]);
  return {std::min(rows, first * step), std::min(rows, std::max(first, last) * step)};
}

void SpeedSplit::record(unsigned member, double bytes, double seconds) {
  samples_[member].bytes += bytes;
  samples_[member].seconds += seconds;
}

void SpeedSplit::update() {
  const unsigned n = members();
  bool measured = n > 1;
  double total_speed = 0;
  for (const Sample& s : samples_) {
    measured = measured && s.bytes >= kLeastBytes && s.seconds > 0;
    if (measured) total_speed += s.bytes / s.seconds;
  }
  if (measured) {
    // Before they are normalized, shares stay within a quarter and four times an equal one: a
    // member descheduled through some samples must keep rows to show that it is back.
    const double equal = 1.0 / n;
    double sum = 0;
    for (unsigned m = 0; m < n; ++m) {
      const double target = samples_[m].bytes / samples_[m].seconds / total_speed;
      shares_[m] = std::clamp((1 - kNewSampleWeight) * shares_[m] + kNewSampleWeight * target, equal / 4, equal * 4);
      sum += shares_[m];
    }
    for (double& s : shares_) s /= sum;
  }
  std::fill(samples_.begin(), samples_.end(), Sample{});
}

}  // namespace infercast
