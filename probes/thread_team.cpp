#include "probes/thread_team.h"

#include <immintrin.h>

#include "probes/topology.h"

namespace infercast {

ThreadTeam::ThreadTeam(unsigned size) : size_(size == 0 ? 1 : size) {
  caller_affinity_saved_ = sched_getaffinity(0, sizeof caller_affinity_, &caller_affinity_) == 0;
  if (!pin_current_thread_to_core(0)) pinned_ = false;
  threads_.reserve(size_ - 1);
  for (unsigned m = 1; m < size_; ++m) threads_.emplace_back([this, m] { worker(m); });
}

ThreadTeam::~ThreadTeam() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (auto& t : threads_) t.join();
  if (caller_affinity_saved_) sched_setaffinity(0, sizeof caller_affinity_, &caller_affinity_);
}

void ThreadTeam::worker(unsigned member) {
  if (!pin_current_thread_to_core(member)) pinned_ = false;
  unsigned seen = 0;
  for (;;) {
    unsigned spins = 0;
    while (generation_.load(std::memory_order_acquire) == seen) {
      _mm_pause();
      // Idle for long (a millisecond or more): sleep until the next release. Yielding instead
      // kept an idle team's cores busy whenever nothing else was runnable, and a second team
      // pinned to the same cores lost up to half its rate to it. Jobs of a step follow each
      // other within microseconds, so a working team never gets here.
      if (++spins > kSpinsBeforeSleep) {
        generation_.wait(seen, std::memory_order_acquire);
        spins = 0;
      }
    }
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_acquire)) return;
    (*job_)(member);
    finished_.fetch_add(1, std::memory_order_acq_rel);
  }
}

void ThreadTeam::run(const std::function<void(unsigned)>& job) {
  job_ = &job;
  finished_.store(0, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();  // a load of the waiter count unless a member sleeps
  job(0);
  while (finished_.load(std::memory_order_acquire) != size_ - 1) _mm_pause();
}

void ThreadTeam::barrier() {
  const unsigned gen = barrier_generation_.load(std::memory_order_acquire);
  if (barrier_count_.fetch_add(1, std::memory_order_acq_rel) + 1 == size_) {
    barrier_count_.store(0, std::memory_order_relaxed);
    barrier_generation_.fetch_add(1, std::memory_order_acq_rel);
    return;
  }
  while (barrier_generation_.load(std::memory_order_acquire) == gen) _mm_pause();
}

}  // namespace infercast
