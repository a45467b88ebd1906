#include <gtest/gtest.h>

#include "probes/stats.h"
#include "probes/units.h"

using namespace infercast;

TEST(Stats, SummarizesRates) {
  const Summary s = summarize_rates({10, 12, 11, 9, 30});
  EXPECT_DOUBLE_EQ(s.best, 30);
  EXPECT_DOUBLE_EQ(s.worst, 9);
  EXPECT_DOUBLE_EQ(s.median, 11);
  EXPECT_DOUBLE_EQ(s.mean, 14.4);
  EXPECT_GT(s.cv, 0.3);
  EXPECT_EQ(s.samples, 5);
  EXPECT_DOUBLE_EQ(median_of({1, 2, 3, 4}), 2.5);
  EXPECT_EQ(summarize_rates({}).samples, 0);
  EXPECT_DOUBLE_EQ(summarize_rates({5}).cv, 0);
}

TEST(Units, ParsesSizes) {
  EXPECT_EQ(parse_size("512MiB"), 512ULL << 20);
  EXPECT_EQ(parse_size("2G"), 2ULL << 30);
  EXPECT_EQ(parse_size("1.5k"), 1536U);
  EXPECT_EQ(parse_size("4096"), 4096U);
  EXPECT_FALSE(parse_size("lots").has_value());
  EXPECT_FALSE(parse_size("-1G").has_value());
  EXPECT_FALSE(parse_size("12XB").has_value());
  EXPECT_FALSE(parse_size("99999999999T").has_value());
  EXPECT_EQ(format_size(4096), "4 KiB");
  EXPECT_EQ(format_size(3ULL << 20), "3.0 MiB");
}
