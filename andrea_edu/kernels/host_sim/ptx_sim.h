// ptx_sim.h: the PTX layer of andrea_edu/kernels/attention_v3_flash.cu, emulated on the CPU
// (andrea_edu/kernels/host_sim, the CPU simulator). The kernel is compiled with -DANDREA_PTX_EMULATED -include ptx_sim.h:
// its own inline-asm functions are then left out and these take their place, with the same
// names and signatures (namespace andrea::ptx).
//
// Each warp-wide instruction is emulated the way the hardware defines it: every lane publishes
// its operands, the warp meets at a barrier (lanes resume in a random order), each lane computes
// what the PTX ISA says it receives, and the warp meets again before the slots are reused.
// Register contents follow the ISA's fragment tables (cited at each function); the tables live
// in sim::frag below, and tests/test_ptx_layouts.py checks them against the ISA independently.
//
// What is checked on top: ldmatrix row addresses and cp.async destinations lie in the shared
// buffer and are 16-byte aligned, cp.async sources are 16-byte aligned, and a cp.async copy is
// invisible until its group is waited for: its destination reads NaN (0xffff) from the moment
// the copy is issued, and the copy itself happens at the cp.async.wait_group that completes its
// group. So a missing wait, or a barrier missing between the wait and another thread's read,
// shows as NaN or stale data; so does issuing a copy into a buffer another warp still reads.
#pragma once
#undef _FORTIFY_SOURCE  // glibc's checked longjmp refuses a jump onto a fiber's stack (sim.h)
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include "sim.h"
#include "cuda_fp16.h"
#include "cuda_bf16.h"

struct alignas(16) uint4 { unsigned x, y, z, w; };

