// Host stand-in for cuda_bf16.h (andrea_edu/kernels/host_sim, the CPU simulator): bfloat16, round to nearest even.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
struct __nv_bfloat16 { uint16_t bits = 0; };
inline float __bfloat162float(__nv_bfloat16 b) {
  uint32_t u = (uint32_t)b.bits << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline __nv_bfloat16 __float2bfloat16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  __nv_bfloat16 b;
  if (std::isnan(f)) { b.bits = 0x7fc0; return b; }
  u += 0x7fffu + ((u >> 16) & 1u);                              // round to nearest even
  b.bits = (uint16_t)(u >> 16);
  return b;
}
