#include "kernels/interleave.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

namespace infercast {
namespace {

constexpr int kR = kInterleave;

// One block of one row with its quants unpacked to one value per element: the form both
// layouts are written from and read into, so each direction is one plain loop per layout.
struct Unpacked {
  std::uint16_t d = 0;
  std::uint16_t dmin = 0;
  std::uint8_t q[kQkK] = {};  // unsigned quants (Q8_0: the int8 bytes)
  std::uint8_t scale[16] = {};
  std::uint8_t min[8] = {};
};

// --- GGUF blocks <-> Unpacked -------------------------------------------------------------

void unpack(const BlockQ4_0& b, Unpacked& u) {
  u.d = b.d;
  for (int i = 0; i < kQk / 2; ++i) {
    u.q[i] = b.qs[i] & 0xF;
    u.q[i + 16] = b.qs[i] >> 4;
  }
}
void pack(const Unpacked& u, BlockQ4_0& b) {
  b.d = u.d;
  for (int i = 0; i < kQk / 2; ++i) b.qs[i] = static_cast<std::uint8_t>(u.q[i] | u.q[i + 16] << 4);
}

void unpack(const BlockQ5_0& b, Unpacked& u) {
  u.d = b.d;
  for (int j = 0; j < kQk; ++j) u.q[j] = static_cast<std::uint8_t>(unsigned_quant(b, j));
}
void pack(const Unpacked& u, BlockQ5_0& b) {
  b.d = u.d;
  for (int i = 0; i < kQk / 2; ++i) b.qs[i] = static_cast<std::uint8_t>((u.q[i] & 0xF) | (u.q[i + 16] & 0xF) << 4);
  for (int p = 0; p < 4; ++p) {
    b.qh[p] = 0;
    for (int j = 0; j < 8; ++j) b.qh[p] = static_cast<std::uint8_t>(b.qh[p] | (u.q[8 * p + j] >> 4) << j);
  }
}

void unpack(const BlockQ8_0& b, Unpacked& u) {
  u.d = b.d;
  std::memcpy(u.q, b.qs, kQk);
}
void pack(const Unpacked& u, BlockQ8_0& b) {
  b.d = u.d;
  std::memcpy(b.qs, u.q, kQk);
}

// The 12 GGUF scale bytes from eight 6-bit scales and mins (the inverse of unpack_scale_min_k4).
void pack_k4_scales(const std::uint8_t* scale, const std::uint8_t* min, std::uint8_t* out) {
  for (int j = 0; j < 4; ++j) {
    out[j] = static_cast<std::uint8_t>((scale[j] & 63) | (scale[j + 4] >> 4) << 6);
    out[j + 4] = static_cast<std::uint8_t>((min[j] & 63) | (min[j + 4] >> 4) << 6);
    out[j + 8] = static_cast<std::uint8_t>((scale[j + 4] & 15) | (min[j + 4] & 15) << 4);
  }
}

template <class Block>
void unpack_k4(const Block& b, Unpacked& u) {
  u.d = b.d;
  u.dmin = b.dmin;
  for (int j = 0; j < 8; ++j) unpack_scale_min_k4(j, b.scales, u.scale[j], u.min[j]);
  for (int j = 0; j < 4; ++j) {
    for (int l = 0; l < 32; ++l) {
      u.q[64 * j + l] = static_cast<std::uint8_t>(b.qs[32 * j + l] & 0xF);
      u.q[64 * j + 32 + l] = static_cast<std::uint8_t>(b.qs[32 * j + l] >> 4);
      if constexpr (std::is_same_v<Block, BlockQ5_K>) {
        u.q[64 * j + l] =
            static_cast<std::uint8_t>(u.q[64 * j + l] | ((b.qh[l] >> (2 * j)) & 1) << 4);
        u.q[64 * j + 32 + l] =
            static_cast<std::uint8_t>(u.q[64 * j + 32 + l] | ((b.qh[l] >> (2 * j + 1)) & 1) << 4);
      }
    }
  }
}
template <class Block>
void pack_k4(const Unpacked& u, Block& b) {
  b.d = u.d;
  b.dmin = u.dmin;
  pack_k4_scales(u.scale, u.min, b.scales);
  if constexpr (std::is_same_v<Block, BlockQ5_K>) std::memset(b.qh, 0, sizeof(b.qh));
  for (int j = 0; j < 4; ++j) {
    for (int l = 0; l < 32; ++l) {
      const int lo = u.q[64 * j + l];
      const int hi = u.q[64 * j + 32 + l];
      b.qs[32 * j + l] = static_cast<std::uint8_t>((lo & 0xF) | (hi & 0xF) << 4);
      if constexpr (std::is_same_v<Block, BlockQ5_K>) {
        b.qh[l] =
            static_cast<std::uint8_t>(b.qh[l] | (lo >> 4) << (2 * j) | (hi >> 4) << (2 * j + 1));
      }
    }
  }
}
void unpack(const BlockQ4_K& b, Unpacked& u) {
  unpack_k4(b, u);
}
void pack(const Unpacked& u, BlockQ4_K& b) {
  pack_k4(u, b);
}
void unpack(const BlockQ5_K& b, Unpacked& u) {
  unpack_k4(b, u);
}
void pack(const Unpacked& u, BlockQ5_K& b) {
  pack_k4(u, b);
}

void unpack(const BlockQ6_K& b, Unpacked& u) {
  u.d = b.d;
  std::memcpy(u.scale, b.scales, 16);
  for (int h = 0; h < 2; ++h) {
    const std::uint8_t* ql = b.ql + 64 * h;
    const std::uint8_t* qh = b.qh + 32 * h;
    std::uint8_t* q = u.q + 128 * h;
    for (int l = 0; l < 32; ++l) {
      q[l] = static_cast<std::uint8_t>((ql[l] & 0xF) | ((qh[l] >> 0) & 3) << 4);
      q[l + 32] = static_cast<std::uint8_t>((ql[l + 32] & 0xF) | ((qh[l] >> 2) & 3) << 4);
      q[l + 64] = static_cast<std::uint8_t>((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4);
      q[l + 96] = static_cast<std::uint8_t>((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4);
    }
  }
}
void pack(const Unpacked& u, BlockQ6_K& b) {
  b.d = u.d;
  std::memcpy(b.scales, u.scale, 16);
  for (int h = 0; h < 2; ++h) {
    std::uint8_t* ql = b.ql + 64 * h;
    std::uint8_t* qh = b.qh + 32 * h;
    const std::uint8_t* q = u.q + 128 * h;
    for (int l = 0; l < 32; ++l) {
      ql[l] = static_cast<std::uint8_t>((q[l] & 0xF) | (q[l + 64] & 0xF) << 4);
      ql[l + 32] = static_cast<std::uint8_t>((q[l + 32] & 0xF) | (q[l + 96] & 0xF) << 4);
      qh[l] = static_cast<std::uint8_t>(q[l] >> 4 | (q[l + 32] >> 4) << 2 | (q[l + 64] >> 4) << 4 |
                                        (q[l + 96] >> 4) << 6);
    }
  }
}

// --- Interleaved blocks <-> eight Unpacked rows --------------------------------------------

// Q4_0 and Q5_0: the low four bits in qs, Q5_0's fifth in qh.
template <class X8>
concept Legacy4x8 = std::is_same_v<X8, BlockQ4_0x8> || std::is_same_v<X8, BlockQ5_0x8>;

template <Legacy4x8 X8>
void write_x8(const Unpacked* u, X8& b) {
  for (int r = 0; r < kR; ++r) {
    b.d[r] = u[r].d;
    for (int t = 0; t < 4; ++t) {
      for (int i = 0; i < 4; ++i)
        b.qs[t][r][i] = static_cast<std::uint8_t>((u[r].q[4 * t + i] & 0xF) | (u[r].q[16 + 4 * t + i] & 0xF) << 4);
    }
    if constexpr (std::is_same_v<X8, BlockQ5_0x8>) {
      for (int p = 0; p < 4; ++p) {
        b.qh[p][r] = 0;
        for (int j = 0; j < 8; ++j) b.qh[p][r] = static_cast<std::uint8_t>(b.qh[p][r] | (u[r].q[8 * p + j] >> 4) << j);
      }
    }
  }
}
template <Legacy4x8 X8>
void read_x8(const X8& b, Unpacked* u) {
  for (int r = 0; r < kR; ++r) {
    u[r].d = b.d[r];
    for (int t = 0; t < 4; ++t) {
      for (int i = 0; i < 4; ++i) {
        u[r].q[4 * t + i] = b.qs[t][r][i] & 0xF;
        u[r].q[16 + 4 * t + i] = b.qs[t][r][i] >> 4;
      }
    }
    if constexpr (std::is_same_v<X8, BlockQ5_0x8>) {
      for (int e = 0; e < kQk; ++e) u[r].q[e] = static_cast<std::uint8_t>(u[r].q[e] | ((b.qh[e / 8][r] >> (e % 8)) & 1) << 4);
    }
  }
}

void write_x8(const Unpacked* u, BlockQ8_0x8& b) {
  for (int r = 0; r < kR; ++r) {
    b.d[r] = u[r].d;
    for (int t = 0; t < 8; ++t) std::memcpy(b.qs[t][r], u[r].q + 4 * t, 4);
  }
}
void read_x8(const BlockQ8_0x8& b, Unpacked* u) {
  for (int r = 0; r < kR; ++r) {
    u[r].d = b.d[r];
    for (int t = 0; t < 8; ++t) std::memcpy(u[r].q + 4 * t, b.qs[t][r], 4);
  }
}

void write_k4_scales(const Unpacked* u, std::uint8_t* s) {
  for (int e = 0; e < 64; ++e) {
    const Unpacked& row = u[e % kR];
    s[e] = static_cast<std::uint8_t>((row.scale[e / kR] & 15) | (row.min[e / kR] & 15) << 4);
  }
  for (int k = 0; k < 32; ++k) {
    const Unpacked& a = u[k % kR];
    const Unpacked& b = u[(k + 32) % kR];
    const int ja = k / kR;
    const int jb = (k + 32) / kR;
    s[64 + k] = static_cast<std::uint8_t>(a.scale[ja] >> 4 | (a.min[ja] >> 4) << 2 |
                                          (b.scale[jb] >> 4) << 4 | (b.min[jb] >> 4) << 6);
  }
}
void read_k4_scales(const std::uint8_t* s, Unpacked* u) {
  for (int e = 0; e < 64; ++e) {
    const int k = e % 32;
    const int shift = e < 32 ? 0 : 4;
    Unpacked& row = u[e % kR];
    row.scale[e / kR] = static_cast<std::uint8_t>((s[e] & 15) | ((s[64 + k] >> shift) & 3) << 4);
    row.min[e / kR] =
        static_cast<std::uint8_t>((s[e] >> 4) | ((s[64 + k] >> (shift + 2)) & 3) << 4);
  }
}

template <class X8>
concept K4x8 = std::is_same_v<X8, BlockQ4_Kx8> || std::is_same_v<X8, BlockQ5_Kx8>;

template <K4x8 X8>
void write_x8(const Unpacked* u, X8& b) {
  write_k4_scales(u, b.scales);
  if constexpr (std::is_same_v<X8, BlockQ5_Kx8>) std::memset(b.qh, 0, sizeof(b.qh));
  for (int r = 0; r < kR; ++r) {
    b.d[r] = u[r].d;
    b.dmin[r] = u[r].dmin;
    for (int j = 0; j < 4; ++j) {
      for (int t = 0; t < 8; ++t) {
        for (int i = 0; i < 4; ++i) {
          const int lo = u[r].q[64 * j + 4 * t + i];
          const int hi = u[r].q[64 * j + 32 + 4 * t + i];
          b.qs[j][t][r][i] = static_cast<std::uint8_t>((lo & 0xF) | (hi & 0xF) << 4);
          if constexpr (std::is_same_v<X8, BlockQ5_Kx8>) {
            b.qh[t][r][i] = static_cast<std::uint8_t>(b.qh[t][r][i] | (lo >> 4) << (2 * j) |
                                                      (hi >> 4) << (2 * j + 1));
          }
        }
      }
    }
  }
}
template <K4x8 X8>
void read_x8(const X8& b, Unpacked* u) {
  read_k4_scales(b.scales, u);
  for (int r = 0; r < kR; ++r) {
    u[r].d = b.d[r];
    u[r].dmin = b.dmin[r];
    for (int j = 0; j < 4; ++j) {
      for (int t = 0; t < 8; ++t) {
        for (int i = 0; i < 4; ++i) {
          std::uint8_t lo = b.qs[j][t][r][i] & 0xF;
          std::uint8_t hi = b.qs[j][t][r][i] >> 4;
          if constexpr (std::is_same_v<X8, BlockQ5_Kx8>) {
            lo = static_cast<std::uint8_t>(lo | ((b.qh[t][r][i] >> (2 * j)) & 1) << 4);
            hi = static_cast<std::uint8_t>(hi | ((b.qh[t][r][i] >> (2 * j + 1)) & 1) << 4);
          }
          u[r].q[64 * j + 4 * t + i] = lo;
          u[r].q[64 * j + 32 + 4 * t + i] = hi;
        }
      }
    }
  }
}

void write_x8(const Unpacked* u, BlockQ6_Kx8& b) {
  std::memset(b.qh, 0, sizeof(b.qh));
  for (int r = 0; r < kR; ++r) {
    b.d[r] = u[r].d;
    for (int g = 0; g < 16; ++g) b.scales[g][r] = static_cast<std::int8_t>(u[r].scale[g]);
    for (int e = 0; e < kQkK; ++e) {
      const int unit = e / 32;
      const int h = (e % 32) / 16;
      const int p = (e % 16) / 4;
      const int i = e % 4;
      const int q = u[r].q[e];
      b.ql[unit][p][r][i] = static_cast<std::uint8_t>(b.ql[unit][p][r][i] | (q & 0xF) << (4 * h));
      b.qh[unit][h][r][i] = static_cast<std::uint8_t>(b.qh[unit][h][r][i] | (q >> 4) << (2 * p));
    }
  }
}
void read_x8(const BlockQ6_Kx8& b, Unpacked* u) {
  for (int r = 0; r < kR; ++r) {
    u[r].d = b.d[r];
    for (int g = 0; g < 16; ++g) u[r].scale[g] = static_cast<std::uint8_t>(b.scales[g][r]);
    for (int e = 0; e < kQkK; ++e) {
      const int unit = e / 32;
      const int h = (e % 32) / 16;
      const int p = (e % 16) / 4;
      const int i = e % 4;
      u[r].q[e] = static_cast<std::uint8_t>(((b.ql[unit][p][r][i] >> (4 * h)) & 0xF) |
                                            ((b.qh[unit][h][r][i] >> (2 * p)) & 3) << 4);
    }
  }
}

template <class Block>
constexpr std::size_t elements_of() {
  constexpr bool kLegacy = std::is_same_v<Block, BlockQ4_0> || std::is_same_v<Block, BlockQ5_0> || std::is_same_v<Block, BlockQ8_0>;
  return kLegacy ? kQk : kQkK;
}

template <class Block, class X8>
void interleave_as(std::uint8_t* data, std::size_t rows, std::size_t cols, std::size_t row_bytes) {
  const std::size_t blocks = cols / elements_of<Block>();
  std::vector<std::uint8_t> group(kR * row_bytes);
  Unpacked u[kR];
  for (std::size_t g = 0; g + kR <= rows; g += kR) {
    std::uint8_t* base = data + g * row_bytes;
    std::memcpy(group.data(), base, group.size());
    auto* out = reinterpret_cast<X8*>(base);
    for (std::size_t b = 0; b < blocks; ++b) {
      for (int r = 0; r < kR; ++r) {
        Block src;
        std::memcpy(&src, group.data() + r * row_bytes + b * sizeof(Block), sizeof(Block));
        unpack(src, u[r]);
      }
      X8 x8{};  // write_x8 ORs bit fields into some bytes
      write_x8(u, x8);
      std::memcpy(out + b, &x8, sizeof(X8));
    }
  }
}

// Rows [r, r + n) of one group of eight (or of the GGUF tail), each block of the group read once.
template <class Block, class X8>
void copy_rows_as(const std::uint8_t* data, std::size_t rows, std::size_t cols,
                  std::size_t row_bytes, std::size_t r, std::size_t n, std::uint8_t* out) {
  const std::size_t g = r / kR * kR;
  if (g + kR > rows) {
    std::memcpy(out, data + r * row_bytes, n * row_bytes);
    return;
  }
  const std::size_t blocks = cols / elements_of<Block>();
  const auto* in = reinterpret_cast<const X8*>(data + g * row_bytes);
  Unpacked u[kR];
  for (std::size_t b = 0; b < blocks; ++b) {
    X8 x8;
    std::memcpy(&x8, in + b, sizeof(X8));
    read_x8(x8, u);
    for (std::size_t i = 0; i < n; ++i) {
      Block dst{};
      pack(u[r - g + i], dst);
      std::memcpy(out + i * row_bytes + b * sizeof(Block), &dst, sizeof(Block));
    }
  }
}

// Calls f.template operator()<Block, X8>() for a format with an interleaved layout; false for
// the others.
template <class F>
bool with_layouts_of(GgmlType type, F&& f) {
  switch (type) {
    case GgmlType::q4_0:
      f.template operator()<BlockQ4_0, BlockQ4_0x8>();
      return true;
    case GgmlType::q5_0:
      f.template operator()<BlockQ5_0, BlockQ5_0x8>();
      return true;
    case GgmlType::q8_0:
      f.template operator()<BlockQ8_0, BlockQ8_0x8>();
      return true;
    case GgmlType::q4_k:
      f.template operator()<BlockQ4_K, BlockQ4_Kx8>();
      return true;
    case GgmlType::q5_k:
      f.template operator()<BlockQ5_K, BlockQ5_Kx8>();
      return true;
    case GgmlType::q6_k:
      f.template operator()<BlockQ6_K, BlockQ6_Kx8>();
      return true;
    default:
      return false;
  }
}

}  // namespace

bool has_interleaved_layout(GgmlType type) {
  return with_layouts_of(type, []<class, class>() {});
}

void interleave_rows(GgmlType type, std::uint8_t* data, std::size_t rows, std::size_t cols,
                     std::size_t row_bytes) {
  with_layouts_of(type, [&]<class Block, class X8>() {
    interleave_as<Block, X8>(data, rows, cols, row_bytes);
  });
}

void copy_gguf_rows(GgmlType type, const std::uint8_t* data, std::size_t rows, std::size_t cols,
                    std::size_t row_bytes, std::size_t r, std::size_t n, std::uint8_t* out) {
  // One group at a time: each call of copy_rows_as decodes a group's blocks once.
  while (n > 0) {
    const std::size_t in_group = std::min(n, kR - r % kR);
    const bool interleaved = with_layouts_of(type, [&]<class Block, class X8>() {
      copy_rows_as<Block, X8>(data, rows, cols, row_bytes, r, in_group, out);
    });
    if (!interleaved) std::memcpy(out, data + r * row_bytes, in_group * row_bytes);
    r += in_group;
    n -= in_group;
    out += in_group * row_bytes;
  }
}

void copy_gguf_row(GgmlType type, const std::uint8_t* data, std::size_t rows, std::size_t cols,
                   std::size_t row_bytes, std::size_t r, std::uint8_t* out) {
  copy_gguf_rows(type, data, rows, cols, row_bytes, r, 1, out);
}

}  // namespace infercast
