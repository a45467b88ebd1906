#pragma once
// The 64-byte operand of ldtilecfg, palette 1: per tile its rows and bytes per row. A plain layout
// shared by the AMX files (no code here, so no ISA flags leak between translation units).
#include <cstdint>

namespace infercast {

struct alignas(64) TileConfig {
  std::uint8_t palette = 1;
  std::uint8_t start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t colsb[16] = {};
  std::uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

}  // namespace infercast
