#include "kernels/quantize.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "kernels/half.h"

namespace infercast::reference {
namespace {

// Below this a group counts as all zeros (ggml's GROUP_MAX_EPS).
constexpr float kGroupMaxEps = 1e-15F;

// Fits x ~ scale * L + min with L in [0, nmax], min <= 0, minimising the weighted squared error:
// a first guess from the range, then a scan over nearby inverse scales solving the 2x2 least
// squares for (scale, min) at each. Returns the scale and stores -min.
float fit_scale_min(int n, int nmax, const float* x, const float* weights, std::uint8_t* L, float* negated_min,
                    std::uint8_t* laux, float rmin, float rdelta, int nstep) {
  float min = x[0];
  float max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    min = std::min(min, x[i]);
    max = std::max(max, x[i]);
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    std::fill(L, L + n, 0);
    *negated_min = -min;
    return 0.F;
  }
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = nearest_int(iscale * (x[i] - min));
    L[i] = static_cast<std::uint8_t>(std::max(0, std::min(nmax, l)));
    const float diff = scale * L[i] + min - x[i];
    best_error += weights[i] * (diff * diff);
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * static_cast<float>(is) + static_cast<float>(nmax)) / (max - min);
    float sum_l = 0;
    float sum_l2 = 0;
    float sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * (x[i] - min));
      l = std::max(0, std::min(nmax, l));
      laux[i] = static_cast<std::uint8_t>(l);
      const float w = weights[i];
      const auto lf = static_cast<float>(l);
      sum_l += w * lf;
      sum_l2 += w * lf * lf;
      sum_xl += w * lf * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (det > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float error = 0;
      for (int i = 0; i < n; ++i) {
        const float diff = this_scale * laux[i] + this_min - x[i];
        error += weights[i] * (diff * diff);
      }
      if (error < best_error) {
        std::copy(laux, laux + n, L);
        best_error = error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *negated_min = -min;
  return scale;
}

// Symmetric fit x ~ scale * (L - nmax) weighted by x^2, trying 19 inverse scales around the
// range-based one. L is stored offset by nmax.
float fit_scale_symmetric(int n, int nmax, const float* x, std::int8_t* L) {
  float max = 0;
  float amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    std::fill(L, L + n, 0);
    return 0.F;
  }
  float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0;
  float suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = nearest_int(iscale * x[i]);
    l = std::max(-nmax, std::min(nmax - 1, l));
    L[i] = static_cast<std::int8_t>(l + nmax);
    const float w = x[i] * x[i];
    const auto lf = static_cast<float>(l);
    sumlx += w * x[i] * lf;
    suml2 += w * lf * lf;
  }
  float scale = suml2 != 0 ? sumlx / suml2 : 0.0F;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1F * static_cast<float>(is)) / max;
    sumlx = 0;
    suml2 = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * x[i]);
      l = std::max(-nmax, std::min(nmax - 1, l));
      const float w = x[i] * x[i];
      const auto lf = static_cast<float>(l);
      sumlx += w * x[i] * lf;
      suml2 += w * lf * lf;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        const int l = nearest_int(iscale * x[i]);
        L[i] = static_cast<std::int8_t>(nmax + std::max(-nmax, std::min(nmax - 1, l)));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Shared by Q4_K and Q5_K: per sub-block (scale, min) fits, their 6-bit encoding, then the
