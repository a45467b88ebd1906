#include <gtest/gtest.h>

#include <cmath>

#include "probes/plateau.h"

using namespace infercast;

namespace {
Topology three_level_topology() {
  Topology topo;
  topo.caches = {{1, "data", 48 << 10, 64, 2, 1, 1},
                 {2, "unified", 2 << 20, 64, 2, 1, 1},
                 {3, "unified", 32 << 20, 64, 1, 2, 2}};
  return topo;
}

// A synthetic read sweep: 250 GB/s in L1, 120 in L2, 60 in L3, 20 in DRAM, with +-3% noise
// and one transition sample between levels.
std::vector<SweepSample> synthetic_sweep() {
  std::vector<SweepSample> s;
  double noise[] = {1.0, 1.03, 0.97, 1.01, 0.99, 1.02};
  int k = 0;
  for (std::uint64_t b = 4 << 10; b <= (1ULL << 30); b *= 2) {
    double v = 0;
    if (b <= (32 << 10)) v = 250;
    else if (b == (64 << 10)) v = 170;  // transition
    else if (b <= (2 << 20)) v = 120;
    else if (b == (4 << 20)) v = 90;   // transition
    else if (b <= (32 << 20)) v = 60;
    else if (b == (64 << 20)) v = 35;  // transition
    else v = 20;
    s.push_back({b, v * noise[k++ % 6]});
  }
  return s;
}
}  // namespace

TEST(Plateaus, FindsEveryLevelOfASyntheticSweep) {
  const auto plateaus = label_plateaus(find_plateaus(synthetic_sweep()), three_level_topology(), 1);
  ASSERT_EQ(plateaus.size(), 4U);
  EXPECT_EQ(plateaus[0].level, "L1");
  EXPECT_NEAR(plateaus[0].value, 250, 10);
  EXPECT_EQ(plateaus[1].level, "L2");
  EXPECT_NEAR(plateaus[1].value, 120, 5);
  EXPECT_EQ(plateaus[2].level, "L3");
  EXPECT_NEAR(plateaus[2].value, 60, 3);
  EXPECT_EQ(plateaus[3].level, "DRAM");
  EXPECT_NEAR(plateaus[3].value, 20, 1);
  EXPECT_EQ(plateaus[1].from_bytes, 128U << 10);
  EXPECT_EQ(plateaus[1].to_bytes, 2U << 20);
}

TEST(Plateaus, FlatCurveIsOnePlateau) {
  std::vector<SweepSample> flat;
  for (std::uint64_t b = 4096; b <= (1 << 20); b *= 2) flat.push_back({b, 100.0});
  const auto p = find_plateaus(flat);
  ASSERT_EQ(p.size(), 1U);
  EXPECT_EQ(p[0].samples, static_cast<int>(flat.size()));
}

TEST(Plateaus, SharedCacheCapacityIsSplitAmongThreads) {
  // With two threads each sees half of the shared 32 MiB L3: a plateau ending at 24 MiB per
  // thread is beyond its share, so it is DRAM.
  std::vector<Plateau> p(1);
  p[0].from_bytes = 8 << 20;
  p[0].to_bytes = 24 << 20;
  p[0].samples = 3;
  EXPECT_EQ(label_plateaus(p, three_level_topology(), 1)[0].level, "L3");
  EXPECT_EQ(label_plateaus(p, three_level_topology(), 2)[0].level, "DRAM");
}

TEST(Plateaus, EmptyInput) {
  EXPECT_TRUE(find_plateaus({}).empty());
  EXPECT_TRUE(label_plateaus({}, three_level_topology(), 1).empty());
}
