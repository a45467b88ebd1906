#pragma once
// Compiler directives the SIMD kernels share.

// Kernels hold their accumulators in arrays indexed by loop counters; GCC's size limit on complete
// unrolling would otherwise leave those loops rolled and the accumulators in memory.
#define INFERCAST_UNROLL _Pragma("GCC unroll 16")
#define INFERCAST_INLINE inline __attribute__((always_inline))

// Pins a loaded vector to a register. GCC folds a load into every instruction that uses it, so
// a vector that feeds four FMAs is loaded four times, and Zen 5 issues 512-bit memory-operand
// FMAs and dot products at about 2/3 the rate of register ones. An empty asm whose output is the
// vector makes it a value the compiler cannot trace back to memory. Use it only on vectors that
// feed more than one instruction (a folded load used once costs nothing), and measure from DRAM
// as well as in cache. (docs/PERFORMANCE.md, thirty-ninth session: the AVX-512 float row
// kernels at batch 8 in cache 1.11-1.17x, F16 decode at eight users 1.17x; AVX2's 256-bit
// operands gained nothing.)
#define INFERCAST_IN_REGISTER(v) asm("" : "+v"(v))
