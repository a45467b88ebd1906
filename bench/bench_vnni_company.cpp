// What competes with vpdpbusd for the core (`vnni_company/...`, one core, registers and L1):
// each iteration runs sixteen independent vpdpbusd chains and eight instructions of one kind
// that depend on nothing in the loop. Where the eight run on other pipes the iteration takes as
// long as the sixteen alone (`alone`); where they share vpdpbusd's pipes, or its loads share the
// load ports, it takes longer. `memory_operand` makes the sixteen take their broadcast from
// memory, as the sixteen-row Q4_0 kernel's do, with eight broadcast loads beside them.
// The integer multiplies (vpmaddubsw, vpmaddwd, vpmullw, vpsadbw, vpdpwssd) and vpshufb are here
// for the other ways to a 4-bit dot product (a pmaddubsw chain, table lookups): on the Zen 5 guest
// every multiply shared vpdpbusd's pipes and vpshufb partly (docs/PERFORMANCE.md, forty-third
// session), so none of them takes work off vpdpbusd.
//
// The quantized kernels' instruction mix is chosen from these figures (kernels/gemm_x8_avx512.cpp,
// "Thirty-two rows"); run it on a new CPU before moving work between instruction kinds.
// Assembly, not intrinsics, so the compiler can neither drop the unused results nor merge the
// eight into fewer instructions.
#include <benchmark/benchmark.h>

#include <cstdint>

#include "probes/cpu_features.h"

