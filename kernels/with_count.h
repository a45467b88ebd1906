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

}  // namespace infercast
