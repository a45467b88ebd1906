#pragma once
// The kernels' thread pool: a persistent team of hwloc-pinned threads (probes' ThreadTeam) plus
// the one policy the kernels need, splitting output rows into contiguous, evenly sized ranges.
#include <cstddef>
#include <functional>

#include "probes/thread_team.h"

namespace infercast {

struct RowRange {
  std::size_t begin = 0;
  std::size_t end = 0;
};

// Member `member` of `members` gets rows [begin, end): contiguous ranges, multiples of `step`
// except the last, sizes differing by at most one step.
RowRange split_rows(std::size_t rows, std::size_t step, unsigned member, unsigned members);

class ThreadPool {
 public:
  explicit ThreadPool(unsigned threads) : team_(threads) {}
  [[nodiscard]] unsigned size() const { return team_.size(); }
  [[nodiscard]] bool pinned() const { return team_.pinned(); }
  // Runs job(member) on every thread; returns when all are done.
  void run(const std::function<void(unsigned member)>& job) { team_.run(job); }
  // A spinning barrier for use inside a job.
  void barrier() { team_.barrier(); }

 private:
  ThreadTeam team_;
};

}  // namespace infercast
