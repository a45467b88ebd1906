#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "probes/compute.h"
#include "probes/compute_kernels.h"

using namespace infercast;

TEST(Compute, EveryAvailableKernelChecksItsResult) {
  const CpuFeatures& cpu = host_cpu();
  const IsaLevel best = max_supported_level(cpu);
  if (best >= IsaLevel::avx2) {
    EXPECT_TRUE(kernels_avx2::fp32_fma(1000));
    EXPECT_TRUE(kernels_avx2::int8_avx2(1000));
    EXPECT_TRUE(kernels_avx2::int8_avx2(40000));  // past 2^16 / 2: the 16-bit lanes wrap, as checked
    if (cpu.avx_vnni) {
      EXPECT_TRUE(kernels_avx2::int8_avx_vnni(1000));
    }
  }
  if (best >= IsaLevel::avx512) {
    EXPECT_TRUE(kernels_avx512::fp32_fma(1000));
    if (cpu.avx512_bf16) {
      EXPECT_TRUE(kernels_avx512::bf16_dot(1000));
    }
    if (cpu.avx512_vnni) {
      EXPECT_TRUE(kernels_avx512::int8_vnni(1000));
    }
  }
  if (best >= IsaLevel::amx) {
    for (int acc = 1; acc <= kernels_amx::kMaxAccumulators; ++acc) {
      EXPECT_TRUE(kernels_amx::int8_tiles(100, acc)) << acc;
      EXPECT_TRUE(kernels_amx::bf16_tiles(100, acc)) << acc;
    }
  }
}

TEST(Compute, ForcedLevelMakesHigherKernelsUnavailableWithAReason) {
  for (const auto& k : compute_kernels(host_cpu(), IsaLevel::scalar)) {
    EXPECT_FALSE(k.available) << k.name;
    EXPECT_FALSE(k.reason.empty()) << k.name;
  }
  for (const auto& k : compute_kernels(host_cpu(), IsaLevel::avx2)) {
    if (k.level > IsaLevel::avx2) {
      EXPECT_FALSE(k.available) << k.name;
    }
  }
}

TEST(Compute, PeaksRunOnlyAllowedKernels) {
  ComputeOptions o;
  o.thread_counts = {1};
  o.min_time = 0.002;
  o.samples = 1;
  o.level = std::min(IsaLevel::avx2, max_supported_level(host_cpu()));
  const auto peaks = run_compute_peaks(o, host_cpu());
  for (const auto& p : peaks) {
    EXPECT_TRUE(p.kernel.find("avx512") == std::string::npos && p.kernel.find("amx") == std::string::npos)
        << p.kernel;
    EXPECT_GT(p.gops.best, 0.0);
    EXPECT_GT(p.ghz, 0.1);
  }
}

TEST(Compute, OnlyTheNamedKernelsRun) {
  ComputeOptions o;
  o.thread_counts = {1};
  o.min_time = 0.002;
  o.samples = 1;
  o.level = max_supported_level(host_cpu());
  std::vector<std::string> runnable;
  for (const auto& k : compute_kernels(host_cpu(), o.level)) {
    if (k.available) runnable.push_back(k.name);
  }
  if (runnable.empty()) GTEST_SKIP() << "no compute kernel at this ISA level";
  o.only = {runnable.back(), "no_such_kernel"};
  const auto peaks = run_compute_peaks(o, host_cpu());
  ASSERT_EQ(peaks.size(), 1U);
  EXPECT_EQ(peaks[0].kernel, runnable.back());
  EXPECT_GT(peaks[0].gops.best, 0.0);
}

TEST(Compute, EveryKernelIsSampledInEveryRound) {
  ComputeOptions o;
  o.thread_counts = {1};
  o.min_time = 0.002;
  o.samples = 2;
  o.rounds = 3;
  o.level = std::min(IsaLevel::avx2, max_supported_level(host_cpu()));
  std::vector<std::string> steps;
  o.progress = [&](const std::string& step, double) { steps.push_back(step); };
  const auto peaks = run_compute_peaks(o, host_cpu());
  if (peaks.empty()) GTEST_SKIP() << "no compute kernel at this ISA level";
  for (const auto& p : peaks) {
    EXPECT_EQ(p.gops.samples, o.rounds * o.samples) << p.kernel;
    EXPECT_GE(p.gops.best, p.gops.median) << p.kernel;
    EXPECT_GT(p.ghz, 0.1) << p.kernel;
  }
  // Round by round: every kernel in the first round before any kernel's last.
  ASSERT_EQ(steps.size(), peaks.size() * static_cast<std::size_t>(o.rounds));
  for (std::size_t i = 0; i < steps.size(); ++i) {
    EXPECT_NE(steps[i].find(fmt::format("round {} of {}", i / peaks.size() + 1, o.rounds)), std::string::npos) << steps[i];
  }
}

TEST(Compute, FrequencyIsPlausible) {
  const double ghz = measure_frequency_ghz(0.01);
  EXPECT_GT(ghz, 0.3);
  EXPECT_LT(ghz, 7.0);
  EXPECT_EQ(dependent_add_chain(10), 10 * kAddsPerChainIteration);
}
