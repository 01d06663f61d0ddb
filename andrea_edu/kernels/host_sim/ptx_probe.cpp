// ptx_probe.cpp: drive the emulated PTX instructions of ptx_sim.h one at a time, on one warp
// (tests/test_ptx_layouts.py only). The command is argv[1]; operands come on stdin, results go
// to stdout one line per lane, so the test can compare them with its own copy of the ISA tables.
//   layout                 -> per lane: row col of a0..a7, then b0..b3, then c0..c3
//   mma f16|bf16           <- per lane: a0a1 a2a3 a4a5 a6a7 b0b1 b2b3 (hex .b32), c0..c3 (float)
//                          -> per lane: d0..d3
//   ldmatrix N 0|1         <- per lane: the element offset of its row address in a shared
//                             buffer of 4096 16-bit elements holding 0, 1, 2, ... (1 = .trans)
//                          -> per lane: r0..r(N-1) (hex)
//   cpasync                -> named steps and what the destination holds at each
//   cpasync_leak           a thread that exits with a copy never waited for (must fail)
//   shfl                   -> per lane: shfl_xor 1, 2 and 16, shfl_sync from lane 7*lane%32
#include "ptx_sim.h"
#include <iostream>
#include <string>

namespace {

constexpr int kElems = 4096;

void run_warp(unsigned threads, const std::function<void()>& body) {
  sim::g_smem_bytes = kElems * 2;
  sim::g_smem = sim::guarded_alloc(sim::g_smem_bytes);
  sim::run_block(threads, body);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  const std::string cmd = argv[1];
  if (cmd == "layout") {
    for (int lane = 0; lane < 32; ++lane) {
      auto show = [](sim::frag::RC p) { std::printf("%d %d ", p.row, p.col); };
      for (int i = 0; i < 8; ++i) show(sim::frag::a_elem(lane, i));
      for (int i = 0; i < 4; ++i) show(sim::frag::b_elem(lane, i));
      for (int i = 0; i < 4; ++i) show(sim::frag::c_elem(lane, i));
      std::printf("\n");
    }
    return 0;
  }
  if (cmd == "mma") {
    const bool bf = argc > 2 && std::string(argv[2]) == "bf16";
    unsigned a[32][4], b[32][2];
    float c[32][4], d[32][4];
    for (int l = 0; l < 32; ++l) {
      for (int i = 0; i < 4; ++i) std::cin >> std::hex >> a[l][i];
      for (int i = 0; i < 2; ++i) std::cin >> std::hex >> b[l][i];
      for (int i = 0; i < 4; ++i) std::cin >> std::dec >> c[l][i];
    }
    run_warp(32, [&] {
      const int l = threadIdx.x;
      float acc[4] = {c[l][0], c[l][1], c[l][2], c[l][3]};
      if (bf) andrea::ptx::mma_16816<__nv_bfloat16>(acc, a[l], b[l][0], b[l][1]);
      else andrea::ptx::mma_16816<__half>(acc, a[l], b[l][0], b[l][1]);
      for (int i = 0; i < 4; ++i) d[l][i] = acc[i];
    });
    for (int l = 0; l < 32; ++l)
      std::printf("%.9g %.9g %.9g %.9g\n", d[l][0], d[l][1], d[l][2], d[l][3]);
    return 0;
  }
  if (cmd == "ldmatrix") {
    const int n = std::stoi(argv[2]);
    const bool trans = std::stoi(argv[3]) != 0;
    long off[32];
    for (int l = 0; l < 32; ++l) std::cin >> off[l];
    unsigned r[32][4] = {};
    run_warp(32, [&] {
      const int l = threadIdx.x;
      uint16_t* s = static_cast<uint16_t*>(sim::g_smem);
      if (l == 0) for (int e = 0; e < kElems; ++e) s[e] = (uint16_t)e;
      __syncwarp();
      const void* p = s + off[l];
      namespace px = andrea::ptx;
      unsigned x[4] = {};
      if (n == 1) {
        unsigned y[1];
        trans ? px::ldmatrix_x1_trans(y, p) : px::ldmatrix_x1(y, p);
        x[0] = y[0];
      }
      if (n == 2) {
        unsigned y[2];
        trans ? px::ldmatrix_x2_trans(y, p) : px::ldmatrix_x2(y, p);
        x[0] = y[0], x[1] = y[1];
      }
      if (n == 4) trans ? px::ldmatrix_x4_trans(x, p) : px::ldmatrix_x4(x, p);
      for (int i = 0; i < 4; ++i) r[l][i] = x[i];
    });
    for (int l = 0; l < 32; ++l) {
      for (int i = 0; i < n; ++i) std::printf("%08x ", r[l][i]);
      std::printf("\n");
    }
    return 0;
  }
  if (cmd == "cpasync" || cmd == "cpasync_leak") {
    alignas(16) static uint16_t g[64];
    for (int i = 0; i < 64; ++i) g[i] = (uint16_t)(100 + i);
    const bool leak = cmd == "cpasync_leak";
    run_warp(64, [&] {                               // two warps: thread 0 copies, 32 reads
      uint16_t* s = static_cast<uint16_t*>(sim::g_smem);
      auto show = [&](const char* step) {
        std::printf("%s %u %u %u %u\n", step, s[0], s[8], s[16], s[24]);
      };
      if (threadIdx.x == 0) {
        for (int i = 0; i < 32; ++i) s[i] = 7;       // old contents
        show("before");
        andrea::ptx::cp_async_16(s + 0, g + 0, true);
        andrea::ptx::cp_async_commit();              // group 1
        andrea::ptx::cp_async_16(s + 8, g + 8, true);
        andrea::ptx::cp_async_commit();              // group 2
        andrea::ptx::cp_async_16(s + 16, g + 16, false);
        andrea::ptx::cp_async_commit();              // group 3: zero-fill
        andrea::ptx::cp_async_16(s + 24, g + 24, true);  // not committed yet
        show("issued");
        andrea::ptx::cp_async_wait<2>();
        show("wait2");
        andrea::ptx::cp_async_wait<1>();
        show("wait1");
        andrea::ptx::cp_async_wait<0>();
        show("wait0");
        if (!leak) {
          andrea::ptx::cp_async_commit();
          andrea::ptx::cp_async_wait<0>();
          show("commit_wait0");
        }
      }
      __syncthreads();
      if (threadIdx.x == 32) show("other_thread_after_barrier");
    });
    return 0;
  }
  if (cmd == "shfl") {
    int out[32][4];
    run_warp(32, [&] {
      const int l = threadIdx.x;
      const float x = 10.f * l;
      out[l][0] = (int)__shfl_xor_sync(0xffffffffu, x, 1);
      out[l][1] = (int)__shfl_xor_sync(0xffffffffu, x, 2);
      out[l][2] = (int)__shfl_xor_sync(0xffffffffu, x, 16);
      out[l][3] = (int)__shfl_sync(0xffffffffu, x, (7 * l) % 32);
    });
    for (int l = 0; l < 32; ++l)
      std::printf("%d %d %d %d\n", out[l][0], out[l][1], out[l][2], out[l][3]);
    return 0;
  }
  return 2;
}
