// attention_v2_wmma.cu: the same attention on tensor cores (WMMA 16x16x16).
// Part of andrea_edu (chapter "The configuration mirrors the hardware"); compiled at run time
// by NVRTC (andrea_edu/kernels/nvrtc.py), described by its spec andrea_edu/kernels/v2.py and
// mirrored step by step on the CPU by andrea_edu/kernels/emulator.py.
//
// Versions in this file
// ---------------------
// attention_v2_wmma  tensor cores, head_dim as a template parameter.
//   idea:   S = Q K^T and O += P V run as 16x16x16 warp matrix multiplies (fp16/bf16 inputs,
//           fp32 accumulators); the online softmax between them runs on fp32 scores in shared
//           memory. P is rounded to the input dtype before P V (the tensor cores take fp16/bf16).
//   grid:   gridDim = (B * nh, ceil(T / 64)); blockIdx.x = b * nh + h, blockIdx.y = query tile.
//           blockDim = 128 (4 warps; each warp owns 16 query rows of the block's 64).
//           Why the extra grid dimension: v1's one block per (batch, head) gives B=8, nh=12 ->
//           96 blocks, fewer than an H200's 132 SMs, so 36 SMs would idle; splitting the
//           queries gives 96 * ceil(T/64) independent blocks (1536 at T=1024).
//   limits: contiguous [B, nh, T, hs]; fp16 or bf16 only (fp32 inputs go to v1: the dispatcher
//           says so); bf16 needs sm_80+; head_dim = HD, a multiple of 16, compiled for
//           16..128 (a tile of 16 cannot cover head_dim = 72: that head_dim goes to v1);
//           any seq_len >= 1 (tails are zero-filled in shared memory and masked); causal or not
//           (runtime argument). Dynamic shared memory (bytes):
//             2*BK*(HD+8)*2 + 4*16*(BK+4)*4 + 4*16*(BK+8)*2 + 4*16*(HD+4)*4,  BK = 32
//           = 40 KB at HD=64, 64 KB at HD=128 (above 48 KB the launcher opts in).
//   speed:  not yet measured on a GPU.
//
// Algorithm per block (the emulator's `kernels/v2.py: emulate_block` follows the same loops):
//   stage Q[q0 : q0+64, :] (zeros past T) and load each warp's 16 x HD Q fragments
//   per query row: m = -inf, l = 0, O = 0 (fp32, shared memory)
//   for k0 in 0, BK, ... < kv_end:                      kv_end = T, or min(T, q0+64) if causal
//     stage K, V[k0 : k0+BK, :] (zeros past T)
//     S (16 x BK per warp) = Q K^T on tensor cores, stored to shared memory as fp32
//     s_j = S_j * scale, or -inf when j >= T or (causal and j > i)
//     m_new = max(m, max_j s_j);  p_j = exp(s_j - m_new);  alpha = exp(m - m_new)
//     l = alpha * l + sum_j p_j;  O = alpha * O;  P = round_to_input_dtype(p)
//     O += P V on tensor cores;  m = m_new
//   out[i] = O[i] / l
// Lane -> row mapping for the softmax and the rescale: lane = 2 * row + half; each lane owns
// half of its row's BK scores and half of its row's HD outputs, so m, l, alpha stay in registers.

#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <math_constants.h>  // CUDART_INF_F
#include <mma.h>

#ifndef ANDREA_SMEM_BYTES  // the dynamic shared memory of one block, from the kernel's spec
#error "compile with -DANDREA_SMEM_BYTES=<bytes> (andrea_edu.kernels.nvrtc passes KernelSpec.shared_bytes)"
#endif

