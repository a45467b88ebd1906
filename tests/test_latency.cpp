#include <gtest/gtest.h>

#include <set>

#include "probes/latency.h"
#include "probes/memory.h"

using namespace infercast;

TEST(Latency, ChaseIsOneCycleThroughEveryLine) {
  constexpr std::size_t kLines = 4096;
  PageBuffer buf(kLines * 64);
  build_chase(buf.data(), kLines, 42);
  std::set<const void*> seen;
  const void* p = buf.data();
  for (std::size_t i = 0; i < kLines; ++i) {
    seen.insert(p);
    p = chase(p, 1);
  }
  EXPECT_EQ(p, buf.data());  // back at the start after exactly kLines steps
  EXPECT_EQ(seen.size(), kLines);
  for (const void* q : seen) {
    const auto offset = static_cast<const std::byte*>(q) - buf.data();
    EXPECT_EQ(offset % 64, 0);
    EXPECT_LT(offset, static_cast<std::ptrdiff_t>(kLines * 64));
  }
}

TEST(Latency, SweepReportsPlausibleLatencies) {
  LatencyOptions o;
  o.sizes = {16 << 10, 8 << 20};
  o.min_time = 0.002;
  o.samples = 2;
  const auto points = run_latency_sweep(o);
  ASSERT_EQ(points.size(), 2U);
  EXPECT_GT(points[0].ns, 0.1);
  EXPECT_LT(points[0].ns, 50.0);
  EXPECT_GE(points[1].ns, points[0].ns);  // larger working sets are never faster
}

TEST(Latency, LoadedLatencyNeedsTwoThreads) {
  LoadedLatencyOptions o;
  o.threads = 1;
  o.bytes = 8 << 20;
  EXPECT_TRUE(run_loaded_latency(o).empty());
}

TEST(Latency, LoadedLatencyMeasuresWithStreamers) {
  LoadedLatencyOptions o;
  o.threads = 2;
  o.bytes = 16 << 20;
  o.delays_ns = {0, 5000};
  o.seconds_per_point = 0.05;
  o.level = max_supported_level(host_cpu());
  const auto points = run_loaded_latency(o);
  ASSERT_EQ(points.size(), 2U);
  for (const auto& p : points) {
    EXPECT_GT(p.latency_ns, 0.0);
    EXPECT_GT(p.stream_gbs, 0.0);
    EXPECT_EQ(p.stream_threads, 1U);
  }
}
