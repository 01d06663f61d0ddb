// Host stand-in for cuda_fp16.h (andrea_edu/kernels/host_sim, the CPU simulator): IEEE binary16, round to nearest even.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
struct __half { uint16_t bits = 0; };
inline float __half2float(__half h) {
  const uint32_t s = (h.bits & 0x8000u) << 16, e = (h.bits >> 10) & 0x1f, m = h.bits & 0x3ff;
  float f;
  if (e == 0) f = std::ldexp((float)m, -24);                      // zero and subnormals
  else if (e == 31) f = m ? NAN : INFINITY;
  else f = std::ldexp((float)(m | 0x400), (int)e - 25);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u |= s;
  std::memcpy(&f, &u, 4);
  return f;
}
inline __half __float2half(float f) {
  __half h;
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  float a = std::fabs(f);
  if (std::isnan(f)) { h.bits = 0x7e00; return h; }
  if (a >= 65520.f) { h.bits = sign | 0x7c00; return h; }      // rounds to infinity
  int e;
  std::frexp(a, &e);                                            // a = frac * 2^e, frac in [0.5, 1)
  const int exp = std::max(e - 1, -14);                         // binary16 exponent (>= -14)
  const float q = std::nearbyint(std::ldexp(a, 10 - exp));      // 11 significant bits, RNE
  const uint32_t mant = (uint32_t)q;
  uint32_t bits = (mant >= 0x400) ? ((uint32_t)(exp + 15) << 10) + (mant - 0x400) : mant;
  if (mant == 0x800) bits = (uint32_t)(exp + 16) << 10;         // rounded up to the next power
  h.bits = (uint16_t)(sign | bits);
  return h;
}
