#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "probes/cpu_features.h"
#include "probes/error.h"
#include "probes/units.h"

using namespace infercast;

namespace {
// Registers of a CPU with everything up to AMX, and an OS that enables all state.
CpuidWords full_words() {
  CpuidWords w;
  w.leaf1_ecx = (1U << 12) | (1U << 20) | (1U << 27) | (1U << 28) | (1U << 29);
  w.leaf7_ebx = (1U << 5) | (1U << 16) | (1U << 17) | (1U << 30) | (1U << 31);
  w.leaf7_ecx = 1U << 11;
  w.leaf7_edx = (1U << 22) | (1U << 23) | (1U << 24) | (1U << 25);
  w.leaf7_1_eax = (1U << 4) | (1U << 5);
  w.xcr0 = 0x600E7;
  w.has_xgetbv = true;
  return w;
}

std::string cpuinfo_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) == 0) return " " + line.substr(line.find(':') + 1) + " ";
  }
  return {};
}
}  // namespace

TEST(CpuFeatures, DecodesEveryFeatureWhenOsEnablesState) {
  CpuFeatures f = decode_features(full_words());
  EXPECT_TRUE(f.avx2 && f.fma && f.avx512f && f.avx512bw && f.avx512vl && f.avx512_vnni);
  EXPECT_TRUE(f.avx_vnni && f.avx512_bf16 && f.avx512_fp16 && f.amx_tile && f.amx_int8 && f.amx_bf16);
  f.amx_usable = true;
  EXPECT_EQ(max_supported_level(f), IsaLevel::amx);
}

TEST(CpuFeatures, AvxBitsIgnoredWhenOsDoesNotSaveZmmState) {
  CpuidWords w = full_words();
  w.xcr0 = 0x7;  // x87, SSE, AVX only: no opmask/ZMM, no tiles
  const CpuFeatures f = decode_features(w);
  EXPECT_TRUE(f.avx2);
  EXPECT_FALSE(f.avx512f);
  EXPECT_FALSE(f.avx512_vnni);
  EXPECT_FALSE(f.amx_tile);
  EXPECT_FALSE(f.amx_reason.empty());
  EXPECT_EQ(max_supported_level(f), IsaLevel::avx2);
}

TEST(CpuFeatures, NothingWithoutXgetbv) {
  CpuidWords w = full_words();
  w.has_xgetbv = false;
  const CpuFeatures f = decode_features(w);
  EXPECT_FALSE(f.avx);
  EXPECT_FALSE(f.avx2);
  EXPECT_EQ(max_supported_level(f), IsaLevel::scalar);
}

TEST(CpuFeatures, AmxNeedsPermissionForTheAmxLevel) {
  CpuFeatures f = decode_features(full_words());
  f.amx_usable = false;
  EXPECT_EQ(max_supported_level(f), IsaLevel::avx512);
}

TEST(CpuFeatures, RequestIsCappedAtWhatTheMachineSupports) {
  CpuFeatures f = decode_features(full_words());
  f.amx_usable = false;
  EXPECT_EQ(choose_level(f, IsaLevel::amx), IsaLevel::avx512);
  EXPECT_EQ(choose_level(f, IsaLevel::avx2), IsaLevel::avx2);
  EXPECT_EQ(choose_level(f, IsaLevel::scalar), IsaLevel::scalar);
  EXPECT_EQ(choose_level(f, std::nullopt), IsaLevel::avx512);
  CpuidWords w = full_words();
  w.xcr0 = 0x7;
  EXPECT_EQ(choose_level(decode_features(w), IsaLevel::avx512), IsaLevel::avx2);
}

TEST(CpuFeatures, BrandStringsLoseTheirPadding) {
  EXPECT_EQ(tidy_cpu_name("AMD EPYC 9B45 128-Core Processor                "), "AMD EPYC 9B45 128-Core Processor");
  EXPECT_EQ(tidy_cpu_name("       Intel(R) Xeon(R) CPU           E5-2680 0 @ 2.70GHz"), "Intel(R) Xeon(R) CPU E5-2680 0 @ 2.70GHz");
  EXPECT_EQ(tidy_cpu_name("    "), "");
  EXPECT_EQ(tidy_cpu_name(""), "");
  EXPECT_EQ(tidy_cpu_name(host_cpu().brand), host_cpu().brand);
}

