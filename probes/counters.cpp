#include "probes/counters.h"

#include <likwid.h>
#include <papi.h>

#include <fmt/format.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

namespace infercast {
namespace {

class UnavailableSession final : public CounterSession {
 public:
  UnavailableSession(std::string backend, std::string reason)
      : backend_(std::move(backend)), reason_(std::move(reason)) {}
  [[nodiscard]] std::string backend() const override { return backend_; }
  [[nodiscard]] bool available() const override { return false; }
  [[nodiscard]] std::string reason() const override { return reason_; }
  void start() override {}
  std::vector<CounterReading> stop() override { return {}; }

 private:
  std::string backend_, reason_;
};

// PAPI_library_init may run once per process; later sessions reuse its result.
int papi_init_status() {
  static const int status = [] {
    const int rc = PAPI_library_init(PAPI_VER_CURRENT);
    if (rc == PAPI_VER_CURRENT) PAPI_thread_init(pthread_self);
    return rc;
  }();
  return status;
}

class PapiSession final : public CounterSession {
 public:
  PapiSession(int event_set, std::vector<std::string> events)
      : event_set_(event_set), events_(std::move(events)) {}
  ~PapiSession() override {
    PAPI_cleanup_eventset(event_set_);
    PAPI_destroy_eventset(&event_set_);
  }
  PapiSession(const PapiSession&) = delete;
  PapiSession& operator=(const PapiSession&) = delete;
  [[nodiscard]] std::string backend() const override { return "papi"; }
  [[nodiscard]] bool available() const override { return true; }
  [[nodiscard]] std::string reason() const override { return {}; }
  void start() override { PAPI_start(event_set_); }
  std::vector<CounterReading> stop() override {
    std::vector<long long> values(events_.size());
    std::vector<CounterReading> out;
    if (PAPI_stop(event_set_, values.data()) != PAPI_OK) return out;
    for (std::size_t i = 0; i < events_.size(); ++i) {
      out.push_back({events_[i], static_cast<std::uint64_t>(values[i] < 0 ? 0 : values[i])});
    }
    return out;
  }

 private:
  int event_set_;
  std::vector<std::string> events_;
};

class LikwidSession final : public CounterSession {
 public:
  LikwidSession(int group, std::vector<int> cpus) : group_(group), cpus_(std::move(cpus)) {}
  ~LikwidSession() override {
    perfmon_finalize();
    topology_finalize();
  }
  LikwidSession(const LikwidSession&) = delete;
  LikwidSession& operator=(const LikwidSession&) = delete;
  [[nodiscard]] std::string backend() const override { return "likwid"; }
  [[nodiscard]] bool available() const override { return true; }
  [[nodiscard]] std::string reason() const override { return {}; }
  void start() override { perfmon_startCounters(); }
  std::vector<CounterReading> stop() override {
    std::vector<CounterReading> out;
    if (perfmon_stopCounters() != 0) return out;
    const int events = perfmon_getNumberOfEvents(group_);
    for (int e = 0; e < events; ++e) {
      double total = 0;
      for (std::size_t t = 0; t < cpus_.size(); ++t) {
        total += perfmon_getResult(group_, e, static_cast<int>(t));
      }
      out.push_back({perfmon_getEventName(group_, e), static_cast<std::uint64_t>(total)});
    }
    return out;
  }

