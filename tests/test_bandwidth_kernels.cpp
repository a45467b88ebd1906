#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "probes/bandwidth.h"
#include "probes/cpu_features.h"
#include "probes/memory.h"

using namespace infercast;

namespace {
std::vector<IsaLevel> runnable_levels() {
  std::vector<IsaLevel> levels;
  const IsaLevel best = max_supported_level(host_cpu());
  for (IsaLevel l : {IsaLevel::scalar, IsaLevel::avx2, IsaLevel::avx512}) {
    if (l <= best) levels.push_back(l);
  }
  return levels;
}

class StreamKernelTest : public ::testing::TestWithParam<IsaLevel> {};
}  // namespace

TEST_P(StreamKernelTest, EveryKernelMatchesTheScalarReference) {
  const StreamKernels& k = stream_kernels_for(GetParam());
  const StreamKernels& ref = stream_kernels_scalar();
  for (std::size_t n : {kBandwidthBlock, 3 * kBandwidthBlock, 64 * kBandwidthBlock}) {
    PageBuffer buf(4 * n * 4 + 4096);
    auto* a = buf.as<std::uint32_t>();
    auto* b = a + n;
    for (std::size_t i = 0; i < n; ++i) a[i] = static_cast<std::uint32_t>(i * 2654435761U + 7);
    const std::uint32_t expected = std::accumulate(a, a + n, 0U);
    for (unsigned streams : {1U, 4U, 8U}) {
      EXPECT_EQ(k.read(a, n, 1, streams), expected) << "streams " << streams << " n " << n;
      EXPECT_EQ(k.read(a, n, 3, streams), 3U * expected);
      EXPECT_EQ(ref.read(a, n, 3, streams), 3U * expected);
    }
    k.copy(b, a, n, 2);
    EXPECT_TRUE(std::equal(a, a + n, b));
    k.write(b, n, 0xDEADBEEFU, 1);
    EXPECT_TRUE(std::all_of(b, b + n, [](std::uint32_t v) { return v == 0xDEADBEEFU; }));
    k.write_nt(b, n, 0x12345678U, 2);
    EXPECT_TRUE(std::all_of(b, b + n, [](std::uint32_t v) { return v == 0x12345678U; }));

    auto* fa = reinterpret_cast<float*>(a);
    auto* fb = reinterpret_cast<float*>(a + n);
    auto* fc = reinterpret_cast<float*>(a + 2 * n);
    auto* fr = reinterpret_cast<float*>(a + 3 * n);
    for (std::size_t i = 0; i < n; ++i) {
      fb[i] = static_cast<float>(i % 13) * 0.25F;
      fc[i] = static_cast<float>(i % 5) - 2.0F;
    }
    k.triad(fa, fb, fc, 1.5F, n, 1);
    ref.triad(fr, fb, fc, 1.5F, n, 1);
    for (std::size_t i = 0; i < n; ++i) ASSERT_FLOAT_EQ(fa[i], fr[i]) << i;
  }
}

TEST_P(StreamKernelTest, ReadDetectsACorruptedElement) {
  // The read check is what keeps the probe honest; make sure it can fail.
  const StreamKernels& k = stream_kernels_for(GetParam());
  const std::size_t n = 8 * kBandwidthBlock;
  PageBuffer buf(n * 4);
  auto* a = buf.as<std::uint32_t>();
  std::fill_n(a, n, 1U);
  EXPECT_EQ(k.read(a, n, 1, 8), n);
  a[n - 1] = 2;
  EXPECT_NE(k.read(a, n, 1, 8), n);
}

INSTANTIATE_TEST_SUITE_P(Levels, StreamKernelTest, ::testing::ValuesIn(runnable_levels()),
                         [](const auto& param_info) { return std::string(to_string(param_info.param)); });

TEST(StreamContracts, BytesFollowTheStreamConvention) {
  EXPECT_EQ(bytes_per_pass(StreamKernel::read, 100), 400U);
  EXPECT_EQ(bytes_per_pass(StreamKernel::copy, 100), 800U);
  EXPECT_EQ(bytes_per_pass(StreamKernel::triad, 100), 1200U);  // no write-allocate
  EXPECT_EQ(contract(StreamKernel::write_nt).stores, "non-temporal");
}