namespace sim {
namespace frag {

struct RC { int row, col; };

// PTX ISA, section "Matrix Fragments for mma.m16n8k16 with floating point type".
// groupID = %laneid >> 2, threadID_in_group = %laneid % 4.
// A (16 x 16, .row), elements a0..a7 (two per .b32 register, a0 in the low half of the first):
//   row = groupID for a0, a1, a4, a5; groupID + 8 for a2, a3, a6, a7
//   col = threadID_in_group * 2 + (i & 1), plus 8 for a4..a7
inline RC a_elem(int lane, int i) {
  const int g = lane >> 2, t = lane & 3;
  return {g + ((i & 2) ? 8 : 0), t * 2 + (i & 1) + (i >= 4 ? 8 : 0)};
}
// B (16 x 8, .col), elements b0..b3: row (k) = threadID_in_group * 2 + (i & 1), plus 8 for
// b2, b3; col (n) = groupID.
inline RC b_elem(int lane, int i) {
  const int g = lane >> 2, t = lane & 3;
  return {t * 2 + (i & 1) + (i >= 2 ? 8 : 0), g};
}
// C and D (16 x 8, .f32), elements c0..c3: row = groupID for c0, c1, groupID + 8 for c2, c3;
// col = threadID_in_group * 2 + (i & 1).
inline RC c_elem(int lane, int i) {
  const int g = lane >> 2, t = lane & 3;
  return {g + (i >= 2 ? 8 : 0), t * 2 + (i & 1)};
}

// Inverse tables built from the three functions above: which (lane, element) holds (row, col).
struct Where { int lane, elem; };
struct Tables {
  Where a[16][16], b[16][8], c[16][8];
  Tables() {
    for (int lane = 0; lane < 32; ++lane) {
      for (int i = 0; i < 8; ++i) { const RC p = a_elem(lane, i); a[p.row][p.col] = {lane, i}; }
      for (int i = 0; i < 4; ++i) { const RC p = b_elem(lane, i); b[p.row][p.col] = {lane, i}; }
      for (int i = 0; i < 4; ++i) { const RC p = c_elem(lane, i); c[p.row][p.col] = {lane, i}; }
    }
  }
};
inline const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace frag

// Per-warp exchange slots (blocks run one at a time; at most 32 warps per block).
struct MmaSlot { unsigned a[4], b[2]; float c[4]; };
inline MmaSlot g_mma[32][32];
inline const void* g_ldm[32][32];

inline float half_bits_to_float(uint16_t bits, bool bf16) {
  if (bf16) { __nv_bfloat16 x; x.bits = bits; return __bfloat162float(x); }
  __half x; x.bits = bits; return __half2float(x);
}

inline bool in_smem(const void* p, size_t bytes) {
  const char* c = static_cast<const char*>(p);
  const char* s = static_cast<const char*>(g_smem);
  return g_smem && c >= s && c + bytes <= s + g_smem_bytes;
}

// mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32: D = A B + C, fp32 sums.
template <bool BF16> inline void mma_16816(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                           unsigned b1) {
  Thread* th = cur();
  MmaSlot& mine = g_mma[th->warp][th->lane];
  for (int i = 0; i < 4; ++i) mine.a[i] = a[i];
  mine.b[0] = b0;
  mine.b[1] = b1;
  for (int i = 0; i < 4; ++i) mine.c[i] = d[i];
  warp_barrier();                                  // every lane has published its registers
  const frag::Tables& tb = frag::tables();
  MmaSlot* w = g_mma[th->warp];
  auto elem16 = [&](const unsigned* regs, int e) {  // element e of a .b32 register array
    return half_bits_to_float(uint16_t(regs[e >> 1] >> (16 * (e & 1))), BF16);
  };
  float out[4];
  for (int i = 0; i < 4; ++i) {
    const frag::RC p = frag::c_elem(th->lane, i);
    const frag::Where wc = tb.c[p.row][p.col];
    float acc = w[wc.lane].c[wc.elem];
    for (int kk = 0; kk < 16; ++kk) {
      const frag::Where wa = tb.a[p.row][kk], wb = tb.b[kk][p.col];
      acc += elem16(w[wa.lane].a, wa.elem) * elem16(w[wb.lane].b, wb.elem);
    }
    out[i] = acc;
  }
  warp_barrier();                                  // every lane has read before slots change
  for (int i = 0; i < 4; ++i) d[i] = out[i];
}

// ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{,.trans}.shared.b16. PTX ISA, section "Warp-level
// matrix load instruction: ldmatrix": threads 8i .. 8i+7 give the addresses of rows 0..7 of
// matrix i (x1 uses threads 0-7, x2 threads 0-15, x4 all 32); each row is 8 contiguous 16-bit
// elements, 16-byte aligned. Lane l receives in register i the elements (l/4, 2(l%4)) and
// (l/4, 2(l%4)+1) of matrix i; with .trans, the elements (2(l%4), l/4) and (2(l%4)+1, l/4).
template <int N, bool TRANS> inline void ldmatrix(unsigned* r, const void* p) {
  static_assert(N == 1 || N == 2 || N == 4, "ldmatrix loads 1, 2 or 4 matrices");
  Thread* th = cur();
  g_ldm[th->warp][th->lane] = p;
  warp_barrier();
  const int l = th->lane;
  auto row_ptr = [&](int src_lane) {
    const void* a = g_ldm[th->warp][src_lane];
    if (reinterpret_cast<uintptr_t>(a) % 16) fail("ldmatrix row address not 16-byte aligned");
    if (!in_smem(a, 16)) fail("ldmatrix row address outside shared memory");
    return static_cast<const uint16_t*>(a);
  };
  unsigned out[N];
  for (int i = 0; i < N; ++i) {
    uint16_t lo, hi;
    if (!TRANS) {
      const uint16_t* row = row_ptr(8 * i + l / 4);
      lo = row[2 * (l % 4)];
      hi = row[2 * (l % 4) + 1];
    } else {
      lo = row_ptr(8 * i + 2 * (l % 4))[l / 4];
      hi = row_ptr(8 * i + 2 * (l % 4) + 1)[l / 4];
    }
    out[i] = unsigned(lo) | (unsigned(hi) << 16);
  }
  warp_barrier();
  for (int i = 0; i < N; ++i) r[i] = out[i];
}

// cp.async.cg.shared.global [dst], [src], 16, src_size. PTX ISA, section "Data Movement and
// Conversion Instructions: cp.async" (+ cp.async.commit_group, cp.async.wait_group): the copy
// is asynchronous; its writes are only guaranteed visible to the issuing thread after a
// wait_group that completes its group (and to other threads after a barrier on top).
inline void cp_async_16(void* dst, const void* src, int src_bytes) {
  if (reinterpret_cast<uintptr_t>(dst) % 16) fail("cp.async destination not 16-byte aligned");
  if (!in_smem(dst, 16)) fail("cp.async destination outside shared memory");
  if (src_bytes && reinterpret_cast<uintptr_t>(src) % 16)
    fail("cp.async source not 16-byte aligned");
  std::memset(dst, 0xff, 16);                      // undefined until waited for: NaN
  cur()->cp_open.push_back({dst, src, src_bytes});
}
inline void cp_async_commit() {
  Thread* th = cur();
  th->cp_groups.push_back(std::move(th->cp_open));
  th->cp_open.clear();
}
inline void cp_async_wait(int n) {
  Thread* th = cur();
  while ((int)th->cp_groups.size() > n) {
    for (const AsyncCopy& c : th->cp_groups.front()) {
      std::memset(c.dst, 0, 16);
      if (c.src_bytes) std::memcpy(c.dst, c.src, c.src_bytes);
    }
    th->cp_groups.erase(th->cp_groups.begin());
  }
}

inline uint16_t bits_of(float x, bool bf16) {
  return bf16 ? __float2bfloat16(x).bits : __float2half(x).bits;
}

}  // namespace sim

// The kernel-facing functions, with the names and signatures of attention_v3_flash.cu's PTX layer.
namespace andrea {
namespace ptx {

inline void cp_async_16(void* dst, const void* src, bool valid) {
  ::sim::cp_async_16(dst, src, valid ? 16 : 0);
}
inline void cp_async_commit() { ::sim::cp_async_commit(); }
template <int N> inline void cp_async_wait() { ::sim::cp_async_wait(N); }

inline void ldmatrix_x1(unsigned (&r)[1], const void* p) { ::sim::ldmatrix<1, false>(r, p); }
inline void ldmatrix_x2(unsigned (&r)[2], const void* p) { ::sim::ldmatrix<2, false>(r, p); }
inline void ldmatrix_x4(unsigned (&r)[4], const void* p) { ::sim::ldmatrix<4, false>(r, p); }
inline void ldmatrix_x1_trans(unsigned (&r)[1], const void* p) { ::sim::ldmatrix<1, true>(r, p); }
inline void ldmatrix_x2_trans(unsigned (&r)[2], const void* p) { ::sim::ldmatrix<2, true>(r, p); }
inline void ldmatrix_x4_trans(unsigned (&r)[4], const void* p) { ::sim::ldmatrix<4, true>(r, p); }

template <typename T> inline void mma_16816(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                            unsigned b1) {
  static_assert(std::is_same<T, __half>::value || std::is_same<T, __nv_bfloat16>::value,
                "mma.m16n8k16 takes f16 or bf16 here");
  ::sim::mma_16816<std::is_same<T, __nv_bfloat16>::value>(d, a, b0, b1);
}

// cvt.rn.{f16x2,bf16x2}.f32: round to nearest even; lo in bits 0-15.
template <typename T> inline unsigned pack2(float lo, float hi) {
  const bool bf = std::is_same<T, __nv_bfloat16>::value;
  return unsigned(::sim::bits_of(lo, bf)) | (unsigned(::sim::bits_of(hi, bf)) << 16);
}

// ex2.approx.ftz.f32: 2^x, results below the smallest normal flushed to +0.
inline float exp2_approx(float x) {
  const float y = std::exp2(x);
  return y < FLT_MIN ? 0.f : y;
}

}  // namespace ptx
}  // namespace andrea
