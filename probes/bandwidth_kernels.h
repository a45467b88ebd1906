#pragma once
// Streaming kernels of the bandwidth probe, one implementation per ISA level. Each kernel
// declares its contract (arrays, bytes read and written per element, store kind) as data, so
// rates are derived in one place. Bytes follow the STREAM/likwid-bench convention: the extra
// read of a write-allocate is not counted.
//
// Element counts must be multiples of kBandwidthBlock; arrays must be 64-byte aligned.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "probes/cpu_features.h"

namespace infercast {

inline constexpr std::size_t kBandwidthBlock = 1024;  // elements; covers every unroll

enum class StreamKernel { read, write, write_nt, copy, triad };

struct StreamContract {
  StreamKernel kernel;
  std::string_view name;
  unsigned arrays;          // arrays the kernel touches
  unsigned bytes_read;      // per element, 4-byte elements
  unsigned bytes_written;   // per element
  std::string_view stores;  // "none", "temporal" or "non-temporal"
};

const StreamContract& contract(StreamKernel kernel);
std::span<const StreamContract> all_stream_contracts();

// One ISA level's implementations. Each runs `passes` passes over its arrays, with a compiler
// barrier between passes so no pass can be merged away.
struct StreamKernels {
  IsaLevel level;
  // Returns the wrapping 32-bit sum of a[0..n) over all passes (passes x the sum of one).
  // The array is read as `streams` (1, 4 or 8) equal parts at once: one stream keeps the L1
  // loop tight, several keep enough L2 prefetch streams in flight to find the DRAM ceiling.
  std::uint32_t (*read)(const std::uint32_t* a, std::size_t n, std::size_t passes,
                        unsigned streams);
  void (*write)(std::uint32_t* a, std::size_t n, std::uint32_t value, std::size_t passes);
  void (*write_nt)(std::uint32_t* a, std::size_t n, std::uint32_t value, std::size_t passes);
  void (*copy)(std::uint32_t* dst, const std::uint32_t* src, std::size_t n, std::size_t passes);
  // a[i] = b[i] + s * c[i]
  void (*triad)(float* a, const float* b, const float* c, float s, std::size_t n,
                std::size_t passes);
};

const StreamKernels& stream_kernels_scalar();
const StreamKernels& stream_kernels_avx2();
const StreamKernels& stream_kernels_avx512();

// The implementation for a level (AMX has no streaming kernels of its own: it uses AVX-512).
const StreamKernels& stream_kernels_for(IsaLevel level);

}  // namespace infercast
