#include <gtest/gtest.h>

#include <cstdlib>

#include "probes/counters.h"

using namespace infercast;

TEST(Counters, UnknownEventIsUnavailableWithPapisReason) {
  auto s = open_papi({"NO_SUCH_EVENT_ANYWHERE"});
  EXPECT_EQ(s->backend(), "papi");
  EXPECT_FALSE(s->available());
  EXPECT_NE(s->reason().find("NO_SUCH_EVENT_ANYWHERE"), std::string::npos);
  s->start();
  EXPECT_TRUE(s->stop().empty());
}

TEST(Counters, SoftwareEventCountsWhereThePmuIsMissing) {
  // The kernel's software task clock works even in a VM without a CPU PMU: it exercises the
  // path that reads real counts, so that path is tested on every machine.
  auto s = open_papi({"perf::TASK-CLOCK"});
  if (!s->available()) GTEST_SKIP() << "PAPI perf_event component unavailable: " << s->reason();
  s->start();
  volatile double x = 0;
  for (int i = 0; i < 1000000; ++i) x = x + 1.0;
  const auto readings = s->stop();
  ASSERT_EQ(readings.size(), 1U);
  EXPECT_EQ(readings[0].event, "perf::TASK-CLOCK");
  EXPECT_GT(readings[0].value, 0U);
}

TEST(Counters, HardwareEventEitherCountsOrSaysWhyNot) {
  auto s = open_papi(default_papi_events());
  if (s->available()) {
    s->start();
    std::vector<char> big(64 << 20, 1);
    volatile long sum = 0;
    for (std::size_t i = 0; i < big.size(); i += 64) sum = sum + big[i];
    const auto readings = s->stop();
    ASSERT_FALSE(readings.empty());
  } else {
    EXPECT_FALSE(s->reason().empty());
  }
}

TEST(Counters, ObserveReportsEveryBackend) {
  const CounterReport r = observe_counters([] { return 1234.0; }, 64);
  ASSERT_EQ(r.backends.size(), 2U);
  EXPECT_EQ(r.backends[0].name, "papi");
  EXPECT_EQ(r.backends[1].name, "likwid");
  EXPECT_EQ(r.timed_bytes, 1234.0);
  for (const auto& b : r.backends) {
    if (!b.available) {
      EXPECT_FALSE(b.reason.empty()) << b.name;
      EXPECT_TRUE(b.readings.empty());
    }
  }
  EXPECT_EQ(r.counted_bytes.has_value(), r.backends[0].available);
}

TEST(Counters, ACallThatEndsItsProcessIsToldFromOneThatReturns) {
  const ChildOutcome returned = run_in_child([] { return -7; });
  EXPECT_TRUE(returned.returned);
  EXPECT_EQ(returned.value, -7);
  const ChildOutcome exited = run_in_child([]() -> int { std::exit(1); });
  EXPECT_FALSE(exited.returned);
  // Not the status itself: a leak checker at exit may change it.
  EXPECT_EQ(exited.how.rfind("exited with status ", 0), 0U) << exited.how;
  const ChildOutcome killed = run_in_child([]() -> int { std::abort(); });
  EXPECT_FALSE(killed.returned);
  EXPECT_NE(killed.how.find("signal"), std::string::npos) << killed.how;
}

TEST(Counters, LikwidEitherOpensOrSaysWhyNotWithoutEndingTheProcess) {
  auto s = open_likwid({0}, "MEM");
  EXPECT_EQ(s->backend(), "likwid");
  if (!s->available()) {
    EXPECT_FALSE(s->reason().empty());
  }
}
