#pragma once
// Software prefetch for the SIMD row kernels. It lives in an unnamed namespace for the reason
// gemm_simd_common.inc gives: each kernel file is compiled for a different ISA, so none of
// their inline code may be shared across files by the linker.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "kernels/gemm_kernels.h"
#include "kernels/prefetch_hint.h"

namespace infercast {
namespace {

// Prefetches the weight rows a kernel streams, a fixed distance ahead of each. With the
// hardware prefetcher alone, Q4_K GEMV read DRAM at 0.58 of its bandwidth: four rows per
// thread restart its ramp at every row and page, and the decode cannot hide that latency.
// 1 KiB ahead per stream (about 7 Q4_K super-blocks; 0.5-1.5 KiB all helped, 768-1152 bytes
// most: Q4_K median 21.3 -> 31.0 GB/s at 4096x14336 on two cores) keeps DRAM busy. Past a
// row's end a stream continues into the same row of the next group of Nr rows, which the
// thread takes next. Addresses past the matrix are harmless: prefetches never fault.
//
// On AMD hosts the lines are fetched non-temporally (NTA; elsewhere into L2, see
// kernels/prefetch_hint.h) for the reason kernels/x8_prefetch.h gives: on a Zen 5 host F16
// decode ran 1.11x as fast as with T1, BF16 at four users 1.18x. Before that they went to L2
// (T1); 2-4 KiB ahead all measured alike (F16/BF16/F32 GEMV 0.84-0.88 of the DRAM read with T0
// at 1 KiB, 0.98-1.06 with T1 at 2 KiB on a Zen 4 host) and the shorter distance is kept.
template <int Nr>
class StreamPrefetch {
 public:
  StreamPrefetch(const GemmCall& c, std::size_t r)
      : base_(reinterpret_cast<std::uintptr_t>(c.w + r * c.row_bytes)), row_bytes_(c.row_bytes) {}
  // Prefetches the `step` bytes at `pos` + kAhead of every row.
  INFERCAST_INLINE void fetch(std::size_t pos, std::size_t step) const {
    std::size_t at = pos + kAhead;
    if (at >= row_bytes_) at += (Nr - 1) * row_bytes_;
    INFERCAST_UNROLL
    for (int i = 0; i < Nr; ++i) {
      // Integer arithmetic: the address may lie past the buffer, which a pointer may not.
      const std::uintptr_t p = base_ + i * row_bytes_ + at;
      for (std::size_t k = 0; k < step; k += 64) stream_line(p + k);
      stream_line(p + step - 1);
    }
  }

 private:
  static constexpr std::size_t kAhead = 2048;
  std::uintptr_t base_;
  std::size_t row_bytes_;
};

}  // namespace
}  // namespace infercast
