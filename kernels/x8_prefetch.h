#pragma once
// Software prefetch of the interleaved kernels (AVX2 and AVX-512), shared so both stream the
// same distance ahead.
//
// A group of eight rows is one sequential stream. The hardware prefetcher alone leaves DRAM
// idle between its ramps, so each block asks for the lines `kX8Ahead` bytes ahead (past the
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
// The hint is non-temporal (prefetchnta) on AMD hosts, prefetcht1 on the others
// (kernels/prefetch_hint.h). It was prefetcht1, into L2, after prefetcht0 into L1
// lost to it on a Zen 4 host (GEMV 0.84-0.92 of the DRAM read against 1.0-1.1; fourteenth
// session). On the Zen 5 guest NTA beat T1 in alternated pairs of TinyLlama runs (thirty-second
// session): decode 1.18x (Q4_0), 1.12x (Q8_0), 1.14x (Q4_K_M) and 1.11x (F16, through
// kernels/stream_prefetch.h); two users of Q4_0 1.10x and its 512-token prefill 1.11x; no loss
// at 4 and 8 users or in prefill of the other formats. AMD describes the hint as filling L1
// without moving a line that came from memory into L2 when it leaves: we think sparing L2 and L3
// the turnover of a model streamed through them is the gain (no counters here to tell). Weights
// that are already cached stream as fast as before (hot GEMV at 1 and 12 MiB). On an Intel Xeon
// with AMX the same hint held two cores to 9.5 GB/s of the 30 they read with prefetcht1
// (forty-sixth session).
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/gemm_kernels.h"
#include "kernels/prefetch_hint.h"

namespace infercast {

inline constexpr std::size_t kX8GemvAhead = 3072;
inline constexpr std::size_t kX8BatchAhead = 6144;
// The distance for a block taken against Na activation rows.
template <int Na>
inline constexpr std::size_t kX8Ahead = Na == 1 ? kX8GemvAhead : kX8BatchAhead;

// Q4_0's and Q8_0's batch kernels (kernels/gemm_x8_avx512.cpp), from three activation pairs or
// six activation rows on, spend long enough on a weight block to spread its prefetches over its
// activation rows, a line before each, and they prefetch 3 KiB ahead instead of 6. Against a
// block's lines at once 6 KiB ahead, switched every 25 ms inside one process (Zen 5 guest, two
// threads, 2048x5632 and 5632x2048 from DRAM; docs/PERFORMANCE.md, thirty-fourth session): Q4_0
// batch 8 1.09x the bytes per second, batch 16 1.03x, 64 1.01x; Q8_0 batch 8 1.06x, 16 1.02x,
// 64 1.00x; the products of a TinyLlama Q4_0 decode at eight users 1.11x. Either change alone
// gained about 1.04x at Q4_0 batch 8. The K-quant batches lost 3-12% at 3 KiB and keep 6.
inline constexpr std::size_t kX8SpreadAhead = 3072;

template <std::size_t Bytes, int Parts, std::size_t Ahead>
INFERCAST_INLINE void prefetch_part(const void* block, int i) {
  constexpr std::size_t kLines = (Bytes + 63) / 64;
  // Integer arithmetic: the address may lie past the buffer, which a pointer may not.
  const std::uintptr_t p = reinterpret_cast<std::uintptr_t>(block) + Ahead;
  const auto part = static_cast<std::size_t>(i);
  for (std::size_t j = part * kLines / Parts; j < (part + 1) * kLines / Parts; ++j) stream_line(p + 64 * j);
}

// The same for a block whose part `i` is known only at run time (a loop the compiler keeps
// rolled): the part's first line and the lines after it, as many as the largest part has, so
// no loop or branch depends on `i`; a line may be asked for twice. Q6_K's x8 GEMV on one hot
// core (its step loop stays rolled) ran 1.25-1.37x faster with no prefetches at all than with
// the loop above, and 1.18x (1.06-1.30) faster with this; both in the host's slow state, in its
// fast one 1.01-1.06x (docs/PERFORMANCE.md, fortieth session).
template <std::size_t Bytes, int Parts, std::size_t Ahead>
INFERCAST_INLINE void prefetch_part_at(const void* block, int i) {
  constexpr std::size_t kLines = (Bytes + 63) / 64;
  constexpr std::size_t kPerPart = (kLines + Parts - 1) / Parts;
  const std::uintptr_t p = reinterpret_cast<std::uintptr_t>(block) + Ahead + 64 * (static_cast<std::size_t>(i) * kLines / Parts);
  for (std::size_t j = 0; j < kPerPart; ++j) stream_line(p + 64 * j);
}

// The head of a stream, the first `ahead` bytes that no block's prefetch covers: without it a
// call starts each stream on demand misses, which costs the small matrices of a decode step
// (256 x 2048 and 2048 x 2048 in a 1B model) more than their streaming.
INFERCAST_INLINE void prefetch_head(const void* stream, std::size_t bytes, std::size_t ahead) {
  const auto p = reinterpret_cast<std::uintptr_t>(stream);
  for (std::size_t at = 0; at < std::min(bytes, ahead); at += 64) stream_line(p + at);
}

}  // namespace infercast
