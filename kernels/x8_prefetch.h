#pragma once
// Software prefetch of the interleaved kernels (AVX2 and AVX-512), shared so both stream the
// same distance ahead.
//
// A group of eight rows is one sequential stream. The hardware prefetcher alone leaves DRAM
// idle between its ramps, so each block asks for the lines `ahead` bytes ahead of it (past the
// group's end that is the next group, which the thread takes next; prefetches never fault).
// A block's prefetches are spread over its work, part `i` of `parts` before each step. Issued
// at once, the 18-27 lines of a K-quant block cost Q5_K and Q6_K GEMV a seventh of their
// bandwidth (full miss buffers stalling the core, we think; the host had no counters to tell;
// docs/PERFORMANCE.md has the A/B). Against 1.5-8 KiB and three or four streams, two streams per
// thread measured best on a Zen 4 host, 6 KiB ahead as good as any. On a Zen 5 host, with the
// distances alternated inside each round so that the shared host's read level fell on all of
// them alike, a GEMV ran 0-7% faster 3 KiB ahead than 6 KiB at every shape and format of a 1B-8B
// model (never slower; 4 KiB fell between, 1.5 KiB lost 2-6% but on Q8_0), while batches of 2
// to 8 ran up to 10% slower (Q8_0 at 8, Q4_K at 4): GEMV streams 3 KiB ahead, batches 6 KiB
// (docs/PERFORMANCE.md, eighteenth session). The AVX2 kernels measured alike at both.
//
// A batch's lines go to L2 (prefetcht1), not L1: the L1's few miss buffers are what the loads of
// the block being decoded need, and L2 holds many more requests in flight. On a Zen 4 host this
// took GEMV from 0.84-0.92 of the DRAM read to 1.0-1.1 (Q6_K 0.72 -> 1.07), batch 8 Q4_K 0.37 ->
// 0.47; docs/PERFORMANCE.md, fourteenth session.
//
// A GEMV reads each weight line once per call, and its lines are fetched non-temporally
// (prefetchnta): on the Zen 5 guest, TinyLlama's decode ran 1.12-1.18x as fast as with
// prefetcht1 (Q4_0, Q8_0, Q4_K_M; ten alternated pairs each, the slowest pair of Q4_0 and Q8_0
// still 1.03 and 1.06) and F16's, through kernels/stream_prefetch.h, 1.11x. AMD describes the
// hint as filling L1 without moving a line that came from memory into L2 when it leaves; we
// think sparing L2 and L3 the turnover of a streamed model is the gain (no counters here to
// tell), even though the lines do land in L1. Weights already cached stream as fast as before
// (hot GEMV at 1 and 12 MiB). A batch's weights may be read again by its next chunk of
// activation rows, which must find them cached, and batches of 8 gained nothing, so they keep
// prefetcht1 (docs/PERFORMANCE.md, thirty-second session). Not measured on an Intel host.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/gemm_kernels.h"

namespace infercast {

// How far ahead of a block its prefetches reach, and whether the lines are streamed once.
struct X8Prefetch {
  std::size_t ahead;
  bool once;
};
inline constexpr X8Prefetch kX8Gemv{3072, true};
inline constexpr X8Prefetch kX8Batch{6144, false};
// The prefetch of a block taken against Na activation rows.
template <int Na>
inline constexpr X8Prefetch kX8Stream = Na == 1 ? kX8Gemv : kX8Batch;

INFERCAST_INLINE void prefetch_line(std::uintptr_t p, bool once) {
  // In assembly: GCC schedules _mm_prefetch freely and gathered a block's prefetches at its
  // start again; a volatile asm stays where it is written.
  if (once) {
    asm volatile("prefetchnta %0" : : "m"(*reinterpret_cast<const char*>(p)));
  } else {
    asm volatile("prefetcht1 %0" : : "m"(*reinterpret_cast<const char*>(p)));
  }
}

template <std::size_t Bytes, int Parts, X8Prefetch P>
INFERCAST_INLINE void prefetch_part(const void* block, int i) {
  constexpr std::size_t kLines = (Bytes + 63) / 64;
  // Integer arithmetic: the address may lie past the buffer, which a pointer may not.
  const std::uintptr_t p = reinterpret_cast<std::uintptr_t>(block) + P.ahead;
  const auto part = static_cast<std::size_t>(i);
  for (std::size_t j = part * kLines / Parts; j < (part + 1) * kLines / Parts; ++j) prefetch_line(p + 64 * j, P.once);
}

// The head of a stream, the first `p.ahead` bytes that no block's prefetch covers: without it a
// call starts each stream on demand misses, which costs the small matrices of a decode step
// (256 x 2048 and 2048 x 2048 in a 1B model) more than their streaming.
INFERCAST_INLINE void prefetch_head(const void* stream, std::size_t bytes, X8Prefetch p) {
  const auto base = reinterpret_cast<std::uintptr_t>(stream);
  for (std::size_t at = 0; at < std::min(bytes, p.ahead); at += 64) prefetch_line(base + at, p.once);
}

}  // namespace infercast
