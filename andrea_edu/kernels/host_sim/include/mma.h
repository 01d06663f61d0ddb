// Host stand-in for mma.h's WMMA API (andrea_edu/kernels/host_sim, the CPU simulator). Each lane holds the whole 16x16
// tile (a legal choice: the fragment layout is opaque), loads read the whole tile, and a store
// writes only the elements e with e % 32 == lane, so a reader that skips __syncwarp sees holes.
// Pointer alignment (32 bytes) and ldm (multiple of 16 bytes) are checked as CUDA requires.
#pragma once
#include <cstdint>
#include <type_traits>
#include "cuda_fp16.h"
#include "cuda_bf16.h"
namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

inline float tof(float x) { return x; }
inline float tof(__half x) { return __half2float(x); }
inline float tof(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment { float x[16 * 16]; };            // (row, col) at x[row * 16 + col]

template <typename P> inline void check(const P* p, unsigned ldm) {
  if (reinterpret_cast<uintptr_t>(p) % 32) ::sim::fail("WMMA pointer not 32-byte aligned");
  if ((ldm * sizeof(P)) % 16) ::sim::fail("WMMA ldm not a multiple of 16 bytes");
}
template <typename Use, typename T, typename L>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, L>& f, const T* p, unsigned ldm) {
  check(p, ldm);
  const bool rows = std::is_same<L, row_major>::value;
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) f.x[r * 16 + c] = tof(rows ? p[r * ldm + c] : p[c * ldm + r]);
}
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p,
                             unsigned ldm, layout_t l) {
  check(p, ldm);
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) f.x[r * 16 + c] = l == mem_row_major ? p[r * ldm + c] : p[c * ldm + r];
}
inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f,
                              unsigned ldm, layout_t l) {
  check(p, ldm);
  const int lane = ::sim::cur()->lane;
  for (int e = lane; e < 256; e += 32) {
    const int r = e / 16, c = e % 16;
    (l == mem_row_major ? p[r * ldm + c] : p[c * ldm + r]) = f.x[e];
  }
}
template <typename Use, typename T, typename L>
inline void fill_fragment(fragment<Use, 16, 16, 16, T, L>& f, float v) {
  for (float& x : f.x) x = v;
}
template <typename T, typename LA, typename LB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float>& d,
                     const fragment<matrix_a, 16, 16, 16, T, LA>& a,
                     const fragment<matrix_b, 16, 16, 16, T, LB>& b,
                     const fragment<accumulator, 16, 16, 16, float>& c) {
  float out[256];
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 16; ++n) {
      float s = c.x[r * 16 + n];
      for (int k = 0; k < 16; ++k) s += a.x[r * 16 + k] * b.x[k * 16 + n];
      out[r * 16 + n] = s;
    }
  for (int i = 0; i < 256; ++i) d.x[i] = out[i];
}
}  // namespace wmma
}  // namespace nvcuda
