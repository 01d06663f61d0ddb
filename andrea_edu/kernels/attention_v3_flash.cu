// attention_v3_flash.cu: attention as FlashAttention-2 computes it, on mma.sync tensor cores.
// Part of andrea_edu (chapter "From one block per head to FlashAttention: a kernel worklog");
// compiled at run time by NVRTC (andrea_edu/kernels/nvrtc.py), described by its spec
// andrea_edu/kernels/v3.py, mirrored step by step on the CPU by andrea_edu/kernels/emulator.py;
// tests/host_sim runs this very file on the CPU.
//
// Versions in this file
// ---------------------
// attention_v3_flash  FlashAttention-2 style: S, P and O never leave the registers.
//   idea:   each warp owns 32 query rows (two m16 tiles; 16 rows above head_dim 64, where two
//           tiles' O would not fit in registers). S = Q K^T and O += P V are PTX
//           mma.sync.m16n8k16 (fp16/bf16 in, fp32 accumulate) whose operands come from shared
//           memory through ldmatrix (.trans for V), each K/V fragment feeding both m16 tiles
//           (half the shared-memory reads per score); S, P and O stay in the accumulator
//           registers for the whole K/V loop, so the online softmax runs on the registers
//           themselves: each row lives in one quad (4 lanes), its max needs two
//           __shfl_xor_sync per tile and its sum none until the end. exp2 with log2(e) folded
//           into the scale (one FFMA + one MUFU.EX2 per score: ex2.approx.ftz). K/V tiles
//           arrive by 16-byte cp.async into a double buffer: tile j+1 is in flight while tile j
//           is computed, one barrier per tile.
//           Masks only on the tiles that need them (the causal diagonal and the tail); a warp
//           skips a causal tile that lies wholly above its rows; the heaviest causal query
//           tiles are launched first.
//           What changed from v2: no fp32 S/P/O in shared memory (v2 wrote and re-read them on
//           every tile), vector copies instead of 2-byte loads, exp2 instead of expf, a
//           pipeline instead of load-then-compute, and a fragment layout we choose (the PTX
//           ISA documents it; WMMA's is opaque), which is what lets P feed the next mma as is.
//   grid:   gridDim = (B * nh, ceil(T / BQ)), BQ = 128 query rows for head_dim <= 64, else 64;
//           blockIdx.x = b * nh + h; query tile = gridDim.y - 1 - blockIdx.y (reversed: under
//           causal masking the last query tiles have the most keys, and blocks are scheduled
//           roughly in order). blockDim = 128 (4 warps; warp w owns rows q0 + w*BQ/4 ..).
//   limits: contiguous [B, nh, T, hs], 16-byte aligned; fp16 or bf16 (fp32 goes to v1);
//           sm_80+ (mma.sync m16n8k16, cp.async, ldmatrix, cvt.rn.{f16,bf16}x2.f32);
//           head_dim = HD, a multiple of 16, compiled for 32, 64, 96, 128 (the
//           register-resident O is HD/2 floats per lane per m16 tile: 64 at HD=128, 2 x 32
//           at HD=64; 240 registers at HD=64, no spills); any seq_len >= 1
//           (tails zero-filled by cp.async and masked); causal or not (runtime argument).
//           Dynamic shared memory (bytes): 4 tiles of 64 x (HD+8) elements = 512 * (HD+8):
//           K[0], V[0], K[1], V[1]; Q (BQ rows) is staged in K[1] (+ V[1]) before tile 1
//           needs it, and O in K[0] (+ V[0]) at the end.
//           36 KB at HD=64, 68 KB at HD=128 (above 48 KB the launcher opts in).
//   speed:  not yet measured on a GPU.
//
// attention_v3_flash<T, HD, RD>, RD < HD: the same kernel run for a head_dim RD that is not one
//   of its widths, inside the width HD compiled for it (kernels/v3pad.py: the next multiple of 16,
//   72 -> 80; backend "cuda-flash-padded"). Only the two ends change: rows of q, k, v are RD
//   elements apart in global memory; staging copies the RD real columns and zero-fills columns
//   RD .. HD-1 of every shared row (Q, K and V), so the pad adds 0 to every score and the pad
//   columns of O stay 0; the epilogue writes the RD real columns only. Every mma in between is
//   HD wide: (HD - RD) / HD of the tensor-core work is spent on zeros (8 of 80 at head_dim 72).
//   When RD is a multiple of 8, a row is whole 16-byte chunks: the real chunks go by cp.async
//   and the pad chunks by cp.async's zero-fill; otherwise (70, 100) the rows are not 16-byte
//   aligned and staging and the stores go element by element (2 bytes). RD = HD (the default)
//   compiles exactly the code above (`if constexpr`).
//
// Algorithm per block (the emulator's v3 path follows the same loops):
//   cp.async Q[q0 : q0+BQ] -> K[1], V[1]; K, V[0 : 64] -> K[0], V[0]   (zeros past T)
//   each warp: its (16 MT) x HD Q rows -> registers (ldmatrix)   qf: MT x HD/16 A fragments
//   per query row (2 per lane per m16 tile: g and g+8): m = -inf, l = 0, O = 0 (fp32 registers)
//   for tile j in 0 .. ceil(kv_end / 64) - 1:            kv_end = T, or min(T, q0+BQ) if causal
//     wait for tile j; barrier (tile j visible, everyone done with tile j-1)
//     cp.async tile j+1 -> the other buffers (zeros past T)
//     S (16 MT x 64 per warp) = Q K^T       MT x HD/2 mma, raw scores (not yet scaled)
//     on the diagonal / tail tile only: S = -inf where key >= T or (causal and key > row)
//     m_new = max(m, rowmax S)            (2 quad shuffles per row)
//     P = exp2(S * c - m_new * c), c = scale * log2(e);  alpha = exp2((m - m_new) * c)
//     l = alpha * l + rowsum P (per lane: the quad sums once, after the loop);  O *= alpha
//     O += P V                             P re-packed from the S registers, V by ldmatrix.trans
//   O / l -> shared memory (K[0], V[0]) -> 16-byte stores to out (rows < T)
//
// Register fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"):
// lane = 4 * g + t (g = groupID, t = threadID_in_group). The accumulator of an m16n8 tile holds
// rows g and g+8, columns 2t and 2t+1 of it; the A operand holds rows g, g+8 and columns
// 2t, 2t+1, 2t+8, 2t+9. So the accumulators of two neighbouring n8 tiles of S, rounded to
// 16 bits, are exactly the A fragment of P for the next 16 keys: no shuffle, no shared memory.
//
// Shared-memory banks: every row is padded by 8 elements (16 bytes), so the 8 row addresses of
// an ldmatrix 8x8 matrix (row stride 2*HD + 16 bytes) fall on 8 different 16-byte bank groups
// for HD = 32, 64, 96, 128: ldmatrix is conflict-free without a swizzle. The O staging at the
// end (one 32-bit word per lane, rows g, columns 2t) is conflict-free for the same reason.

