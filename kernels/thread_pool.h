#pragma once
// The kernels' thread pool: a persistent team of hwloc-pinned threads (probes' ThreadTeam) plus
// the policies the kernels need, splitting output rows into contiguous ranges: evenly sized, or
// sized by each thread's measured speed.
#include <cstddef>
#include <functional>
#include <vector>

#include "probes/thread_team.h"

namespace infercast {

struct RowRange {
  std::size_t begin = 0;
  std::size_t end = 0;
};

// Member `member` of `members` gets rows [begin, end): contiguous ranges, multiples of `step`
// except the last, sizes differing by at most one step.
RowRange split_rows(std::size_t rows, std::size_t step, unsigned member, unsigned members);

// Splits rows in proportion to how fast each member streamed its rows lately, so that members
// that run at different speeds still finish together. In a decode step on a 2-vCPU guest one
// thread streamed its equal half 10-25% slower than the other, whichever half and whichever
// core it had, and the faster one waited at the end of each product: a tenth of the step
// (docs/PERFORMANCE.md, thirty-third session). Equal shares until measurements arrive.
//
// Between jobs: range() reads the shares; during a job each member record()s its own work;
// after the job, update() folds those samples in. The pool's run() orders the three.
class SpeedSplit {
 public:
  explicit SpeedSplit(unsigned members);
  [[nodiscard]] unsigned members() const { return static_cast<unsigned>(shares_.size()); }
  // As split_rows, with each member's share of the steps in proportion to its speed.
  [[nodiscard]] RowRange range(std::size_t rows, std::size_t step, unsigned member) const;
  // `member` streamed `bytes` in `seconds` in the job now running.
  void record(unsigned member, double bytes, double seconds);
  // Moves the shares a step towards the members' measured speeds when every member recorded
  // enough to measure (kLeastBytes), and clears the samples.
  void update();
  [[nodiscard]] double share(unsigned member) const { return shares_[member]; }

  // Less than this a member, and timer resolution and the job's start-up dominate a sample.
  static constexpr double kLeastBytes = 256 * 1024;
  // Weight of a new sample: the shares follow a change of speed within tens of products (a
  // decode step has about a hundred) without chasing one product's noise.
  static constexpr double kNewSampleWeight = 0.1;

 private:
  struct alignas(64) Sample {  // one cache line each: members write theirs concurrently
    double bytes = 0;
    double seconds = 0;
  };
  std::vector<Sample> samples_;
  std::vector<double> shares_;  // sum to 1
};

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