// quants recomputed against the encoded scales. Returns the quants (0..nmax) in L.
template <class Block>
void quantize_k_scales(const float* x, Block& y, std::uint8_t* L, int nmax, float rmin, int nstep) {
  std::uint8_t laux[32];
  float weights[32];
  float mins[kQkK / 32];
  float scales[kQkK / 32];
  float max_scale = 0;
  float max_min = 0;
  for (int j = 0; j < kQkK / 32; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] = fit_scale_min(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], laux, rmin, 0.1F, nstep);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float inv_scale = max_scale > 0 ? 63.F / max_scale : 0.F;
  const float inv_min = max_min > 0 ? 63.F / max_min : 0.F;
  for (int j = 0; j < kQkK / 32; ++j) {
    // The uint8 wrap of a negative value is part of the reference behaviour (it then clamps to 63).
    auto ls = static_cast<std::uint8_t>(nearest_int(inv_scale * scales[j]));
    auto lm = static_cast<std::uint8_t>(nearest_int(inv_min * mins[j]));
    ls = std::min<std::uint8_t>(63, ls);
    lm = std::min<std::uint8_t>(63, lm);
    if (j < 4) {
      y.scales[j] = ls;
      y.scales[j + 4] = lm;
    } else {
      y.scales[j + 4] = static_cast<std::uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
      y.scales[j - 4] = static_cast<std::uint8_t>(y.scales[j - 4] | ((ls >> 4) << 6));
      y.scales[j] = static_cast<std::uint8_t>(y.scales[j] | ((lm >> 4) << 6));
    }
  }
  y.d = fp32_to_fp16(max_scale / 63.F);
  y.dmin = fp32_to_fp16(max_min / 63.F);
  for (int j = 0; j < kQkK / 32; ++j) {
    std::uint8_t sc = 0;
    std::uint8_t m = 0;
    unpack_scale_min_k4(j, y.scales, sc, m);
    const float d = fp16_to_fp32(y.d) * sc;
    if (d == 0) continue;
    const float dm = fp16_to_fp32(y.dmin) * m;
    for (int i = 0; i < 32; ++i) {
      const int l = nearest_int((x[32 * j + i] + dm) / d);
      L[32 * j + i] = static_cast<std::uint8_t>(std::max(0, std::min(nmax, l)));
    }
  }
}

}  // namespace

int nearest_int(float x) {
  const float biased = x + 12582912.F;  // 1.5 * 2^23: the FPU rounds into the low mantissa bits
  const auto bits = std::bit_cast<std::int32_t>(biased);
  return (bits & 0x007FFFFF) - 0x00400000;
}