 private:
  int group_;
  std::vector<int> cpus_;
};

// likwid prints its own complaint to stderr when it lacks access; the reason is recorded
// instead, so stderr goes to /dev/null for the duration of a call.
int quietly(const std::function<int()>& fn) {
  std::fflush(stderr);
  const int saved = dup(STDERR_FILENO);
  const int null_fd = open("/dev/null", O_WRONLY);
  if (null_fd >= 0) dup2(null_fd, STDERR_FILENO);
  const int rc = fn();
  std::fflush(stderr);
  if (saved >= 0) {
    dup2(saved, STDERR_FILENO);
    close(saved);
  }
  if (null_fd >= 0) close(null_fd);
  return rc;
}

// What the trial child reports when topology_init fails; perfmon_init's own errors are small
// negative numbers.
constexpr int kTopologyFailed = -1000;

std::unique_ptr<CounterSession> likwid_unavailable(std::string reason) {
  return std::make_unique<UnavailableSession>("likwid", std::move(reason));
}

}  // namespace

std::unique_ptr<CounterSession> open_papi(const std::vector<std::string>& events) {
  const int init = papi_init_status();
  if (init != PAPI_VER_CURRENT) {
    return std::make_unique<UnavailableSession>(
        "papi", fmt::format("PAPI_library_init failed: {}", init > 0 ? "version mismatch"
                                                                     : PAPI_strerror(init)));
  }
  int event_set = PAPI_NULL;
  if (int rc = PAPI_create_eventset(&event_set); rc != PAPI_OK) {
    return std::make_unique<UnavailableSession>(
        "papi", fmt::format("PAPI_create_eventset: {}", PAPI_strerror(rc)));
  }
  for (const std::string& event : events) {
    const int rc = PAPI_add_named_event(event_set, event.c_str());
    if (rc != PAPI_OK) {
      PAPI_cleanup_eventset(event_set);
      PAPI_destroy_eventset(&event_set);
      const PAPI_hw_info_t* hw = PAPI_get_hardware_info();
      const bool vm = hw != nullptr && hw->virtualized != 0;
      return std::make_unique<UnavailableSession>(
          "papi", fmt::format("cannot count {}: {}{}", event, PAPI_strerror(rc),
                              vm ? " (running in a virtual machine without a CPU PMU?)" : ""));
    }
  }
  return std::make_unique<PapiSession>(event_set, events);
}

ChildOutcome run_in_child(const std::function<int()>& fn) {
  int fds[2];
  if (pipe(fds) != 0) return {false, 0, "pipe failed"};
  // Whatever sits in the parent's stdio buffers would be written twice if the child exits.
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return {false, 0, "fork failed"};
  }
  if (pid == 0) {
    close(fds[0]);
    const int value = fn();
    const bool sent = write(fds[1], &value, sizeof value) == static_cast<ssize_t>(sizeof value);
    _exit(sent ? 0 : 1);
  }
  close(fds[1]);
  int value = 0;
  std::size_t got = 0;
  while (got < sizeof value) {
    const ssize_t n = read(fds[0], reinterpret_cast<char*>(&value) + got, sizeof value - got);
    if (n > 0) {
      got += static_cast<std::size_t>(n);
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (got == sizeof value) return {true, value, ""};
  if (WIFEXITED(status)) return {false, 0, fmt::format("exited with status {}", WEXITSTATUS(status))};
  if (WIFSIGNALED(status)) return {false, 0, fmt::format("killed by signal {}", WTERMSIG(status))};
  return {false, 0, "ended"};
}

std::unique_ptr<CounterSession> open_likwid(const std::vector<int>& cpus, const std::string& group) {
  std::vector<int> ids = cpus;
  const auto init = [&] { return perfmon_init(static_cast<int>(ids.size()), ids.data()); };
  // Both calls may exit() rather than return: topology_init when likwid's access daemon is not
  // installed (a copied binary on another machine), perfmon_init on CPUs it does not know. The
  // child takes the blow first.
  const ChildOutcome trial = run_in_child([&] {
    if (quietly(topology_init) != 0) return kTopologyFailed;
    const int rc = quietly(init);
    if (rc >= 0) perfmon_finalize();
    topology_finalize();
    return rc;
  });
  if (!trial.returned) {
    return likwid_unavailable(
        fmt::format("likwid's set-up {} instead of returning: likwid is not installed "
                    "with its access daemon, does not support the CPU or cannot "
                    "reach its counters",
                    trial.how));
  }
  if (trial.value == kTopologyFailed || topology_init() != 0)
    return likwid_unavailable("likwid topology_init failed");
  // It returns here as it did in the child (an error code included).
  const int rc = quietly(init);
  if (rc < 0) {
    topology_finalize();
    return std::make_unique<UnavailableSession>(
        "likwid", fmt::format("perfmon_init returned {}: no access to MSRs or perf_event "
                              "counters on these CPUs",
                              rc));
  }
  std::string group_name = group;
  const int gid = perfmon_addEventSet(group_name.data());
  if (gid < 0 || perfmon_setupCounters(gid) < 0) {
    perfmon_finalize();
    topology_finalize();
    return std::make_unique<UnavailableSession>(
        "likwid", fmt::format("performance group {} is not available on this CPU", group));
  }
  return std::make_unique<LikwidSession>(gid, std::move(ids));
}

std::vector<std::string> default_papi_events() { return {"PAPI_L3_TCM"}; }

CounterReport observe_counters(const std::function<double()>& region, unsigned line_bytes) {
  std::vector<std::unique_ptr<CounterSession>> sessions;
  sessions.push_back(open_papi(default_papi_events()));
  sessions.push_back(open_likwid({0}, "MEM"));
  CounterReport report;
  for (auto& s : sessions) {
    if (s->available()) s->start();
  }
  report.timed_bytes = region();
  for (auto& s : sessions) {
    CounterReport::Backend b{s->backend(), s->available(), s->reason(), {}};
    if (s->available()) b.readings = s->stop();
    for (const auto& r : b.readings) {
      if (r.event == "PAPI_L3_TCM") {
        report.counted_bytes = static_cast<double>(r.value) * line_bytes;
      }
    }
    report.backends.push_back(std::move(b));
  }
  return report;
}

}  // namespace infercast