#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <math_constants.h>  // CUDART_INF_F

#ifndef ANDREA_SMEM_BYTES  // the dynamic shared memory of one block, from the kernel's spec
#error "compile with -DANDREA_SMEM_BYTES=<bytes> (andrea_edu.kernels.nvrtc passes KernelSpec.shared_bytes)"
#endif

namespace andrea {

constexpr int V3_WARPS = 4;
constexpr int V3_THREADS = 32 * V3_WARPS;       // 128 threads
constexpr int V3_BQ = 16 * V3_WARPS;            // query rows per block, head_dim > NARROW_HD
constexpr int V3_NARROW_HD = 64;                // head_dim up to this: 32 query rows per warp
constexpr int V3_BQ_NARROW = 32 * V3_WARPS;     // query rows per block, head_dim <= NARROW_HD
constexpr int V3_BK = 64;                       // keys per K/V tile
constexpr int V3_PAD = 8;                       // elements added to each shared-memory row
constexpr int V3_TILES = 4;                     // K[0], V[0], K[1], V[1] (Q in K[1], V[1] first)

// ---------------------------------------------------------------------------------------------
// The PTX layer. Everything this kernel asks of the hardware beyond plain C++ goes through
// these few functions. tests/host_sim defines ANDREA_PTX_EMULATED and supplies the same
// functions, emulated on the CPU from the PTX ISA's fragment tables.
#ifndef ANDREA_PTX_EMULATED
namespace ptx {

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, asynchronously; `valid` false: the 16 bytes are zero-filled
// (src-size 0: nothing is read from src). PTX ISA "Data Movement: cp.async".
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
               :: "r"(smem_addr(dst)), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
// Close the group of cp.async this thread issued since the last commit.
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Wait until at most N of this thread's committed groups are still in flight.
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory");
}

// Four 8x8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i, lane l receives in
// r[i] row l/4, columns 2(l%4), 2(l%4)+1 of matrix i (.trans: column l/4, rows 2(l%4), +1).
// PTX ISA "Warp-level matrix load instruction: ldmatrix".
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}

