#pragma once
// The streaming prefetch every kernel issues for data it reads once (weights, the KV cache),
// with the host's hint (probes/cpu_features.h says why it differs by vendor).
#include <cstdint>

#include "kernels/simd_macros.h"
#include "probes/cpu_features.h"

namespace infercast {

// Read once, at start-up: the hot loops test a plain flag, which the compiler hoists.
inline const bool kStreamNonTemporal = active_prefetch_hint() == PrefetchHint::nta;

// In assembly: GCC schedules _mm_prefetch freely (it gathered a block's prefetches at its start
// again); a volatile asm stays where it is written. The address may lie past the buffer:
// prefetches never fault, and it arrives as an integer, which may point anywhere.
INFERCAST_INLINE void stream_line(std::uintptr_t p) {
  if (kStreamNonTemporal) {
    asm volatile("prefetchnta %0" : : "m"(*reinterpret_cast<const char*>(p)));
  } else {
    asm volatile("prefetcht1 %0" : : "m"(*reinterpret_cast<const char*>(p)));
  }
}

}  // namespace infercast
