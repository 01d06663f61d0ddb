// attention_v4_split.cu: kernel v1's algorithm, one block per (batch, head, query tile).
// A fourth rung that lives outside the package: tests/test_kernel_registry.py copies this file
// and its spec (tests/fourth_rung/v4.py) into a temporary package and registers it, to show
// that a new kernel version is a .cu file, a spec module and one registry line.
//
// Versions in this file
// ---------------------
// attention_v4_split  v1's scalar online softmax, split over query tiles.
//   idea:   the same lane-per-key loops as v1, but a block takes one query tile of 16 rows
//           (2 warps of 8 rows) instead of walking all of them, so a (batch, head) pair is
//           spread over ceil(T / 16) blocks and small batches still fill the SMs.
//   grid:   gridDim = (B * nh, ceil(T / 16)); blockIdx.x = b * nh + h, blockIdx.y = query
//           tile. blockDim = 64.
//   limits: contiguous [B, nh, T, hs] inputs; fp32, fp16 or bf16 in, fp32 math; any
//           seq_len >= 1; head_dim 1..256 (CHUNKS = 1, 2, 4, 8 as v1); causal or not.
//   speed:  not measured on a GPU: a test's rung, written to prove the registry.
//
// Algorithm per block:
//   q0 = blockIdx.y * BQ; stage Q[q0 : q0+BQ, :]
//   for k0 in 0, BK, ... < kv_end:                    kv_end = T, or min(T, q0+BQ) if causal
//     stage K, V[k0 : k0+BK, :]; one online-softmax step per query row (as v1)
//   out[i] = acc / l

#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <math_constants.h>  // CUDART_INF_F

#ifndef ANDREA_SMEM_BYTES  // the dynamic shared memory of one block, from the kernel's spec
#error "compile with -DANDREA_SMEM_BYTES=<bytes> (andrea_edu.kernels.nvrtc passes KernelSpec.shared_bytes)"
#endif

namespace andrea {

constexpr int V4_WARPS = 2;                      // warps per block
constexpr int V4_THREADS = 32 * V4_WARPS;        // 64 threads
constexpr int V4_ROWS_PER_WARP = 8;              // query rows each warp owns
constexpr int V4_BQ = V4_WARPS * V4_ROWS_PER_WARP;  // 16 query rows: the block's query tile
constexpr int V4_BK = 32;                        // keys per K/V tile: one per lane

__device__ __forceinline__ float v4_float(float x) { return x; }
__device__ __forceinline__ float v4_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float v4_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T v4_from(float x);
template <> __device__ __forceinline__ float v4_from<float>(float x) { return x; }
template <> __device__ __forceinline__ __half v4_from<__half>(float x) { return __float2half(x); }
template <> __device__ __forceinline__ __nv_bfloat16 v4_from<__nv_bfloat16>(float x) {
  return __float2bfloat16(x);
}

__device__ __forceinline__ float v4_warp_max(float x) {
  for (int off = 16; off > 0; off >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, off));
  return x;
}
__device__ __forceinline__ float v4_warp_sum(float x) {
  for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}