namespace andrea {

using namespace nvcuda;

constexpr int V2_WARPS = 4;
constexpr int V2_THREADS = 32 * V2_WARPS;       // 128 threads
constexpr int V2_BQ = 16 * V2_WARPS;            // 64 query rows per block, 16 per warp
constexpr int V2_BK = 32;                       // keys per K/V tile
constexpr int V2_LDS = V2_BK + 4;               // fp32 score row stride (WMMA: multiple of 4)
constexpr int V2_LDP = V2_BK + 8;               // P row stride (WMMA: multiple of 8 halves)

__device__ __forceinline__ float to_float2(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float2(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ __forceinline__ T from_float2(float x);
template <> __device__ __forceinline__ __half from_float2<__half>(float x) {
  return __float2half(x);
}
template <> __device__ __forceinline__ __nv_bfloat16 from_float2<__nv_bfloat16>(float x) {
  return __float2bfloat16(x);
}

template <typename T, int HD>
__global__ void __launch_bounds__(V2_THREADS)
attention_v2_wmma(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                  T* __restrict__ out, int seq_len, int head_dim, float scale, int causal) {
  static_assert(HD % 16 == 0 && HD >= 16, "HD must be a positive multiple of 16");
  constexpr int LDH = HD + 8;                   // K, V (and staged Q) row stride, in elements
  constexpr int LDO = HD + 4;                   // fp32 output accumulator row stride
  constexpr int HALF_HD = HD / 2;
  (void)head_dim;                               // equals HD: the launcher checks it

  // Every buffer starts on a multiple of 32 bytes, as WMMA load/store pointers require.
  extern __shared__ __align__(128) unsigned char smem[];
  T* sK = reinterpret_cast<T*>(smem);                          // [BK][LDH]
  T* sV = sK + V2_BK * LDH;                                    // [BK][LDH]
  float* sS = reinterpret_cast<float*>(sV + V2_BK * LDH);      // [4][16][LDS]
  T* sP = reinterpret_cast<T*>(sS + V2_WARPS * 16 * V2_LDS);   // [4][16][LDP]
  float* sO = reinterpret_cast<float*>(sP + V2_WARPS * 16 * V2_LDP);  // [4][16][LDO]
  T* sQ = reinterpret_cast<T*>(sO);             // [BQ][LDH], staged before sO is in use
  static_assert(2 * V2_BK * LDH * sizeof(T) + V2_WARPS * 16 * (V2_LDS * sizeof(float) +
                V2_LDP * sizeof(T) + LDO * sizeof(float)) == ANDREA_SMEM_BYTES,
                "carve-up != the bytes the launcher requests (KernelSpec.shared_bytes, kernels/v2.py)");

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int q0 = blockIdx.y * V2_BQ;
  const long long base = (long long)blockIdx.x * seq_len * HD;  // this (b, h)'s tile
  const T* qh = q + base;
  const T* kh = k + base;
  const T* vh = v + base;
  T* oh = out + base;
  const T zero = from_float2<T>(0.f);

  for (int idx = tid; idx < V2_BQ * HD; idx += V2_THREADS) {
    const int r = idx / HD, d = idx % HD, i = q0 + r;
    sQ[r * LDH + d] = (i < seq_len) ? qh[(long long)i * HD + d] : zero;
  }
  __syncthreads();
  wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> qf[HD / 16];
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk)
    wmma::load_matrix_sync(qf[kk], sQ + warp * 16 * LDH + kk * 16, LDH);
  __syncthreads();                              // sQ overlaps sO: all warps hold Q first

  float* sSw = sS + warp * 16 * V2_LDS;         // this warp's scores   [16][LDS]
  T* sPw = sP + warp * 16 * V2_LDP;             // this warp's P        [16][LDP]
  float* sOw = sO + warp * 16 * LDO;            // this warp's output   [16][LDO]
  for (int idx = lane; idx < 16 * LDO; idx += 32) sOw[idx] = 0.f;

  const int r = lane >> 1, half = lane & 1;     // this lane's row and half of it
  const int i = q0 + warp * 16 + r;             // query row (>= seq_len: computed, not written)
  float m = -CUDART_INF_F, l = 0.f;
  const int kv_end = causal ? min(seq_len, q0 + V2_BQ) : seq_len;

  for (int k0 = 0; k0 < kv_end; k0 += V2_BK) {
    __syncthreads();                            // everyone done with the previous K/V tile
    for (int idx = tid; idx < V2_BK * HD; idx += V2_THREADS) {
      const int rr = idx / HD, d = idx % HD, j = k0 + rr;
      const long long g = (long long)j * HD + d;
      sK[rr * LDH + d] = (j < seq_len) ? kh[g] : zero;
      sV[rr * LDH + d] = (j < seq_len) ? vh[g] : zero;
    }
    __syncthreads();

    // S = Q K^T: K stored [key][dim] row-major is K^T in column-major order.
#pragma unroll
    for (int nb = 0; nb < V2_BK / 16; ++nb) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> sf;
      wmma::fill_fragment(sf, 0.f);
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> kf;
        wmma::load_matrix_sync(kf, sK + nb * 16 * LDH + kk * 16, LDH);
        wmma::mma_sync(sf, qf[kk], kf, sf);
      }
      wmma::store_matrix_sync(sSw + nb * 16, sf, V2_LDS, wmma::mem_row_major);
    }
    __syncwarp();

    // Online softmax on row r, columns [half * BK/2, (half + 1) * BK/2).
    float tmax = -CUDART_INF_F;
#pragma unroll
    for (int t = 0; t < V2_BK / 2; ++t) {
      const int c = half * (V2_BK / 2) + t, j = k0 + c;
      const bool valid = j < seq_len && (!causal || j <= i);
      if (valid) tmax = fmaxf(tmax, sSw[r * V2_LDS + c] * scale);
    }
    tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
    const float m_new = fmaxf(m, tmax);
    const float m_use = (m_new == -CUDART_INF_F) ? 0.f : m_new;  // row fully masked so far
    float psum = 0.f;
#pragma unroll
    for (int t = 0; t < V2_BK / 2; ++t) {
      const int c = half * (V2_BK / 2) + t, j = k0 + c;
      const bool valid = j < seq_len && (!causal || j <= i);
      const float p = valid ? expf(sSw[r * V2_LDS + c] * scale - m_use) : 0.f;
      sPw[r * V2_LDP + c] = from_float2<T>(p);
      psum += p;
    }
    psum += __shfl_xor_sync(0xffffffffu, psum, 1);
    const float alpha = expf(m - m_use);        // 0 on the first tile (m = -inf)
    l = alpha * l + psum;
    m = m_new;
    for (int t = 0; t < HALF_HD; ++t) sOw[r * LDO + half * HALF_HD + t] *= alpha;
    __syncwarp();

    // O += P V: V stored [key][dim] row-major is the row-major B operand.
#pragma unroll
    for (int nb = 0; nb < HD / 16; ++nb) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> of;
      wmma::load_matrix_sync(of, sOw + nb * 16, LDO, wmma::mem_row_major);
#pragma unroll
      for (int kb = 0; kb < V2_BK / 16; ++kb) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> pf;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> vf;
        wmma::load_matrix_sync(pf, sPw + kb * 16, V2_LDP);
        wmma::load_matrix_sync(vf, sV + kb * 16 * LDH + nb * 16, LDH);
        wmma::mma_sync(of, pf, vf, of);
      }
      wmma::store_matrix_sync(sOw + nb * 16, of, LDO, wmma::mem_row_major);
    }
    __syncwarp();
  }

  if (i < seq_len) {
    const float inv_l = 1.f / l;                // l >= 1: the row's max term is exp(0)
    for (int t = 0; t < HALF_HD; ++t) {
      const int d = half * HALF_HD + t;
      oh[(long long)i * HD + d] = from_float2<T>(sOw[r * LDO + d] * inv_l);
    }
  }
}

}  // namespace andrea
