#pragma once
// What the CPU can do *and* the OS lets it do: CPUID feature bits gated by XGETBV (the OS must
// save the register state) and, for AMX, the Linux permission request. Never read from
// /proc/cpuinfo text, and never keyed on family/model (VMs mask the model number).
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace infercast {

struct CpuFeatures {
  std::string vendor;
  std::string brand;
  bool sse42 = false;
  bool avx = false;
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512_vnni = false;
  bool avx_vnni = false;
  bool avx512_bf16 = false;
  bool avx512_fp16 = false;
  bool amx_tile = false;
  bool amx_int8 = false;
  bool amx_bf16 = false;
  bool os_avx = false;     // XCR0 saves XMM and YMM state
  bool os_avx512 = false;  // XCR0 saves opmask and both ZMM halves
  bool os_amx = false;     // XCR0 has XTILECFG and XTILEDATA
  bool amx_usable = false;  // the kernel granted this process tile data permission
  std::string amx_reason;   // why AMX is not usable, empty when it is
  bool hypervisor = false;

  // Features ready to execute, in the names the profile uses (e.g. "avx512_vnni").
  [[nodiscard]] std::vector<std::string> usable_names() const;
};

// Reads CPUID/XGETBV once and asks the kernel for AMX tile permission (idempotent).
const CpuFeatures& host_cpu();

// Feature detection from raw CPUID/XGETBV words, separated from the instructions so tests can
// feed it synthetic registers (e.g. AVX-512 bits set while the OS disabled ZMM state).
struct CpuidWords {
  unsigned leaf1_ecx = 0, leaf1_edx = 0;
  unsigned leaf7_ebx = 0, leaf7_ecx = 0, leaf7_edx = 0;
  unsigned leaf7_1_eax = 0;
  unsigned long long xcr0 = 0;
  bool has_xgetbv = false;
};
CpuFeatures decode_features(const CpuidWords& words);

// ISA levels for runtime dispatch, in increasing capability. Each level implies the previous.
enum class IsaLevel { scalar = 0, avx2 = 1, avx512 = 2, amx = 3 };

std::string_view to_string(IsaLevel level);
std::optional<IsaLevel> parse_isa_level(std::string_view text);

// The highest level whose every instruction the CPU and OS support.
IsaLevel max_supported_level(const CpuFeatures& cpu);

// The level to use: the request (flag or INFERCAST_ISA) capped at what the machine supports.
// A request above the machine is lowered, never honoured.
IsaLevel choose_level(const CpuFeatures& cpu, std::optional<IsaLevel> requested);

// The level requested by the environment variable INFERCAST_ISA, if set. Throws UsageError on
// a value that names no level.
std::optional<IsaLevel> isa_from_environment();

// Process-wide dispatch level: set once by the front end from --isa, else INFERCAST_ISA, else
// the machine's best. Kernels read it through active_level().
void set_requested_level(std::optional<IsaLevel> requested);
IsaLevel active_level();

// How code that streams data it reads once (weights, the KV cache, the probe's DRAM read) asks
// for it ahead of use: non-temporally (prefetchnta) or into L2 (prefetcht1). On AMD's Zen 5 the
// non-temporal hint decoded 1.11-1.18x as fast (docs/PERFORMANCE.md, thirty-second session); on
// an Intel Xeon with AMX it held two cores' DRAM read to 9.5 GB/s against 30 with prefetcht1 or
// none (forty-sixth session). So AMD gets the non-temporal hint and every other vendor L2.
enum class PrefetchHint { nta, t1 };
std::string_view to_string(PrefetchHint hint);
PrefetchHint default_prefetch_hint(const CpuFeatures& cpu);
// The hint requested by INFERCAST_PREFETCH (nta or t1), if set, so one machine can measure
// both. Throws UsageError on any other value.
std::optional<PrefetchHint> prefetch_hint_from_environment();
// The environment's hint, else the host's default: read once. Never throws (a value the
// environment names wrongly falls back to the default; front ends check it first).
PrefetchHint active_prefetch_hint();

}  // namespace infercast
