#pragma once
// A persistent team of threads, each pinned to its own physical core, that runs one function on
// every member and waits for all of them. Created once per measurement series, so timing never
// includes thread creation; members spin between jobs so a release costs ~100 ns, not a futex
// wake-up, and sleep on the release counter once idle for a millisecond or more. Member 0 is the
// calling thread; its previous CPU affinity is restored when the team ends, so a library using a
// team does not leave its caller pinned to one core.
#include <atomic>
#include <functional>
#include <thread>
#include <vector>

#include <sched.h>

namespace infercast {

class ThreadTeam {
 public:
  // Starts `size` members (size >= 1); member i is pinned to core i.
  explicit ThreadTeam(unsigned size);
  ~ThreadTeam();
  ThreadTeam(const ThreadTeam&) = delete;
  ThreadTeam& operator=(const ThreadTeam&) = delete;

  [[nodiscard]] unsigned size() const { return size_; }
  // Whether every member was pinned to its core.
  [[nodiscard]] bool pinned() const { return pinned_.load(); }

  // Runs job(member) on every member at once; returns when all have finished. The elapsed time
  // between the release and the last member's finish is that of the slowest member.
  void run(const std::function<void(unsigned member)>& job);

  // Spinning barrier for use *inside* a job, so members can line up between timed phases.
  void barrier();

  // Pauses a member spins through before it sleeps: 1-3 ms at 20-40 ns a pause.
  static constexpr unsigned kSpinsBeforeSleep = 1U << 16;

 private:
  void worker(unsigned member);

  unsigned size_;
  std::vector<std::thread> threads_;
  const std::function<void(unsigned)>* job_ = nullptr;
  std::atomic<unsigned> generation_{0};
  std::atomic<unsigned> finished_{0};
  std::atomic<bool> stop_{false};
  std::atomic<bool> pinned_{true};
  std::atomic<unsigned> barrier_count_{0};
  std::atomic<unsigned> barrier_generation_{0};
  cpu_set_t caller_affinity_{};
  bool caller_affinity_saved_ = false;
};

}  // namespace infercast
