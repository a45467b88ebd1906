#pragma once
// Compute-peak kernels, one per instruction family, each in the translation unit of its ISA
// level. Every kernel keeps enough independent accumulators to cover latency x throughput,
// starts from fresh accumulators, and checks its own exact result, so a kernel that returns
// true has provably executed every instruction it was asked to.
#include <cstdint>

namespace infercast {

// Iterations per call are capped so every result stays exactly representable.
inline constexpr std::uint64_t kMaxComputeIterations = 1ULL << 22;

namespace kernels_avx2 {
inline constexpr double kFmaOpsPerIteration = 12 * 8 * 2;   // 12 ymm FMAs
inline constexpr double kVnniOpsPerIteration = 12 * 32 * 2;  // 12 ymm vpdpbusd (AVX-VNNI)
inline constexpr double kInt8OpsPerIteration = 10 * 32 * 2;  // 10 ymm vpmaddubsw + vpaddw
bool fp32_fma(std::uint64_t iterations);
bool int8_avx2(std::uint64_t iterations);
bool int8_avx_vnni(std::uint64_t iterations);
}  // namespace kernels_avx2

namespace kernels_avx512 {
inline constexpr double kFmaOpsPerIteration = 16 * 16 * 2;   // 16 zmm FMAs
inline constexpr double kBf16OpsPerIteration = 16 * 32 * 2;  // 16 vdpbf16ps
inline constexpr double kVnniOpsPerIteration = 16 * 64 * 2;  // 16 zmm vpdpbusd
bool fp32_fma(std::uint64_t iterations);
bool bf16_dot(std::uint64_t iterations);
bool int8_vnni(std::uint64_t iterations);
}  // namespace kernels_avx512

namespace kernels_amx {
// One tdpbssd / tdpbf16ps on full 16x64-byte tiles.
inline constexpr double kInt8OpsPerTile = 16.0 * 16 * 64 * 2;
inline constexpr double kBf16OpsPerTile = 16.0 * 16 * 32 * 2;
inline constexpr int kMaxAccumulators = 6;
// Each iteration issues one tile multiply into each of `accumulators` (1..6) distinct tiles.
bool int8_tiles(std::uint64_t iterations, int accumulators);
bool bf16_tiles(std::uint64_t iterations, int accumulators);
}  // namespace kernels_amx

// Cycles of a dependent chain of scalar adds (one cycle each): a frequency reference that
// needs no performance counters. Returns the number of adds executed.
std::uint64_t dependent_add_chain(std::uint64_t iterations);
inline constexpr std::uint64_t kAddsPerChainIteration = 16;

}  // namespace infercast
