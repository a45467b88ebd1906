#include "kernels/thread_pool.h"

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

}  // namespace infercast