TEST(SweepSizes, GeometricIncreasingAndBounded) {
  const auto sizes = sweep_sizes(64 << 10, 16 << 20, 2, 4096);
  ASSERT_FALSE(sizes.empty());
  EXPECT_EQ(sizes.front(), 64U << 10);
  EXPECT_EQ(sizes.back(), 16U << 20);
  for (std::size_t i = 1; i < sizes.size(); ++i) {
    EXPECT_GT(sizes[i], sizes[i - 1]);
    EXPECT_EQ(sizes[i] % 4096, 0U);
  }
  EXPECT_EQ(sizes.size(), 17U);  // 8 octaves x 2 + 1
  EXPECT_TRUE(sweep_sizes(8192, 4096, 2, 4096).empty());
  // Below the granularity's resolution neighbouring points merge rather than repeat.
  const auto small = sweep_sizes(4096, 16384, 4, 4096);
  EXPECT_EQ(small, (std::vector<std::uint64_t>{4096, 8192, 12288, 16384}));
}

TEST(SweepSizes, ReadStreamsFollowTheCacheLevels) {
  Topology topo;
  topo.caches = {{1, "data", 48 << 10, 64, 2, 1, 1}, {2, "unified", 2 << 20, 64, 2, 1, 1}};
  EXPECT_EQ(read_streams_for(16 << 10, topo), 1U);
  EXPECT_EQ(read_streams_for(1 << 20, topo), 4U);
  EXPECT_EQ(read_streams_for(64 << 20, topo), 8U);
}

TEST(BandwidthSweep, SmallSweepProducesVerifiedPoints) {
  BandwidthOptions o;
  o.thread_counts = {1, 2};
  o.min_bytes = 16 << 10;
  o.max_bytes = 1 << 20;
  o.points_per_octave = 1;
  o.min_time = 0.0005;
  o.samples = 2;
  o.level = max_supported_level(host_cpu());
  const auto points = run_bandwidth_sweep(o, host_topology());
  EXPECT_GE(points.size(), 50U);  // the smallest sizes are too small for some kernels at 2 threads
  for (const auto& p : points) {
    EXPECT_GT(p.gbs.best, 0.0);
    EXPECT_GE(p.gbs.best, p.gbs.median);
    EXPECT_LE(p.bytes, o.max_bytes);
    EXPECT_EQ(p.gbs.samples, 2);
  }
}

TEST(StreamKernels, EmptyArraysAreANoOpAtEveryLevel) {
  const IsaLevel best = max_supported_level(host_cpu());
  for (IsaLevel l : {IsaLevel::scalar, IsaLevel::avx2, IsaLevel::avx512}) {
    if (l > best) continue;
    const StreamKernels& k = stream_kernels_for(l);
    alignas(64) std::uint32_t a[16] = {};
    for (unsigned streams : {1U, 4U, 8U}) EXPECT_EQ(k.read(a, 0, 3, streams), 0U);
    k.write(a, 0, 5, 1);
    k.copy(a, a, 0, 1);
    EXPECT_EQ(a[0], 0U);
  }
}

TEST(BandwidthSweep, TheDramReadBufferIsTwiceTheLastLevelCache) {
  Topology t;
  t.available_memory_bytes = std::uint64_t{64} << 30;
  const std::uint64_t mib = std::uint64_t{1} << 20;
  EXPECT_EQ(dram_buffer_bytes(t), 1024 * mib);  // no cache found: the floor
  t.caches.push_back(CacheLevel{3, "unified", 300 * mib, 64, 1, 16, 16});
  EXPECT_EQ(dram_buffer_bytes(t), 1024 * mib);  // twice the cache is below the floor
  t.caches.back().size_bytes = 800 * mib;
  EXPECT_EQ(dram_buffer_bytes(t), 1600 * mib);
  t.available_memory_bytes = std::uint64_t{2} << 30;
  EXPECT_EQ(dram_buffer_bytes(t), 512 * mib);  // a quarter of what is free
  t.available_memory_bytes = 512 * mib;
  EXPECT_EQ(dram_buffer_bytes(t), 256 * mib);  // never below the least
}

TEST(BandwidthSweep, ADramWorkingSetScalesWithTheCacheBetweenItsBounds) {
  Topology t;
  t.available_memory_bytes = std::uint64_t{64} << 30;
  const std::uint64_t mib = std::uint64_t{1} << 20;
  t.caches.push_back(CacheLevel{3, "unified", 300 * mib, 64, 1, 16, 16});
  EXPECT_EQ(dram_working_set(t, 2), 1024 * mib);  // the floor
  EXPECT_EQ(dram_working_set(t, 4), 1200 * mib);
  EXPECT_EQ(dram_working_set(t, 8), 2400 * mib);
  t.available_memory_bytes = std::uint64_t{4} << 30;
  EXPECT_EQ(dram_working_set(t, 8), 1024 * mib);  // a quarter of what is free
  EXPECT_EQ(dram_buffer_bytes(t), dram_working_set(t, 2));
}
