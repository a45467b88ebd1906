#pragma once
// A run-time count turned into a compile-time one, for kernels whose register blocks are
// template parameters: a batch's last rows, or a thread's last weight rows, in one kernel of
// their own size.
#include <cstddef>
#include <type_traits>

#include "kernels/simd_macros.h"

namespace infercast {

// f(std::integral_constant<int, n>{}) for a run-time 1 <= n <= Max; nothing for other n. The
// kernel files pass their own lambdas, whose types have internal linkage, so no instantiation is
// shared between files compiled for different ISAs (gemm_simd_common.inc says why that matters).
template <int Max, class F>
INFERCAST_INLINE void with_count(std::size_t n, F&& f) {
  if constexpr (Max >= 1) {
    if (n == Max) {
      f(std::integral_constant<int, Max>{});
      return;
    }
    with_count<Max - 1>(n, f);
  }
}

// A range [first, last) of activation rows (or pairs) in passes of Max: f(integral_constant<Max>,
// at) for each whole pass from `first`, then f(integral_constant<n>, at) once for the n < Max
// left, in one pass of their own size.
template <int Max, class F>
INFERCAST_INLINE void in_passes(std::size_t first, std::size_t last, F&& f) {
  std::size_t at = first;
  for (; at + Max <= last; at += Max) f(std::integral_constant<int, Max>{}, at);
  if (at < last) with_count<Max - 1>(last - at, [&](auto n) { f(n, at); });
}

}  // namespace infercast