// q, k, v, out: contiguous [B, nh, T, hs]; T = seq_len, hs = head_dim <= 32 * CHUNKS.
template <typename T, int CHUNKS>
__global__ void __launch_bounds__(V4_THREADS)
attention_v4_split(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                   T* __restrict__ out, int seq_len, int head_dim, float scale, int causal) {
  constexpr int HDP = 32 * CHUNKS;               // head_dim padded to whole lanes
  extern __shared__ float smem[];
  float* sQ = smem;                              // [BQ][HDP]
  float* sK = sQ + V4_BQ * HDP;                  // [BK][HDP + 1]: lane j's row j hits bank j
  float* sV = sK + V4_BK * (HDP + 1);            // [BK][HDP]
  static_assert(sizeof(float) * (V4_BQ * HDP + V4_BK * (HDP + 1) + V4_BK * HDP) == ANDREA_SMEM_BYTES,
                "carve-up != the bytes the launcher requests (KernelSpec.shared_bytes, v4.py)");

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const long long base = (long long)blockIdx.x * seq_len * head_dim;  // this (b, h)'s tile
  const T* qh = q + base;
  const T* kh = k + base;
  const T* vh = v + base;
  T* oh = out + base;
  const int q0 = blockIdx.y * V4_BQ;             // this block's query tile

  for (int idx = tid; idx < V4_BQ * HDP; idx += V4_THREADS) {
    const int r = idx / HDP, d = idx % HDP, i = q0 + r;
    sQ[idx] = (i < seq_len && d < head_dim) ? v4_float(qh[(long long)i * head_dim + d]) : 0.f;
  }
  float m[V4_ROWS_PER_WARP], l[V4_ROWS_PER_WARP], acc[V4_ROWS_PER_WARP][CHUNKS];
#pragma unroll
  for (int r = 0; r < V4_ROWS_PER_WARP; ++r) {
    m[r] = -CUDART_INF_F;
    l[r] = 0.f;
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) acc[r][c] = 0.f;
  }
  const int kv_end = causal ? min(seq_len, q0 + V4_BQ) : seq_len;

  for (int k0 = 0; k0 < kv_end; k0 += V4_BK) {
    __syncthreads();                             // everyone done reading the previous K/V tile
    for (int idx = tid; idx < V4_BK * HDP; idx += V4_THREADS) {
      const int r = idx / HDP, d = idx % HDP, j = k0 + r;
      const bool in = j < seq_len && d < head_dim;
      const long long g = (long long)j * head_dim + d;
      sK[r * (HDP + 1) + d] = in ? v4_float(kh[g]) : 0.f;
      sV[r * HDP + d] = in ? v4_float(vh[g]) : 0.f;
    }
    __syncthreads();                             // tiles (and sQ) visible to every warp
    const int n_keys = min(V4_BK, seq_len - k0);
    const int j = k0 + lane;                     // the key this lane scores

#pragma unroll
    for (int r = 0; r < V4_ROWS_PER_WARP; ++r) {
      const int rr = warp * V4_ROWS_PER_WARP + r;
      const int i = q0 + rr;                     // query row (may be >= seq_len: never written)
      float s = 0.f;
      for (int d = 0; d < head_dim; ++d) s += sQ[rr * HDP + d] * sK[lane * (HDP + 1) + d];
      const bool valid = j < seq_len && (!causal || j <= i);
      s = valid ? s * scale : -CUDART_INF_F;
      const float m_new = fmaxf(m[r], v4_warp_max(s));
      const float m_use = (m_new == -CUDART_INF_F) ? 0.f : m_new;
      const float p = valid ? expf(s - m_use) : 0.f;
      const float alpha = expf(m[r] - m_use);
      l[r] = alpha * l[r] + v4_warp_sum(p);
#pragma unroll
      for (int c = 0; c < CHUNKS; ++c) acc[r][c] *= alpha;
      for (int jj = 0; jj < n_keys; ++jj) {
        const float pj = __shfl_sync(0xffffffffu, p, jj);
#pragma unroll
        for (int c = 0; c < CHUNKS; ++c) acc[r][c] += pj * sV[jj * HDP + c * 32 + lane];
      }
      m[r] = m_new;
    }
  }

#pragma unroll
  for (int r = 0; r < V4_ROWS_PER_WARP; ++r) {
    const int i = q0 + warp * V4_ROWS_PER_WARP + r;
    if (i >= seq_len) continue;
    const float inv_l = 1.f / l[r];
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {
      const int d = c * 32 + lane;
      if (d < head_dim) oh[(long long)i * head_dim + d] = v4_from<T>(acc[r][c] * inv_l);
    }
  }
}

}  // namespace andrea
