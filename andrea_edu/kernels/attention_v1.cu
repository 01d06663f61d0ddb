// attention_v1.cu: scaled dot-product attention over all heads in one launch.
// Part of andrea_edu (chapter "One kernel, many heads"); compiled at run time by NVRTC
// (andrea_edu/kernels/nvrtc.py), described by its spec andrea_edu/kernels/v1.py and mirrored
// step by step on the CPU by andrea_edu/kernels/emulator.py.
//
// Versions in this file
// ---------------------
// attention_v1  "one block per (batch, head)", as the source text describes.
//   idea:   the block's 128 threads (4 warps) cooperate on one head's seq_len x head_dim tile.
//           Queries are taken 16 rows at a time (4 rows per warp); keys and values stream
//           through shared memory 32 rows at a time (one key per lane); an online (streaming)
//           softmax keeps a running max m and running sum l per query row, so the T x T score
//           matrix never exists.
//   grid:   gridDim = (B * nh); blockIdx.x = b * nh + h. blockDim = 128.
//           For B=8, nh=12 that is 96 blocks: fewer than an H200's 132 SMs (see v2).
//   limits: contiguous [B, nh, T, hs] inputs; fp32, fp16 or bf16 in, fp32 math, output in the
//           input dtype; any seq_len >= 1; head_dim 1..256 (runtime argument; the template
//           parameter CHUNKS >= ceil(head_dim / 32) sizes each lane's accumulators, and
//           andrea_edu compiles CHUNKS = 1, 2, 4, 8);
//           causal or not (runtime argument). Dynamic shared memory
//           4 * (BR*HDP + BC*(HDP+1) + BC*HDP) bytes with HDP = 32*CHUNKS: 41 KB at
//           head_dim 128, 82 KB at 256 (above 48 KB the launcher opts in).
//   speed:  not yet measured on a GPU. Expected to be slow: scalar FMAs, one warp shuffle per
//           key per row, no tensor cores. It is the readable baseline and the fallback.
//
// Algorithm per block (the emulator's `kernels/v1.py: emulate_block` follows the same loops):
//   for q0 in 0, BR, 2BR, ... < T:                      query tile
//     stage Q[q0 : q0+BR, :] in shared memory (zero-filled past T and past head_dim)
//     m = -inf, l = 0, acc = 0                          per query row
//     for k0 in 0, BC, ... < kv_end:                    kv_end = T, or min(T, q0+BR) if causal
//       stage K, V[k0 : k0+BC, :] in shared memory
//       s_j   = (q . k_j) * scale, or -inf when j >= T or (causal and j > i)
//       m_new = max(m, max_j s_j)
//       p_j   = exp(s_j - m_new)          (0 for masked j)
//       alpha = exp(m - m_new)            (rescales what was summed under the old max)
//       l     = alpha * l + sum_j p_j;  acc = alpha * acc + sum_j p_j v_j;  m = m_new
//     out[i] = acc / l
// Every query row sees key 0 in its first tile (0 <= i always), so m is finite after the
// first tile; the guard below still keeps a fully masked row from producing exp(-inf - -inf).

#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <math_constants.h>  // CUDART_INF_F

#ifndef ANDREA_SMEM_BYTES  // the dynamic shared memory of one block, from the kernel's spec
#error "compile with -DANDREA_SMEM_BYTES=<bytes> (andrea_edu.kernels.nvrtc passes KernelSpec.shared_bytes)"
#endif

namespace andrea {

constexpr int V1_WARPS = 4;                      // warps per block
constexpr int V1_THREADS = 32 * V1_WARPS;        // 128 threads
constexpr int V1_ROWS_PER_WARP = 4;              // query rows each warp owns per query tile
constexpr int V1_BR = V1_WARPS * V1_ROWS_PER_WARP;  // 16 query rows per tile
constexpr int V1_BC = 32;                        // keys per K/V tile: one per lane

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16(x);
}

__device__ __forceinline__ float warp_max(float x) {
  for (int off = 16; off > 0; off >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, off));
  return x;
}
__device__ __forceinline__ float warp_sum(float x) {
  for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}

