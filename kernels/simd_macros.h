#pragma once
// Two compiler directives the SIMD kernels share.

// Kernels hold their accumulators in arrays indexed by loop counters; GCC's size limit on complete
// unrolling would otherwise leave those loops rolled and the accumulators in memory.
#define INFERCAST_UNROLL _Pragma("GCC unroll 16")
#define INFERCAST_INLINE inline __attribute__((always_inline))
