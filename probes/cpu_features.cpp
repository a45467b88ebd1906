#include "probes/cpu_features.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "probes/error.h"
#include "probes/units.h"

namespace infercast {
namespace {

constexpr bool bit(unsigned word, int n) { return ((word >> n) & 1U) != 0; }

unsigned long long read_xcr0() {
  unsigned eax = 0, edx = 0;
  // xgetbv with ecx=0; encoded as bytes so the baseline build needs no -mxsave.
  __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<unsigned long long>(edx) << 32) | eax;
}

std::string read_vendor() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  __get_cpuid(0, &eax, &ebx, &ecx, &edx);
  std::array<char, 13> name{};
  std::memcpy(name.data(), &ebx, 4);
  std::memcpy(name.data() + 4, &edx, 4);
  std::memcpy(name.data() + 8, &ecx, 4);
  return name.data();
}

std::string read_brand() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0x80000000U, &eax, &ebx, &ecx, &edx) == 0 || eax < 0x80000004U) return {};
  std::array<char, 49> text{};
  for (unsigned i = 0; i < 3; ++i) {
    __get_cpuid(0x80000002U + i, &eax, &ebx, &ecx, &edx);
    std::memcpy(text.data() + 16 * i, &eax, 4);
    std::memcpy(text.data() + 16 * i + 4, &ebx, 4);
    std::memcpy(text.data() + 16 * i + 8, &ecx, 4);
    std::memcpy(text.data() + 16 * i + 12, &edx, 4);
  }
  return tidy_cpu_name(text.data());
}

CpuidWords read_cpuid_words() {
  CpuidWords w;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const unsigned max_leaf = __get_cpuid_max(0, nullptr);
  if (max_leaf >= 1) {
    __cpuid(1, eax, ebx, ecx, edx);
    w.leaf1_ecx = ecx;
    w.leaf1_edx = edx;
  }
  if (max_leaf >= 7) {
    __cpuid_count(7, 0, eax, ebx, ecx, edx);
    w.leaf7_ebx = ebx;
    w.leaf7_ecx = ecx;
    w.leaf7_edx = edx;
    const unsigned sub_leaves = eax;
    if (sub_leaves >= 1) {
      __cpuid_count(7, 1, eax, ebx, ecx, edx);
      w.leaf7_1_eax = eax;
    }
  }
  w.has_xgetbv = bit(w.leaf1_ecx, 27);  // OSXSAVE: the OS enabled XSETBV/XGETBV
  if (w.has_xgetbv) w.xcr0 = read_xcr0();
  return w;
}

// Linux >= 5.16 hands out AMX tile data state only on request; touching a tile before the
// request succeeds kills the process with SIGILL.
constexpr long kArchGetXcompSupp = 0x1021;
constexpr long kArchGetXcompPerm = 0x1022;
constexpr long kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtiledata = 18;

bool request_amx_permission(std::string& reason) {
  unsigned long supported = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompSupp, &supported) != 0) {
    reason = std::string("arch_prctl(ARCH_GET_XCOMP_SUPP) failed: ") + std::strerror(errno) +
             " (kernel older than 5.16?)";
    return false;
  }
  if ((supported & (1UL << kXfeatureXtiledata)) == 0) {
    reason = "the kernel does not offer the XTILEDATA state component";
    return false;
  }
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) {
    reason = std::string("arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA) refused: ") +
             std::strerror(errno);
    return false;
  }
  unsigned long granted = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &granted) != 0 ||
      (granted & (1UL << kXfeatureXtiledata)) == 0) {
    reason = "tile data permission was requested but not granted";
    return false;
  }
  return true;
}

}  // namespace

CpuFeatures decode_features(const CpuidWords& w) {
  CpuFeatures f;
  const unsigned long long xcr0 = w.has_xgetbv ? w.xcr0 : 0;
  f.os_avx = w.has_xgetbv && (xcr0 & 0x6) == 0x6;                 // XMM | YMM
  f.os_avx512 = f.os_avx && (xcr0 & 0xE0) == 0xE0;                // opmask | ZMM_Hi256 | Hi16_ZMM
  f.os_amx = w.has_xgetbv && (xcr0 & 0x60000ULL) == 0x60000ULL;   // XTILECFG | XTILEDATA

  f.sse42 = bit(w.leaf1_ecx, 20);
  f.hypervisor = bit(w.leaf1_ecx, 31);
  f.avx = bit(w.leaf1_ecx, 28) && f.os_avx;
  f.fma = bit(w.leaf1_ecx, 12) && f.os_avx;
  f.f16c = bit(w.leaf1_ecx, 29) && f.os_avx;
  f.avx2 = bit(w.leaf7_ebx, 5) && f.os_avx;
  f.avx_vnni = bit(w.leaf7_1_eax, 4) && f.os_avx;

  f.avx512f = bit(w.leaf7_ebx, 16) && f.os_avx512;
  f.avx512dq = bit(w.leaf7_ebx, 17) && f.os_avx512;
  f.avx512bw = bit(w.leaf7_ebx, 30) && f.os_avx512;
  f.avx512vl = bit(w.leaf7_ebx, 31) && f.os_avx512;
  f.avx512_vnni = bit(w.leaf7_ecx, 11) && f.os_avx512;
  f.avx512_fp16 = bit(w.leaf7_edx, 23) && f.os_avx512;
  f.avx512_bf16 = bit(w.leaf7_1_eax, 5) && f.os_avx512;

  f.amx_bf16 = bit(w.leaf7_edx, 22) && f.os_amx;
  f.amx_tile = bit(w.leaf7_edx, 24) && f.os_amx;
  f.amx_int8 = bit(w.leaf7_edx, 25) && f.os_amx;
  if (!f.amx_tile) {
    f.amx_reason = bit(w.leaf7_edx, 24) ? "the OS does not enable tile state in XCR0"
                                        : "the CPU has no AMX";
  }
  return f;
}