// d += A (16x16, row) * B (16x8, col), fp32 accumulate. a: {a0a1, a2a3, a4a5, a6a7},
// b: {b0b1, b2b3}, two 16-bit elements per register, the lower index in the lower half.
template <typename T> __device__ __forceinline__ void mma_16816(float (&d)[4],
    const unsigned (&a)[4], unsigned b0, unsigned b1);
template <> __device__ __forceinline__ void mma_16816<__half>(float (&d)[4],
    const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <> __device__ __forceinline__ void mma_16816<__nv_bfloat16>(float (&d)[4],
    const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats rounded to nearest even and packed: lo in bits 0-15, hi in bits 16-31.
template <typename T> __device__ __forceinline__ unsigned pack2(float lo, float hi);
template <> __device__ __forceinline__ unsigned pack2<__half>(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
template <> __device__ __forceinline__ unsigned pack2<__nv_bfloat16>(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// 2^x on the special-function unit (one MUFU.EX2). exp2f without --use_fast_math adds a range
// test and two multiplies per call to keep results below 2^-126; ftz flushes them to 0 instead,
// which a softmax weight that small can afford. PTX ISA "ex2": max relative error 2^-22.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace ptx
#endif  // ANDREA_PTX_EMULATED
// ---------------------------------------------------------------------------------------------

// Query rows per warp: 32 (two m16 tiles) up to head_dim V3_NARROW_HD, so that every K and V
// fragment a warp loads feeds two mma (half the shared-memory reads per score); 16 above it,
// where two tiles' O accumulators (HD floats per lane) would not fit in 255 registers.
template <int HD> struct V3Shape {
  static constexpr int MT = HD <= V3_NARROW_HD ? 2 : 1;   // m16 tiles per warp
  static constexpr int BQ = 16 * V3_WARPS * MT;            // query rows per block: 128 or 64
};

// q, k, v, out: contiguous [B, nh, T, hs], hs = HD; out in the input dtype.
// RD: the real head_dim (row stride of q, k, v, out) when it is narrower than HD (see the top).
template <typename T, int HD, int RD = HD>
__global__ void __launch_bounds__(V3_THREADS)
attention_v3_flash(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                   T* __restrict__ out, int seq_len, int head_dim, float scale, int causal) {
  static_assert(HD % 16 == 0 && HD >= 16 && HD <= 256, "HD must be a multiple of 16, <= 256");
  static_assert(RD >= 1 && RD <= HD, "the real head_dim RD must be 1 .. HD");
  constexpr int MT = V3Shape<HD>::MT;           // m16 tiles (16 query rows each) per warp
  constexpr int BQ = V3Shape<HD>::BQ;           // query rows per block
  static_assert(BQ % V3_BK == 0 && BQ / V3_BK <= 2, "Q and O are staged in 1 or 2 tiles");
  constexpr int LD = HD + V3_PAD;               // shared-memory row stride, in elements
  constexpr int TILE = V3_BK * LD;              // elements of one staged 64-row tile
  constexpr int CHUNKS = HD / 8;                // 16-byte chunks per row
  constexpr int KSTEPS = HD / 16;               // k16 steps of Q K^T
  constexpr int SN = V3_BK / 8;                 // n8 tiles of S per m16 tile: 8 (16 x 64)
  constexpr int ON = HD / 8;                    // n8 tiles of O per m16 tile (16 x HD)
  constexpr bool PADDED = RD != HD;             // columns RD .. HD-1 are zero padding
  constexpr bool WHOLE = RD % 8 == 0;           // a real row is whole 16-byte chunks
  (void)head_dim;                               // equals RD: the launcher checks it

  // Tiles in order K[0], V[0], K[1], V[1]: Q (BQ rows) is staged in K[1] (+ V[1]) until tile 1
  // is prefetched, and O in K[0] (+ V[0]) after the last tile.
  extern __shared__ __align__(128) unsigned char smem[];
  T* const s0 = reinterpret_cast<T*>(smem);     // K[s] = s0 + 2s * TILE, V[s] = s0 + (2s+1) TILE
  T* const sQ = s0 + 2 * TILE;
  static_assert(V3_TILES * TILE * sizeof(T) == ANDREA_SMEM_BYTES,
                "carve-up != the bytes the launcher requests (KernelSpec.shared_bytes, kernels/v3.py)");

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;        // groupID, threadID_in_group (PTX ISA names)
  const int q0 = (gridDim.y - 1 - blockIdx.y) * BQ;      // heaviest causal tiles first
  const int w0 = warp * 16 * MT;                // this warp's first row in the block's tile
  const long long base = (long long)blockIdx.x * seq_len * RD;  // this (b, h)'s [T, RD] slice
  const T* qh = q + base;
  const T* kh = k + base;
  const T* vh = v + base;
  T* oh = out + base;
  const int kv_end = causal ? min(seq_len, q0 + BQ) : seq_len;
  const int n_tiles = (kv_end + V3_BK - 1) / V3_BK;
  const float c = scale * 1.4426950408889634f;  // exp(x * scale) = exp2(x * c)

  // Rows row0 .. row0+63 of a [T, HD] slice -> a padded shared tile; rows >= T zero-filled.
  // The 64 rows are contiguous in global memory: this thread's chunk `it` (16 bytes) is at
  // element 8 * (tid + 128 * it) of the tile there, and at soff[it] in shared memory
  // (computed once, outside the K/V loop). Full tiles (all but the tail) take the unguarded
  // path: no compare and no select per chunk.
  constexpr int STAGE_IT = V3_BK * CHUNKS / V3_THREADS;  // chunks per thread (HD % 16 == 0)
  int srow[STAGE_IT], soff[STAGE_IT];
#pragma unroll
  for (int it = 0; it < STAGE_IT; ++it) {
    const int ch = tid + it * V3_THREADS;
    srow[it] = ch / CHUNKS;
    soff[it] = srow[it] * LD + (ch % CHUNKS) * 8;
  }
  auto stage = [&](T* dst, const T* src, int row0) {
    if constexpr (PADDED) {                      // real columns copied, columns RD.. zeroed
#pragma unroll
      for (int it = 0; it < STAGE_IT; ++it) {
        const int cc = (tid + it * V3_THREADS) % CHUNKS;   // this chunk's column / 8
        const bool row_ok = row0 + srow[it] < seq_len;
        const T* from = src + (long long)(row0 + srow[it]) * RD + cc * 8;
        if constexpr (WHOLE) {
          const bool real = cc < RD / 8;                   // else a pad chunk
          const bool ok = real && row_ok;                  // else: zero-filled, nothing read
          ptx::cp_async_16(dst + soff[it], ok ? from : src, ok);
        } else {                                           // rows not 16-byte aligned
          unsigned short* d = reinterpret_cast<unsigned short*>(dst + soff[it]);
          const unsigned short* f = reinterpret_cast<const unsigned short*>(from);
#pragma unroll
          for (int e = 0; e < 8; ++e) {
            const bool ok = row_ok && cc * 8 + e < RD;     // else a pad column (or past T)
            d[e] = ok ? f[e] : (unsigned short)0;
          }
        }
      }
      return;
    }
    const T* mine = src + (long long)row0 * HD + tid * 8;
    if (row0 + V3_BK <= seq_len) {
#pragma unroll
      for (int it = 0; it < STAGE_IT; ++it)
        ptx::cp_async_16(dst + soff[it], mine + it * V3_THREADS * 8, true);
    } else {
#pragma unroll
      for (int it = 0; it < STAGE_IT; ++it) {
        const bool ok = row0 + srow[it] < seq_len;   // else: zero-fill, nothing is read
        ptx::cp_async_16(dst + soff[it], ok ? mine + it * V3_THREADS * 8 : src, ok);
      }
    }
  };

#pragma unroll
  for (int h = 0; h < BQ / V3_BK; ++h) stage(sQ + h * TILE, qh, q0 + h * V3_BK);
  ptx::cp_async_commit();                       // group: Q
  stage(s0, kh, 0);
  stage(s0 + TILE, vh, 0);
  ptx::cp_async_commit();                       // group: tile 0
  ptx::cp_async_wait<1>();                      // Q has landed (tile 0 may still fly)
  __syncthreads();

  // This warp's rows as mma A fragments. ldmatrix x4: lanes 0-15 address rows 0-15 of an m16
  // tile at column 16kk, lanes 16-31 the same rows at column 16kk+8 -> a0a1, a2a3, a4a5, a6a7.
  unsigned qf[MT][KSTEPS][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int kk = 0; kk < KSTEPS; ++kk)
      ptx::ldmatrix_x4(qf[mt][kk], sQ + (w0 + mt * 16 + (lane & 15)) * LD + kk * 16 +
                                       (lane >> 4) * 8);

  float o[MT][ON][4];                           // O rows g, g+8 of each m16 tile; cols 8n+2t, +1
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int n = 0; n < ON; ++n) o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.f;
  float m[MT][2], l[MT][2];                     // running max of raw scores; this lane's sum
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    m[mt][0] = m[mt][1] = -CUDART_INF_F;
    l[mt][0] = l[mt][1] = 0.f;
  }

  for (int j = 0; j < n_tiles; ++j) {
    const int k0 = j * V3_BK;
    ptx::cp_async_wait<0>();                    // tile j has landed (this thread's copies)
    __syncthreads();                            // ... everyone's; all done with tile j-1 and Q
    if (j + 1 < n_tiles) {                      // prefetch tile j+1 into the other buffers
      stage(s0 + 2 * ((j + 1) & 1) * TILE, kh, k0 + V3_BK);
      stage(s0 + (2 * ((j + 1) & 1) + 1) * TILE, vh, k0 + V3_BK);
    }
    ptx::cp_async_commit();                     // (an empty group on the last tile)
    // Causal: a tile whose first key is past this warp's last row is masked whole for it; the
    // warp skips its math (the block staged it for the other warps). Warp-uniform, no barrier.
    if (causal && k0 > q0 + w0 + 16 * MT - 1) continue;
    const T* sK = s0 + 2 * (j & 1) * TILE;
    const T* sV = sK + TILE;

    // S = Q K^T. K stored [key][dim] is the "col" B operand as is. ldmatrix x4 over 16 keys x
    // 16 dims: matrix i = lane / 8 covers keys +8(i/2), dims +8(i%2) -> b0b1, b2b3 of n-tile
    // 2np (i = 0, 1) and of n-tile 2np+1 (i = 2, 3). Each K fragment feeds all MT m16 tiles.
    float s[MT][SN][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int n = 0; n < SN; ++n) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < KSTEPS; ++kk) {
#pragma unroll
      for (int np = 0; np < SN / 2; ++np) {
        unsigned b[4];
        ptx::ldmatrix_x4(b, sK + (np * 16 + (lane & 7) + (lane >> 4) * 8) * LD + kk * 16 +
                                ((lane >> 3) & 1) * 8);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          ptx::mma_16816<T>(s[mt][2 * np], qf[mt][kk], b[0], b[1]);
          ptx::mma_16816<T>(s[mt][2 * np + 1], qf[mt][kk], b[2], b[3]);
        }
      }
    }

    // Masks, only where a key can be past T or above a row of this warp (warp-uniform test).
    if (k0 + V3_BK > seq_len || (causal && k0 + V3_BK - 1 > q0 + w0)) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int n = 0; n < SN; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = k0 + n * 8 + 2 * t + (e & 1);
            const int row = q0 + w0 + mt * 16 + g + 8 * (e >> 1);
            if (key >= seq_len || (causal && key > row)) s[mt][n][e] = -CUDART_INF_F;
          }
    }

    // Online softmax on the registers. Row g of an m16 tile lives in s[mt][*][0..1] of the
    // quad's 4 lanes, row g+8 in s[mt][*][2..3]: two xor-shuffles (1, 2) give the quad's max.
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      float alpha[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float mx = m[mt][h];
#pragma unroll
        for (int n = 0; n < SN; ++n) mx = fmaxf(mx, fmaxf(s[mt][n][2 * h], s[mt][n][2 * h + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        // A row that has seen only masked keys keeps m = -inf; use 0 so exp2 gives 0, not NaN.
        const float mc = (mx == -CUDART_INF_F) ? 0.f : mx * c;
        alpha[h] = ptx::exp2_approx(m[mt][h] * c - mc);  // 0 on the first tile (m = -inf)
        m[mt][h] = mx;
        float sum = 0.f;
#pragma unroll
        for (int n = 0; n < SN; ++n) {
          s[mt][n][2 * h] = ptx::exp2_approx(fmaf(s[mt][n][2 * h], c, -mc));
          s[mt][n][2 * h + 1] = ptx::exp2_approx(fmaf(s[mt][n][2 * h + 1], c, -mc));
          sum += s[mt][n][2 * h] + s[mt][n][2 * h + 1];
        }
        l[mt][h] = alpha[h] * l[mt][h] + sum;
      }
#pragma unroll
      for (int n = 0; n < ON; ++n) {
        o[mt][n][0] *= alpha[0]; o[mt][n][1] *= alpha[0];
        o[mt][n][2] *= alpha[1]; o[mt][n][3] *= alpha[1];
      }
    }

    // O += P V. P's A fragment for keys 16kk..16kk+15 is S's n-tiles 2kk and 2kk+1, rounded.
    // V stored [key][dim] is the "row" B operand: ldmatrix .trans turns it into b0b1, b2b3.
    // Matrix i = lane / 8 covers keys +8(i%2), dims +8(i/2) -> b0b1, b2b3 of n-tile 2dp
    // (i = 0, 1) and of n-tile 2dp+1 (i = 2, 3). Each V fragment feeds all MT m16 tiles.
#pragma unroll
    for (int kk = 0; kk < V3_BK / 16; ++kk) {
      unsigned p[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        p[mt][0] = ptx::pack2<T>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        p[mt][1] = ptx::pack2<T>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        p[mt][2] = ptx::pack2<T>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        p[mt][3] = ptx::pack2<T>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dp = 0; dp < ON / 2; ++dp) {
        unsigned b[4];
        ptx::ldmatrix_x4_trans(b, sV + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD +
                                      dp * 16 + (lane >> 4) * 8);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          ptx::mma_16816<T>(o[mt][2 * dp], p[mt], b[0], b[1]);
          ptx::mma_16816<T>(o[mt][2 * dp + 1], p[mt], b[2], b[3]);
        }
      }
    }
  }

  // Epilogue: the quad's partial sums, O / l rounded to T, staged in K[0] (+ V[0]) (every warp
  // is past its last tile after the barrier), then 16-byte stores of the rows < T.
  __syncthreads();
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    float inv[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float lt = l[mt][h];
      lt += __shfl_xor_sync(0xffffffffu, lt, 1);
      lt += __shfl_xor_sync(0xffffffffu, lt, 2);
      inv[h] = 1.f / lt;                        // >= 1: the row's max term is exp2(0)
    }
    T* sO = s0 + (w0 + mt * 16) * LD;           // this m16 tile's 16 rows of K[0] (+ V[0])
