#pragma once
// Hardware performance counters through PAPI and likwid, optional by nature: in a VM without a
// CPU PMU, or without permission, each backend records why it is unavailable and the probe
// carries on with timed figures. The backends sit behind one interface so the probe can read
// counters around any measured region, and tests can exercise both outcomes.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace infercast {

struct CounterReading {
  std::string event;
  std::uint64_t value = 0;
};

class CounterSession {
 public:
  virtual ~CounterSession() = default;
  [[nodiscard]] virtual std::string backend() const = 0;
  [[nodiscard]] virtual bool available() const = 0;
  // Why the counters cannot be read (empty when available).
  [[nodiscard]] virtual std::string reason() const = 0;
  // Brackets a measured region; readings are the counts inside it. Unavailable sessions
  // return no readings.
  virtual void start() = 0;
  virtual std::vector<CounterReading> stop() = 0;
};

// PAPI on the calling thread with the given events (preset names such as PAPI_L3_TCM or native
// ones such as perf::TASK-CLOCK). Unavailable, with PAPI's own words as the reason, if the
// library or any event cannot be set up.
std::unique_ptr<CounterSession> open_papi(const std::vector<std::string>& events);

// likwid's perfmon on the given CPUs with a performance group (e.g. "MEM"). Unavailable, with
// the reason, when perfmon cannot be initialised (no MSR or perf_event access, or a CPU this
// likwid does not know: likwid 5.2 calls exit() from perfmon_init on AMD family 1Ah, so the
// call is tried in a child process first).
std::unique_ptr<CounterSession> open_likwid(const std::vector<int>& cpus, const std::string& group);

// Runs `fn` in a forked child: for library calls that may end the process instead of
// returning an error. `returned` with fn's value if fn came back; otherwise `how` the child
// ended ("exited with status 1", "killed by signal 11").
struct ChildOutcome {
  bool returned = false;
  int value = 0;
  std::string how;
};
ChildOutcome run_in_child(const std::function<int()>& fn);

// The events the DRAM read probe asks PAPI for: last-level cache misses, which at 64 bytes per
// miss give the memory traffic to compare with the timed bytes.
std::vector<std::string> default_papi_events();

// Counters observed around a DRAM read measurement: what each backend said, and if one could
// count, the traffic it implies beside the timed figure.
struct CounterReport {
  struct Backend {
    std::string name;
    bool available = false;
    std::string reason;
    std::vector<CounterReading> readings;
  };
  std::vector<Backend> backends;
  std::optional<double> counted_bytes;  // LLC misses x line size, when counted
  std::optional<double> timed_bytes;    // what the kernel's contract says it moved
};

// Opens every backend, brackets `region` with those that are available, and reports.
CounterReport observe_counters(const std::function<double()>& region, unsigned line_bytes);

}  // namespace infercast