TEST(CpuFeatures, ParsesLevelNames) {
  EXPECT_EQ(parse_isa_level("avx512"), IsaLevel::avx512);
  EXPECT_EQ(parse_isa_level("scalar"), IsaLevel::scalar);
  EXPECT_FALSE(parse_isa_level("sse9").has_value());
  for (IsaLevel l : {IsaLevel::scalar, IsaLevel::avx2, IsaLevel::avx512, IsaLevel::amx}) {
    EXPECT_EQ(parse_isa_level(to_string(l)), l);
  }
}

// AMD streams with the non-temporal hint, every other vendor into L2; INFERCAST_PREFETCH names
// either, anything else is a usage error.
TEST(CpuFeatures, PrefetchHintByVendorAndEnvironment) {
  // The hint in force was read once, at start-up, from the environment this test then changes.
  std::optional<PrefetchHint> at_start;
  try {
    at_start = prefetch_hint_from_environment();
  } catch (const UsageError&) {
  }
  EXPECT_EQ(active_prefetch_hint(), at_start.value_or(default_prefetch_hint(host_cpu())));
  CpuFeatures cpu;
  cpu.vendor = "AuthenticAMD";
  EXPECT_EQ(default_prefetch_hint(cpu), PrefetchHint::nta);
  cpu.vendor = "GenuineIntel";
  EXPECT_EQ(default_prefetch_hint(cpu), PrefetchHint::t1);
  cpu.vendor = "";
  EXPECT_EQ(default_prefetch_hint(cpu), PrefetchHint::t1);
  EXPECT_EQ(to_string(PrefetchHint::nta), "nta");
  EXPECT_EQ(to_string(PrefetchHint::t1), "t1");
  setenv("INFERCAST_PREFETCH", "t1", 1);
  EXPECT_EQ(prefetch_hint_from_environment(), PrefetchHint::t1);
  setenv("INFERCAST_PREFETCH", "nta", 1);
  EXPECT_EQ(prefetch_hint_from_environment(), PrefetchHint::nta);
  setenv("INFERCAST_PREFETCH", "T1", 1);
  EXPECT_THROW(prefetch_hint_from_environment(), UsageError);
  unsetenv("INFERCAST_PREFETCH");
  EXPECT_FALSE(prefetch_hint_from_environment().has_value());
  EXPECT_EQ(active_prefetch_hint(), at_start.value_or(default_prefetch_hint(host_cpu())));
}

TEST(CpuFeatures, EnvironmentOverride) {
  setenv("INFERCAST_ISA", "avx2", 1);
  EXPECT_EQ(isa_from_environment(), IsaLevel::avx2);
  EXPECT_LE(active_level(), IsaLevel::avx2);
  setenv("INFERCAST_ISA", "bogus", 1);
  EXPECT_THROW(isa_from_environment(), UsageError);
  unsetenv("INFERCAST_ISA");
  EXPECT_FALSE(isa_from_environment().has_value());
  EXPECT_EQ(active_level(), max_supported_level(host_cpu()));
}

TEST(CpuFeatures, HostDetectionAgreesWithTheKernel) {
  // The kernel's flag list is an independent reading of the same CPUID bits (and it hides
  // features whose state it does not enable), so both must agree.
  const std::string flags = cpuinfo_flags();
  if (flags.empty()) GTEST_SKIP() << "no /proc/cpuinfo flags";
  const CpuFeatures& f = host_cpu();
  auto has = [&](const char* name) { return flags.find(std::string(" ") + name + " ") != std::string::npos; };
  EXPECT_EQ(f.avx2, has("avx2"));
  EXPECT_EQ(f.fma, has("fma"));
  EXPECT_EQ(f.avx512f, has("avx512f"));
  EXPECT_EQ(f.avx512bw, has("avx512bw"));
  EXPECT_EQ(f.avx512_vnni, has("avx512_vnni"));
  EXPECT_EQ(f.avx512_bf16, has("avx512_bf16"));
  EXPECT_EQ(f.amx_tile, has("amx_tile"));
  EXPECT_EQ(f.amx_int8, has("amx_int8"));
}