std::vector<std::string> CpuFeatures::usable_names() const {
  std::vector<std::string> names;
  const std::pair<bool, const char*> table[] = {
      {sse42, "sse4_2"},         {avx, "avx"},
      {avx2, "avx2"},            {fma, "fma"},
      {f16c, "f16c"},            {avx_vnni, "avx_vnni"},
      {avx512f, "avx512f"},      {avx512dq, "avx512dq"},
      {avx512bw, "avx512bw"},    {avx512vl, "avx512vl"},
      {avx512_vnni, "avx512_vnni"}, {avx512_bf16, "avx512_bf16"},
      {avx512_fp16, "avx512_fp16"}, {amx_tile && amx_usable, "amx_tile"},
      {amx_int8 && amx_usable, "amx_int8"}, {amx_bf16 && amx_usable, "amx_bf16"},
  };
  for (const auto& [present, name] : table) {
    if (present) names.emplace_back(name);
  }
  return names;
}

const CpuFeatures& host_cpu() {
  static const CpuFeatures features = [] {
    CpuFeatures f = decode_features(read_cpuid_words());
    f.vendor = read_vendor();
    f.brand = read_brand();
    if (f.amx_tile) f.amx_usable = request_amx_permission(f.amx_reason);
    return f;
  }();
  return features;
}

std::string_view to_string(IsaLevel level) {
  switch (level) {
    case IsaLevel::scalar: return "scalar";
    case IsaLevel::avx2: return "avx2";
    case IsaLevel::avx512: return "avx512";
    case IsaLevel::amx: return "amx";
  }
  return "scalar";
}

std::optional<IsaLevel> parse_isa_level(std::string_view text) {
  for (IsaLevel level : {IsaLevel::scalar, IsaLevel::avx2, IsaLevel::avx512, IsaLevel::amx}) {
    if (text == to_string(level)) return level;
  }
  return std::nullopt;
}

IsaLevel max_supported_level(const CpuFeatures& cpu) {
  const bool avx2 = cpu.avx2 && cpu.fma && cpu.f16c;
  const bool avx512 = avx2 && cpu.avx512f && cpu.avx512bw && cpu.avx512vl && cpu.avx512dq;
  const bool amx = avx512 && cpu.amx_tile && cpu.amx_int8 && cpu.amx_bf16 && cpu.amx_usable;
  if (amx) return IsaLevel::amx;
  if (avx512) return IsaLevel::avx512;
  if (avx2) return IsaLevel::avx2;
  return IsaLevel::scalar;
}

IsaLevel choose_level(const CpuFeatures& cpu, std::optional<IsaLevel> requested) {
  const IsaLevel best = max_supported_level(cpu);
  if (!requested) return best;
  return *requested < best ? *requested : best;
}

std::optional<IsaLevel> isa_from_environment() {
  const char* value = std::getenv("INFERCAST_ISA");
  if (value == nullptr || *value == '\0') return std::nullopt;
  auto level = parse_isa_level(value);
  if (!level) {
    throw UsageError(std::string("INFERCAST_ISA='") + value +
                     "' is not one of scalar, avx2, avx512, amx");
  }
  return level;
}

namespace {
std::atomic<int> g_requested{-1};
}

void set_requested_level(std::optional<IsaLevel> requested) {
  g_requested.store(requested ? static_cast<int>(*requested) : -1);
}

IsaLevel active_level() {
  const int requested = g_requested.load();
  if (requested >= 0) return choose_level(host_cpu(), static_cast<IsaLevel>(requested));
  return choose_level(host_cpu(), isa_from_environment());
}

std::string_view to_string(PrefetchHint hint) { return hint == PrefetchHint::nta ? "nta" : "t1"; }

PrefetchHint default_prefetch_hint(const CpuFeatures& cpu) {
  return cpu.vendor == "AuthenticAMD" ? PrefetchHint::nta : PrefetchHint::t1;
}

std::optional<PrefetchHint> prefetch_hint_from_environment() {
  const char* value = std::getenv("INFERCAST_PREFETCH");
  if (value == nullptr || *value == '\0') return std::nullopt;
  for (PrefetchHint hint : {PrefetchHint::nta, PrefetchHint::t1}) {
    if (to_string(hint) == value) return hint;
  }
  throw UsageError(std::string("INFERCAST_PREFETCH='") + value + "' is not one of nta, t1");
}

PrefetchHint active_prefetch_hint() {
  static const PrefetchHint hint = [] {
    try {
      if (auto requested = prefetch_hint_from_environment()) return *requested;
    } catch (const UsageError&) {
    }
    return default_prefetch_hint(host_cpu());
  }();
  return hint;
}

}  // namespace infercast