void quantize_q8_0(const float* x, BlockQ8_0* y, std::size_t count) {
  for (std::size_t b = 0; b < count / kQk; ++b, x += kQk) {
    float amax = 0;
    for (int j = 0; j < kQk; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127;
    const float id = d != 0 ? 1.0F / d : 0.0F;
    y[b].d = fp32_to_fp16(d);
    for (int j = 0; j < kQk; ++j) y[b].qs[j] = static_cast<std::int8_t>(std::round(x[j] * id));
  }
}

namespace {
// The block's element of largest magnitude, with its sign (the first of equals): Q4_0's and
// Q5_0's scale maps it to the most negative quant.
float signed_absmax(const float* x) {
  float amax = 0;
  float max = 0;
  for (int j = 0; j < kQk; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}
}  // namespace

void quantize_q4_0(const float* x, BlockQ4_0* y, std::size_t count) {
  for (std::size_t b = 0; b < count / kQk; ++b, x += kQk) {
    const float d = signed_absmax(x) / -8;
    const float id = d != 0 ? 1.0F / d : 0.0F;
    y[b].d = fp32_to_fp16(d);
    for (int j = 0; j < kQk / 2; ++j) {
      // Truncation after +8.5 is the reference's rounding; the result is always in [0, 16].
      const int lo = std::min(15, static_cast<int>(x[j] * id + 8.5F));
      const int hi = std::min(15, static_cast<int>(x[j + kQk / 2] * id + 8.5F));
      y[b].qs[j] = static_cast<std::uint8_t>(lo | (hi << 4));
    }
  }
}

void quantize_q5_0(const float* x, BlockQ5_0* y, std::size_t count) {
  for (std::size_t b = 0; b < count / kQk; ++b, x += kQk) {
    const float d = signed_absmax(x) / -16;
    const float id = d != 0 ? 1.0F / d : 0.0F;
    y[b].d = fp32_to_fp16(d);
    std::uint32_t qh = 0;
    for (int j = 0; j < kQk / 2; ++j) {
      // As Q4_0's: truncation after +16.5, always in [0, 32], and 32 taken as 31.
      const int lo = std::min(31, static_cast<int>(x[j] * id + 16.5F));
      const int hi = std::min(31, static_cast<int>(x[j + kQk / 2] * id + 16.5F));
      y[b].qs[j] = static_cast<std::uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
      qh |= static_cast<std::uint32_t>(lo >> 4) << j;
      qh |= static_cast<std::uint32_t>(hi >> 4) << (j + kQk / 2);
    }
    for (int i = 0; i < 4; ++i) y[b].qh[i] = static_cast<std::uint8_t>(qh >> (8 * i));
  }
}

void quantize_q4_k(const float* x, BlockQ4_K* y, std::size_t count) {
  for (std::size_t b = 0; b < count / kQkK; ++b, x += kQkK) {
    std::uint8_t L[kQkK];
    quantize_k_scales(x, y[b], L, 15, -1.F, 20);
    std::uint8_t* q = y[b].qs;
    for (int j = 0; j < kQkK; j += 64, q += 32) {
      for (int l = 0; l < 32; ++l) q[l] = static_cast<std::uint8_t>(L[j + l] | (L[j + l + 32] << 4));
    }
  }
}

void quantize_q5_k(const float* x, BlockQ5_K* y, std::size_t count) {
  for (std::size_t b = 0; b < count / kQkK; ++b, x += kQkK) {
    std::uint8_t L[kQkK];
    quantize_k_scales(x, y[b], L, 31, -0.5F, 15);
    std::uint8_t* qh = y[b].qh;
    std::uint8_t* ql = y[b].qs;
    std::memset(qh, 0, kQkK / 8);
    std::uint8_t m1 = 1;
    std::uint8_t m2 = 2;
    for (int n = 0; n < kQkK; n += 64, ql += 32) {
      for (int j = 0; j < 32; ++j) {
        int l1 = L[n + j];
        if (l1 > 15) {
          l1 -= 16;
          qh[j] |= m1;
        }
        int l2 = L[n + j + 32];
        if (l2 > 15) {
          l2 -= 16;
          qh[j] |= m2;
        }
        ql[j] = static_cast<std::uint8_t>(l1 | (l2 << 4));
      }
      m1 = static_cast<std::uint8_t>(m1 << 2);
      m2 = static_cast<std::uint8_t>(m2 << 2);
    }
  }
}

void quantize_q6_k(const float* x, BlockQ6_K* y, std::size_t count) {
  for (std::size_t b = 0; b < count / kQkK; ++b, x += kQkK) {
    std::int8_t L[kQkK];
    float scales[kQkK / 16];
    float max_scale = 0;
    float max_abs_scale = 0;
    for (int g = 0; g < kQkK / 16; ++g) {
      scales[g] = fit_scale_symmetric(16, 32, x + 16 * g, L + 16 * g);
      if (std::fabs(scales[g]) > max_abs_scale) {
        max_abs_scale = std::fabs(scales[g]);
        max_scale = scales[g];
      }
    }
    if (max_abs_scale < kGroupMaxEps) {
      std::memset(&y[b], 0, sizeof(BlockQ6_K));
      continue;
    }
    const float iscale = -128.F / max_scale;
    y[b].d = fp32_to_fp16(1 / iscale);
    for (int g = 0; g < kQkK / 16; ++g) {
      y[b].scales[g] = static_cast<std::int8_t>(std::min(127, nearest_int(iscale * scales[g])));
    }
    for (int g = 0; g < kQkK / 16; ++g) {
      const float d = fp16_to_fp32(y[b].d) * y[b].scales[g];
      if (d == 0) continue;
      for (int i = 0; i < 16; ++i) {
        const int l = nearest_int(x[16 * g + i] / d);
        L[16 * g + i] = static_cast<std::int8_t>(std::max(-32, std::min(31, l)) + 32);
      }
    }
    std::uint8_t* ql = y[b].ql;
    std::uint8_t* qh = y[b].qh;
    for (int j = 0; j < kQkK; j += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        const int q1 = L[j + l] & 0xF;
        const int q2 = L[j + l + 32] & 0xF;
        const int q3 = L[j + l + 64] & 0xF;
        const int q4 = L[j + l + 96] & 0xF;
        ql[l] = static_cast<std::uint8_t>(q1 | (q3 << 4));
        ql[l + 32] = static_cast<std::uint8_t>(q2 | (q4 << 4));
        qh[l] = static_cast<std::uint8_t>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                                          ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
      }
    }
  }
}

void quantize_q8_k(const float* x, BlockQ8_K* y, std::size_t count) {
  for (std::size_t b = 0; b < count / kQkK; ++b, x += kQkK) {
    float max = 0;
    float amax = 0;
    for (int j = 0; j < kQkK; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    if (amax == 0) {
      std::memset(&y[b], 0, sizeof(BlockQ8_K));
      continue;
    }
    const float iscale = -127.F / max;
    for (int j = 0; j < kQkK; ++j) y[b].qs[j] = static_cast<std::int8_t>(std::min(127, nearest_int(iscale * x[j])));
    for (int g = 0; g < kQkK / 16; ++g) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += y[b].qs[16 * g + i];
      y[b].bsums[g] = static_cast<std::int16_t>(sum);
    }
    y[b].d = 1 / iscale;
  }
}

void quantize_f16(const float* x, std::uint16_t* y, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) y[i] = fp32_to_fp16(x[i]);
}

