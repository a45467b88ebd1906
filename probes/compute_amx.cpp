// AMX tile-multiply kernels (compiled with -mamx-tile -mamx-int8 -mamx-bf16). Only called after
// the dispatcher saw AMX in CPUID, tile state in XCR0 and the kernel's permission grant.
#include <immintrin.h>

#include <array>
#include <cstdint>
#include <cstring>

#include "probes/compute_kernels.h"
#include "probes/amx_tile_config.h"

namespace infercast::kernels_amx {
namespace {


void configure_tiles() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  _tile_loadconfig(&cfg);
}

// Tile registers are named by immediates, so each accumulator count is its own loop.
template <int Accumulators, bool Bf16>
void tile_loop(std::uint64_t iterations) {
  for (std::uint64_t i = 0; i < iterations; ++i) {
    if constexpr (Bf16) {
      _tile_dpbf16ps(0, 6, 7);
      if constexpr (Accumulators > 1) _tile_dpbf16ps(1, 6, 7);
      if constexpr (Accumulators > 2) _tile_dpbf16ps(2, 6, 7);
      if constexpr (Accumulators > 3) _tile_dpbf16ps(3, 6, 7);
      if constexpr (Accumulators > 4) _tile_dpbf16ps(4, 6, 7);
      if constexpr (Accumulators > 5) _tile_dpbf16ps(5, 6, 7);
    } else {
      _tile_dpbssd(0, 6, 7);
      if constexpr (Accumulators > 1) _tile_dpbssd(1, 6, 7);
      if constexpr (Accumulators > 2) _tile_dpbssd(2, 6, 7);
      if constexpr (Accumulators > 3) _tile_dpbssd(3, 6, 7);
      if constexpr (Accumulators > 4) _tile_dpbssd(4, 6, 7);
      if constexpr (Accumulators > 5) _tile_dpbssd(5, 6, 7);
    }
  }
}

template <bool Bf16>
void run_loop(std::uint64_t iterations, int accumulators) {
  switch (accumulators) {
    case 1: tile_loop<1, Bf16>(iterations); break;
    case 2: tile_loop<2, Bf16>(iterations); break;
    case 3: tile_loop<3, Bf16>(iterations); break;
    case 4: tile_loop<4, Bf16>(iterations); break;
    case 5: tile_loop<5, Bf16>(iterations); break;
    default: tile_loop<6, Bf16>(iterations); break;
  }
}

// Stores each accumulator tile and compares every element with the expected bit pattern.
bool check_accumulators(int accumulators, std::uint32_t expected_bits) {
  alignas(64) std::uint32_t out[16 * 16];
  auto matches = [&] {
    for (std::uint32_t v : out) {
      if (v != expected_bits) return false;
    }
    return true;
  };
  bool ok = true;
  _tile_stored(0, out, 64); ok = ok && matches();
  if (accumulators > 1) { _tile_stored(1, out, 64); ok = ok && matches(); }
  if (accumulators > 2) { _tile_stored(2, out, 64); ok = ok && matches(); }
  if (accumulators > 3) { _tile_stored(3, out, 64); ok = ok && matches(); }
  if (accumulators > 4) { _tile_stored(4, out, 64); ok = ok && matches(); }
  if (accumulators > 5) { _tile_stored(5, out, 64); ok = ok && matches(); }
  return ok;
}

void zero_accumulators() {
  _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3); _tile_zero(4); _tile_zero(5);
}

}  // namespace

bool int8_tiles(std::uint64_t iterations, int accumulators) {
  configure_tiles();
  alignas(64) static const std::array<std::int8_t, 1024> ones = [] {
    std::array<std::int8_t, 1024> a{};
    a.fill(1);
    return a;
  }();
  _tile_loadd(6, ones.data(), 64);
  _tile_loadd(7, ones.data(), 64);
  zero_accumulators();
  run_loop<false>(iterations, accumulators);
  // Each element gains a 64-term dot product of ones per multiply.
  const bool ok = check_accumulators(accumulators, static_cast<std::uint32_t>(iterations * 64));
  _tile_release();
  return ok;
}

bool bf16_tiles(std::uint64_t iterations, int accumulators) {
  configure_tiles();
  // A = 1.0 (0x3F80), B = 2^-24 (0x3380): each element gains 32 * 2^-24 = 2^-19 per multiply,
  // exact while the sum stays below 8 (iterations < 2^22).
  alignas(64) static const std::array<std::uint16_t, 512> a_one = [] {
    std::array<std::uint16_t, 512> a{};
    a.fill(0x3F80);
    return a;
  }();
  alignas(64) static const std::array<std::uint16_t, 512> b_step = [] {
    std::array<std::uint16_t, 512> b{};
    b.fill(0x3380);
    return b;
  }();
  _tile_loadd(6, a_one.data(), 64);
  _tile_loadd(7, b_step.data(), 64);
  zero_accumulators();
  run_loop<true>(iterations, accumulators);
  const float expected = static_cast<float>(iterations) * 0x1p-19F;
  std::uint32_t bits = 0;
  std::memcpy(&bits, &expected, sizeof bits);
  const bool ok = check_accumulators(accumulators, bits);
  _tile_release();
  return ok;
}

}  // namespace infercast::kernels_amx