// q, k, v, out: contiguous [B, nh, T, hs]; T = seq_len, hs = head_dim <= 32 * CHUNKS.
template <typename T, int CHUNKS>
__global__ void __launch_bounds__(V1_THREADS)
attention_v1(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
             T* __restrict__ out, int seq_len, int head_dim, float scale, int causal) {
  constexpr int HDP = 32 * CHUNKS;               // head_dim padded to whole lanes
  extern __shared__ float smem[];
  float* sQ = smem;                              // [BR][HDP]
  float* sK = sQ + V1_BR * HDP;                  // [BC][HDP + 1]: +1 so lane j's row j hits bank j
  float* sV = sK + V1_BC * (HDP + 1);            // [BC][HDP]
  static_assert(sizeof(float) * (V1_BR * HDP + V1_BC * (HDP + 1) + V1_BC * HDP) == ANDREA_SMEM_BYTES,
                "carve-up != the bytes the launcher requests (KernelSpec.shared_bytes, kernels/v1.py)");

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const long long base = (long long)blockIdx.x * seq_len * head_dim;  // this (b, h)'s tile
  const T* qh = q + base;
  const T* kh = k + base;
  const T* vh = v + base;
  T* oh = out + base;

  for (int q0 = 0; q0 < seq_len; q0 += V1_BR) {
    __syncthreads();                             // previous query tile done with sQ
    for (int idx = tid; idx < V1_BR * HDP; idx += V1_THREADS) {
      const int r = idx / HDP, d = idx % HDP, i = q0 + r;
      sQ[idx] = (i < seq_len && d < head_dim) ? to_float(qh[(long long)i * head_dim + d]) : 0.f;
    }
    float m[V1_ROWS_PER_WARP], l[V1_ROWS_PER_WARP], acc[V1_ROWS_PER_WARP][CHUNKS];
#pragma unroll
    for (int r = 0; r < V1_ROWS_PER_WARP; ++r) {
      m[r] = -CUDART_INF_F;
      l[r] = 0.f;
#pragma unroll
      for (int c = 0; c < CHUNKS; ++c) acc[r][c] = 0.f;
    }
    const int kv_end = causal ? min(seq_len, q0 + V1_BR) : seq_len;

    for (int k0 = 0; k0 < kv_end; k0 += V1_BC) {
      __syncthreads();                           // everyone done reading the previous K/V tile
      for (int idx = tid; idx < V1_BC * HDP; idx += V1_THREADS) {
        const int r = idx / HDP, d = idx % HDP, j = k0 + r;
        const bool in = j < seq_len && d < head_dim;
        const long long g = (long long)j * head_dim + d;
        sK[r * (HDP + 1) + d] = in ? to_float(kh[g]) : 0.f;
        sV[r * HDP + d] = in ? to_float(vh[g]) : 0.f;
      }
      __syncthreads();                           // tiles (and sQ) visible to every warp
      const int n_keys = min(V1_BC, seq_len - k0);  // uniform across the block
      const int j = k0 + lane;                   // the key this lane scores

#pragma unroll
      for (int r = 0; r < V1_ROWS_PER_WARP; ++r) {
        const int rr = warp * V1_ROWS_PER_WARP + r;  // row inside the query tile
        const int i = q0 + rr;                   // query row (may be >= seq_len: never written)
        float s = 0.f;
        for (int d = 0; d < head_dim; ++d) s += sQ[rr * HDP + d] * sK[lane * (HDP + 1) + d];
        const bool valid = j < seq_len && (!causal || j <= i);
        s = valid ? s * scale : -CUDART_INF_F;
        const float m_new = fmaxf(m[r], warp_max(s));
        const float m_use = (m_new == -CUDART_INF_F) ? 0.f : m_new;  // fully masked so far
        const float p = valid ? expf(s - m_use) : 0.f;
        const float alpha = expf(m[r] - m_use);  // exp(-inf) = 0 on the first tile
        l[r] = alpha * l[r] + warp_sum(p);
#pragma unroll
        for (int c = 0; c < CHUNKS; ++c) acc[r][c] *= alpha;
        for (int jj = 0; jj < n_keys; ++jj) {
          const float pj = __shfl_sync(0xffffffffu, p, jj);  // key jj's weight, from lane jj
#pragma unroll
          for (int c = 0; c < CHUNKS; ++c) acc[r][c] += pj * sV[jj * HDP + c * 32 + lane];
        }
        m[r] = m_new;
      }
    }

#pragma unroll
    for (int r = 0; r < V1_ROWS_PER_WARP; ++r) {
      const int i = q0 + warp * V1_ROWS_PER_WARP + r;
      if (i >= seq_len) continue;
      const float inv_l = 1.f / l[r];            // l >= 1: the row's max term is exp(0)
#pragma unroll
      for (int c = 0; c < CHUNKS; ++c) {
        const int d = c * 32 + lane;
        if (d < head_dim) oh[(long long)i * head_dim + d] = from_float<T>(acc[r][c] * inv_l);
      }
    }
  }
}

}  // namespace andrea