#pragma unroll
    for (int n = 0; n < ON; ++n) {
      *reinterpret_cast<unsigned*>(sO + g * LD + n * 8 + 2 * t) =
          ptx::pack2<T>(o[mt][n][0] * inv[0], o[mt][n][1] * inv[0]);
      *reinterpret_cast<unsigned*>(sO + (g + 8) * LD + n * 8 + 2 * t) =
          ptx::pack2<T>(o[mt][n][2] * inv[1], o[mt][n][3] * inv[1]);
    }
  }
  __syncwarp();
#pragma unroll
  for (int it = 0; it < MT * CHUNKS / 2; ++it) {  // 16 MT rows x CHUNKS chunks over 32 lanes
    const int ch = lane + it * 32, r = ch / CHUNKS, col = (ch % CHUNKS) * 8;
    const int i = q0 + w0 + r;
    if constexpr (PADDED) {                      // the RD real columns only
      if constexpr (WHOLE) {
        if (i < seq_len && col < RD)
          *reinterpret_cast<uint4*>(oh + (long long)i * RD + col) =
              *reinterpret_cast<const uint4*>(s0 + (w0 + r) * LD + col);
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e)
          if (i < seq_len && col + e < RD) oh[(long long)i * RD + col + e] = s0[(w0 + r) * LD + col + e];
      }
    } else if (i < seq_len) {
      *reinterpret_cast<uint4*>(oh + (long long)i * HD + col) =
          *reinterpret_cast<const uint4*>(s0 + (w0 + r) * LD + col);
    }
  }
}

}  // namespace andrea
