// harness.cpp: launch one kernel specialization over its whole grid on the CPU (tests only).
// Built by tests/test_kernels_on_host.py with -DSIM_T=<element type> -DSIM_KERNEL=<kernel<...>>
// -DKERNEL_FILE="<the .cu, with its extern __shared__ line pointed at sim::g_smem>".
// argv: in out T hs causal grid_x grid_y threads smem_bytes seed
// in: q, k, v as raw SIM_T arrays [B*nh*T*hs] each; out: the kernel's output, raw SIM_T.
#include "sim.h"
#include KERNEL_FILE
#include <fstream>
#include <string>

int main(int argc, char** argv) {
  if (argc != 11) { std::fprintf(stderr, "usage: in out T hs causal gx gy threads smem seed\n"); return 2; }
  const int T = std::stoi(argv[3]), hs = std::stoi(argv[4]), causal = std::stoi(argv[5]);
  const unsigned gx = std::stoul(argv[6]), gy = std::stoul(argv[7]);
  const unsigned threads = std::stoul(argv[8]);
  const size_t smem = std::stoul(argv[9]);
  sim::g_rng.seed(std::stoul(argv[10]));
  std::ifstream in(argv[1], std::ios::binary);
  std::vector<char> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t n = data.size() / 3 / sizeof(SIM_T);
  SIM_T* buf[4];
  for (int i = 0; i < 4; ++i) {
    buf[i] = static_cast<SIM_T*>(sim::guarded_alloc(n * sizeof(SIM_T)));
    if (i < 3) std::memcpy(buf[i], data.data() + i * n * sizeof(SIM_T), n * sizeof(SIM_T));
    else std::memset(buf[i], 0xff, n * sizeof(SIM_T));          // NaN: rows never written show
  }
  void* shared = sim::guarded_alloc(smem ? smem : 1);
  sim::g_smem = shared;
  sim::g_smem_bytes = smem;
  sim::g_gridDim.x = gx;
  sim::g_gridDim.y = gy;
  sim::g_blockDim.x = threads;
  const float scale = 1.0f / std::sqrt((float)hs);
  for (unsigned y = 0; y < gy; ++y)
    for (unsigned x = 0; x < gx; ++x) {
      sim::g_blockIdx.x = x;
      sim::g_blockIdx.y = y;
      std::memset(shared, 0xff, smem);                          // NaN: reads of unwritten smem show
      sim::run_block(threads, [&] { SIM_KERNEL(buf[0], buf[1], buf[2], buf[3], T, hs, scale, causal); });
    }
  std::ofstream out(argv[2], std::ios::binary);
  out.write(reinterpret_cast<const char*>(buf[3]), n * sizeof(SIM_T));
  return 0;
}