void quantize_bf16(const float* x, std::uint16_t* y, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) y[i] = fp32_to_bf16(x[i]);
}

void dequantize_q8_0(const BlockQ8_0* x, float* y, std::size_t count) {
  for (std::size_t b = 0; b < count / kQk; ++b) {
    const float d = fp16_to_fp32(x[b].d);
    for (int j = 0; j < kQk; ++j) *y++ = x[b].qs[j] * d;
  }
}

void dequantize_q4_0(const BlockQ4_0* x, float* y, std::size_t count) {
  for (std::size_t b = 0; b < count / kQk; ++b, y += kQk) {
    const float d = fp16_to_fp32(x[b].d);
    for (int j = 0; j < kQk / 2; ++j) {
      y[j] = static_cast<float>((x[b].qs[j] & 0xF) - 8) * d;
      y[j + kQk / 2] = static_cast<float>((x[b].qs[j] >> 4) - 8) * d;
    }
  }
}

void dequantize_q5_0(const BlockQ5_0* x, float* y, std::size_t count) {
  for (std::size_t b = 0; b < count / kQk; ++b, y += kQk) {
    const float d = fp16_to_fp32(x[b].d);
    for (int j = 0; j < kQk; ++j) y[j] = static_cast<float>(unsigned_quant(x[b], j) - 16) * d;
  }
}