namespace {

using infercast::host_cpu;

alignas(64) std::int32_t g_operand[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

#define IC_X16(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)
#define IC_X8(X) X(16) X(17) X(18) X(19) X(20) X(21) X(22) X(23)
// The sixteen chains: zmm0-15, from zmm30/zmm31 or a broadcast from memory.
#define IC_DOT(i) "vpdpbusd %%zmm30, %%zmm31, %%zmm" #i "\n\t"
#define IC_DOT_MEMORY(i) "vpdpbusd (%1)%{1to16%}, %%zmm31, %%zmm" #i "\n\t"
// The eight beside them: write zmm16-23 from zmm24/zmm25 (or memory), read nothing they write.
#define IC_NONE(i)
#define IC_MULPS(i) "vmulps %%zmm24, %%zmm25, %%zmm" #i "\n\t"
#define IC_FMADD(i) "vfmadd231ps %%zmm24, %%zmm25, %%zmm" #i "\n\t"
#define IC_ADDPS(i) "vaddps %%zmm24, %%zmm25, %%zmm" #i "\n\t"
#define IC_CVTDQ2PS(i) "vcvtdq2ps %%zmm24, %%zmm" #i "\n\t"
#define IC_PADDD(i) "vpaddd %%zmm24, %%zmm25, %%zmm" #i "\n\t"
#define IC_PANDD(i) "vpandd %%zmm24, %%zmm25, %%zmm" #i "\n\t"
#define IC_PSRLW(i) "vpsrlw $4, %%zmm24, %%zmm" #i "\n\t"
#define IC_PERMT2D(i) "vpermt2d %%zmm24, %%zmm25, %%zmm" #i "\n\t"
#define IC_SHUFI64X2(i) "vshufi64x2 $0x44, %%zmm24, %%zmm25, %%zmm" #i "\n\t"
#define IC_PMADDUBSW(i) "vpmaddubsw %%zmm24, %%zmm25, %%zmm" #i "\n\t"
#define IC_PMADDWD(i) "vpmaddwd %%zmm24, %%zmm25, %%zmm" #i "\n\t"
#define IC_PMULLW(i) "vpmullw %%zmm24, %%zmm25, %%zmm" #i "\n\t"
#define IC_PSHUFB(i) "vpshufb %%zmm24, %%zmm25, %%zmm" #i "\n\t"
#define IC_PADDW(i) "vpaddw %%zmm24, %%zmm25, %%zmm" #i "\n\t"
#define IC_PSADBW(i) "vpsadbw %%zmm24, %%zmm25, %%zmm" #i "\n\t"
#define IC_DPWSSD(i) "vpdpwssd %%zmm24, %%zmm25, %%zmm" #i "\n\t"
#define IC_CVTPH2PS(i) "vcvtph2ps %%ymm24, %%zmm" #i "\n\t"
#define IC_BROADCAST(i) "vpbroadcastd (%1), %%zmm" #i "\n\t"
#define IC_LOAD512(i) "vmovdqu32 (%1), %%zmm" #i "\n\t"

#define IC_COMPANY(name, dot, other)                                                                       \
  __attribute__((target("avx512f,avx512bw,avx512vnni"))) void name(std::int64_t n) {                        \
    asm volatile(                                                                                          \
        "vpxord %%zmm24, %%zmm24, %%zmm24\n\t"                                                             \
        "vpxord %%zmm25, %%zmm25, %%zmm25\n\t"                                                             \
        "vpxord %%zmm30, %%zmm30, %%zmm30\n\t"                                                             \
        "vpxord %%zmm31, %%zmm31, %%zmm31\n\t"                                                             \
        "1:\n\t" IC_X16(dot) IC_X8(other) "dec %0\n\t"                                                     \
        "jnz 1b\n\t"                                                                                       \
        : "+r"(n)                                                                                          \
        : "r"(g_operand)                                                                                   \
        : "memory", "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",   \
          "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19",        \
          "xmm20", "xmm21", "xmm22", "xmm23", "xmm24", "xmm25", "xmm30", "xmm31");                        \
  }

IC_COMPANY(alone, IC_DOT, IC_NONE)
IC_COMPANY(beside_vmulps, IC_DOT, IC_MULPS)
IC_COMPANY(beside_vfmadd231ps, IC_DOT, IC_FMADD)
IC_COMPANY(beside_vaddps, IC_DOT, IC_ADDPS)
IC_COMPANY(beside_vcvtdq2ps, IC_DOT, IC_CVTDQ2PS)
IC_COMPANY(beside_vpaddd, IC_DOT, IC_PADDD)
IC_COMPANY(beside_vpandd, IC_DOT, IC_PANDD)
IC_COMPANY(beside_vpsrlw, IC_DOT, IC_PSRLW)
IC_COMPANY(beside_vpermt2d, IC_DOT, IC_PERMT2D)
IC_COMPANY(beside_vshufi64x2, IC_DOT, IC_SHUFI64X2)
IC_COMPANY(beside_vcvtph2ps, IC_DOT, IC_CVTPH2PS)
IC_COMPANY(beside_vpmaddubsw, IC_DOT, IC_PMADDUBSW)
IC_COMPANY(beside_vpmaddwd, IC_DOT, IC_PMADDWD)
IC_COMPANY(beside_vpmullw, IC_DOT, IC_PMULLW)
IC_COMPANY(beside_vpshufb, IC_DOT, IC_PSHUFB)
IC_COMPANY(beside_vpaddw, IC_DOT, IC_PADDW)
IC_COMPANY(beside_vpsadbw, IC_DOT, IC_PSADBW)
IC_COMPANY(beside_vpdpwssd, IC_DOT, IC_DPWSSD)
IC_COMPANY(beside_broadcast_load, IC_DOT, IC_BROADCAST)
IC_COMPANY(beside_512bit_load, IC_DOT, IC_LOAD512)
IC_COMPANY(memory_operand_alone, IC_DOT_MEMORY, IC_NONE)
IC_COMPANY(memory_operand_beside_broadcast_load, IC_DOT_MEMORY, IC_BROADCAST)

void run(benchmark::State& state, void (*loop)(std::int64_t)) {
  if (!host_cpu().avx512_vnni || !host_cpu().avx512bw) {
    state.SkipWithError("needs AVX-512 VNNI and BW");
    return;
  }
  constexpr std::int64_t kIterations = 1 << 16;
  for (auto _ : state) loop(kIterations);
  // Iterations of the loop (sixteen vpdpbusd and eight others), so the time per item compares
  // across the variants.
  state.SetItemsProcessed(state.iterations() * kIterations);
}

#define IC_REGISTER(name) BENCHMARK_CAPTURE(run, name, name)->Name("vnni_company/" #name)
IC_REGISTER(alone);
IC_REGISTER(beside_vmulps);
IC_REGISTER(beside_vfmadd231ps);
IC_REGISTER(beside_vaddps);
IC_REGISTER(beside_vcvtdq2ps);
IC_REGISTER(beside_vpaddd);
IC_REGISTER(beside_vpandd);
IC_REGISTER(beside_vpsrlw);
IC_REGISTER(beside_vpermt2d);
IC_REGISTER(beside_vshufi64x2);
IC_REGISTER(beside_vcvtph2ps);
IC_REGISTER(beside_vpmaddubsw);
IC_REGISTER(beside_vpmaddwd);
IC_REGISTER(beside_vpmullw);
IC_REGISTER(beside_vpshufb);
IC_REGISTER(beside_vpaddw);
IC_REGISTER(beside_vpsadbw);
IC_REGISTER(beside_vpdpwssd);
IC_REGISTER(beside_broadcast_load);
IC_REGISTER(beside_512bit_load);
IC_REGISTER(memory_operand_alone);
IC_REGISTER(memory_operand_beside_broadcast_load);

}  // namespace