void dequantize_q4_k(const BlockQ4_K* x, float* y, std::size_t count) {
  for (std::size_t b = 0; b < count / kQkK; ++b) {
    const float d = fp16_to_fp32(x[b].d);
    const float dmin = fp16_to_fp32(x[b].dmin);
    const std::uint8_t* q = x[b].qs;
    for (int j = 0; j < 8; j += 2, q += 32) {
      std::uint8_t sc = 0;
      std::uint8_t m = 0;
      unpack_scale_min_k4(j, x[b].scales, sc, m);
      const float d1 = d * sc;
      const float m1 = dmin * m;
      unpack_scale_min_k4(j + 1, x[b].scales, sc, m);
      const float d2 = d * sc;
      const float m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

void dequantize_q5_k(const BlockQ5_K* x, float* y, std::size_t count) {
  for (std::size_t b = 0; b < count / kQkK; ++b) {
    const float d = fp16_to_fp32(x[b].d);
    const float dmin = fp16_to_fp32(x[b].dmin);
    const std::uint8_t* ql = x[b].qs;
    const std::uint8_t* qh = x[b].qh;
    unsigned u1 = 1;
    unsigned u2 = 2;
    for (int j = 0; j < 8; j += 2, ql += 32, u1 <<= 2, u2 <<= 2) {
      std::uint8_t sc = 0;
      std::uint8_t m = 0;
      unpack_scale_min_k4(j, x[b].scales, sc, m);
      const float d1 = d * sc;
      const float m1 = dmin * m;
      unpack_scale_min_k4(j + 1, x[b].scales, sc, m);
      const float d2 = d * sc;
      const float m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>((ql[l] & 0xF) + ((qh[l] & u1) ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
    }
  }
}

namespace {
// The four 6-bit quants (minus 32) that share byte l of a 128-element half of a Q6_K block.
inline void q6_k_quad(const std::uint8_t* ql, const std::uint8_t* qh, int l, int q[4]) {
  q[0] = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
  q[1] = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
  q[2] = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
  q[3] = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
}
}  // namespace

void dequantize_q6_k(const BlockQ6_K* x, float* y, std::size_t count) {
  for (std::size_t b = 0; b < count / kQkK; ++b) {
    const float d = fp16_to_fp32(x[b].d);
    const std::uint8_t* ql = x[b].ql;
    const std::uint8_t* qh = x[b].qh;
    const std::int8_t* sc = x[b].scales;
    for (int n = 0; n < kQkK; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        int q[4];
        q6_k_quad(ql, qh, l, q);
        const int is = l / 16;
        for (int k = 0; k < 4; ++k) y[l + 32 * k] = d * sc[is + 2 * k] * static_cast<float>(q[k]);
      }
    }
  }
}

void dequantize_q8_k(const BlockQ8_K* x, float* y, std::size_t count) {
  for (std::size_t b = 0; b < count / kQkK; ++b) {
    for (int j = 0; j < kQkK; ++j) *y++ = x[b].d * x[b].qs[j];
  }
}

void dequantize_f16(const std::uint16_t* x, float* y, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) y[i] = fp16_to_fp32(x[i]);
}

void dequantize_bf16(const std::uint16_t* x, float* y, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) y[i] = bf16_to_fp32(x[i]);
}

float dot_q8_0(const BlockQ8_0* w, const BlockQ8_0* x, std::size_t count) {
  float sum = 0;
  for (std::size_t b = 0; b < count / kQk; ++b) {
    int isum = 0;
    for (int j = 0; j < kQk; ++j) isum += w[b].qs[j] * x[b].qs[j];
    sum += static_cast<float>(isum) * (fp16_to_fp32(w[b].d) * fp16_to_fp32(x[b].d));
  }
  return sum;
}

float dot_q4_0(const BlockQ4_0* w, const BlockQ8_0* x, std::size_t count) {
  float sum = 0;
  for (std::size_t b = 0; b < count / kQk; ++b) {
    int isum = 0;
    for (int j = 0; j < kQk / 2; ++j) {
      isum += ((w[b].qs[j] & 0xF) - 8) * x[b].qs[j];
      isum += ((w[b].qs[j] >> 4) - 8) * x[b].qs[j + kQk / 2];
    }
    sum += static_cast<float>(isum) * (fp16_to_fp32(w[b].d) * fp16_to_fp32(x[b].d));
  }
  return sum;
}

float dot_q5_0(const BlockQ5_0* w, const BlockQ8_0* x, std::size_t count) {
  float sum = 0;
  for (std::size_t b = 0; b < count / kQk; ++b) {
    int isum = 0;
    for (int j = 0; j < kQk; ++j) isum += (unsigned_quant(w[b], j) - 16) * x[b].qs[j];
    sum += static_cast<float>(isum) * (fp16_to_fp32(w[b].d) * fp16_to_fp32(x[b].d));
  }
  return sum;
}

namespace {
// d * sum_j scale_j * dot_j - dmin * sum_j min_j * sum(x in sub-block j), the form both Q4_K and
// Q5_K reduce to once their quants are unpacked.
float k_quant_combine(const BlockQ8_K& x, const std::uint8_t* packed_scales, std::uint16_t d16, std::uint16_t dmin16,
                      const int* sub_dots) {
  int isum = 0;
  int msum = 0;
  for (int j = 0; j < 8; ++j) {
    std::uint8_t sc = 0;
    std::uint8_t m = 0;
    unpack_scale_min_k4(j, packed_scales, sc, m);
    isum += sc * sub_dots[j];
    msum += m * (x.bsums[2 * j] + x.bsums[2 * j + 1]);
  }
  return fp16_to_fp32(d16) * x.d * static_cast<float>(isum) - fp16_to_fp32(dmin16) * x.d * static_cast<float>(msum);
}
}  // namespace

float dot_q4_k(const BlockQ4_K* w, const BlockQ8_K* x, std::size_t count) {
  float sum = 0;
  for (std::size_t b = 0; b < count / kQkK; ++b) {
    int sub[8] = {};
    for (int j = 0; j < 4; ++j) {
      for (int l = 0; l < 32; ++l) {
        const std::uint8_t q = w[b].qs[32 * j + l];
        sub[2 * j] += (q & 0xF) * x[b].qs[64 * j + l];
        sub[2 * j + 1] += (q >> 4) * x[b].qs[64 * j + 32 + l];
      }
    }
    sum += k_quant_combine(x[b], w[b].scales, w[b].d, w[b].dmin, sub);
  }
  return sum;
}

float dot_q5_k(const BlockQ5_K* w, const BlockQ8_K* x, std::size_t count) {
  float sum = 0;
  for (std::size_t b = 0; b < count / kQkK; ++b) {
    int sub[8] = {};
    for (int j = 0; j < 4; ++j) {
      for (int l = 0; l < 32; ++l) {
        const std::uint8_t q = w[b].qs[32 * j + l];
        const std::uint8_t h = w[b].qh[l];
        const int lo = (q & 0xF) | (((h >> (2 * j)) & 1) << 4);
        const int hi = (q >> 4) | (((h >> (2 * j + 1)) & 1) << 4);
        sub[2 * j] += lo * x[b].qs[64 * j + l];
        sub[2 * j + 1] += hi * x[b].qs[64 * j + 32 + l];
      }
    }
    sum += k_quant_combine(x[b], w[b].scales, w[b].d, w[b].dmin, sub);
  }
  return sum;
}

float dot_q6_k(const BlockQ6_K* w, const BlockQ8_K* x, std::size_t count) {
  float sum = 0;
  for (std::size_t b = 0; b < count / kQkK; ++b) {
    int group[16] = {};
    for (int half = 0; half < 2; ++half) {
      const std::uint8_t* ql = w[b].ql + 64 * half;
      const std::uint8_t* qh = w[b].qh + 32 * half;
      const std::int8_t* xq = x[b].qs + 128 * half;
      for (int l = 0; l < 32; ++l) {
        int q[4];
        q6_k_quad(ql, qh, l, q);
        for (int k = 0; k < 4; ++k) group[8 * half + 2 * k + l / 16] += q[k] * xq[l + 32 * k];
      }
    }
    int isum = 0;
    for (int g = 0; g < 16; ++g) isum += w[b].scales[g] * group[g];
    sum += fp16_to_fp32(w[b].d) * x[b].d * static_cast<float>(isum);
  }
  return sum;
}

float dot_f32(const float* w, const float* x, std::size_t count) {
  double sum = 0;  // the reference accumulates in double so it is the accurate side of every comparison
  for (std::size_t i = 0; i < count; ++i) sum += static_cast<double>(w[i]) * static_cast<double>(x[i]);
  return static_cast<float>(sum);
}

float dot_f16(const std::uint16_t* w, const float* x, std::size_t count) {
  double sum = 0;
  for (std::size_t i = 0; i < count; ++i) sum += static_cast<double>(fp16_to_fp32(w[i])) * static_cast<double>(x[i]);
  return static_cast<float>(sum);
}

float dot_bf16(const std::uint16_t* w, const float* x, std::size_t count) {
  double sum = 0;
  for (std::size_t i = 0; i < count; ++i) sum += static_cast<double>(bf16_to_fp32(w[i])) * static_cast<double>(x[i]);
  return static_cast<float>(sum);
}

}  // namespace infercast::reference
