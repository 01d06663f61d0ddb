// sim.h: run a CUDA kernel's blocks on the CPU, one cooperative fiber per CUDA thread.
// Test tooling for tests/test_kernels_on_host.py (not part of andrea_edu). The kernel source is
// compiled by the host C++ compiler against the small headers in include/ (fp16/bf16 types with
// round-to-nearest-even, WMMA fragments that each lane holds whole, CUDART_INF_F).
// What it checks that the Python emulator cannot: the .cu file's own indexing, barrier
// placement (threads are resumed in a random order at every barrier, and each pass of the
// scheduler runs a random half of them, so a missing __syncthreads/__syncwarp makes a reader
// see stale data), barriers reached by only some threads (reported as a deadlock), WMMA pointer
// alignment and ldm rules, and reads/writes past the end of global or shared buffers (they end
// at a PROT_NONE guard page). ptx_sim.h adds v3's PTX instructions (mma.sync, ldmatrix,
// cp.async) on top of this scheduler.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
using std::max;
using std::min;

struct dim3 { unsigned x = 1, y = 1, z = 1; };

namespace sim {

constexpr int kStack = 256 * 1024;

// One 16-byte cp.async that has been issued but not yet performed (ptx_sim.h).
struct AsyncCopy {
  void* dst;
  const void* src;
  int src_bytes;                     // 0..16; the rest of the 16 bytes is zero-filled
};

struct Thread {
  ucontext_t ctx;
  dim3 idx;
  int lane = 0, warp = 0, wait = 0;  // wait: 0 runnable, 1 block barrier, 2 warp barrier
  bool done = false;
  std::vector<char> stack;
  std::vector<AsyncCopy> cp_open;                 // cp.async issued since the last commit
  std::vector<std::vector<AsyncCopy>> cp_groups;  // committed groups, oldest first
};

struct Block {
  std::vector<Thread> th;
  ucontext_t sched;
  Thread* cur = nullptr;
  int block_arrived = 0;
  std::vector<int> warp_arrived;
  std::vector<std::vector<uint64_t>> slots;  // shuffle exchange, per warp and lane
  std::function<void()> body;
};

inline Block* g_block = nullptr;
inline dim3 g_blockIdx, g_gridDim, g_blockDim;
inline void* g_smem = nullptr;
inline size_t g_smem_bytes = 0;                    // set by the harness: bounds for ldmatrix/cp.async
inline std::mt19937 g_rng(12345);

[[noreturn]] inline void fail(const char* what) {
  std::fprintf(stderr, "sim: %s (block %u,%u thread %u)\n", what, g_blockIdx.x, g_blockIdx.y,
               g_block && g_block->cur ? g_block->cur->idx.x : 0u);
  std::exit(3);
}

inline Thread* cur() { return g_block->cur; }
inline void yield() { swapcontext(&cur()->ctx, &g_block->sched); }

inline void block_barrier() {
  Block& b = *g_block;
  cur()->wait = 1;
  if (++b.block_arrived == (int)b.th.size()) {
    for (auto& t : b.th) if (t.wait == 1) t.wait = 0;
    b.block_arrived = 0;
  }
  yield();
}

inline void warp_barrier() {
  Block& b = *g_block;
  const int w = cur()->warp;
  cur()->wait = 2;
  if (++b.warp_arrived[w] == 32) {
    for (auto& t : b.th) if (t.warp == w && t.wait == 2) t.wait = 0;
    b.warp_arrived[w] = 0;
  }
  yield();
}

template <typename V> V exchange(unsigned mask, V v, int src) {
  if (mask != 0xffffffffu) fail("shuffle with a partial mask");
  static_assert(sizeof(V) <= 8, "shuffle of a large type");
  Block& b = *g_block;
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(V));
  b.slots[cur()->warp][cur()->lane] = bits;
  warp_barrier();                                  // every lane has published
  bits = b.slots[cur()->warp][src & 31];
  warp_barrier();                                  // every lane has read before the next write
  V out;
  std::memcpy(&out, &bits, sizeof(V));
  return out;
}

inline void trampoline() {
  g_block->body();
  bool pending = !cur()->cp_open.empty();           // empty committed groups are harmless
  for (const auto& grp : cur()->cp_groups) pending |= !grp.empty();
  if (pending) fail("thread exited with cp.async copies it never waited for");
  cur()->done = true;                              // uc_link returns to the scheduler
}

// Run one block: every thread of `block` runs body(); resumed in random order at barriers.
inline void run_block(unsigned nthreads, const std::function<void()>& body) {
  Block b;
  b.body = body;
  b.th.resize(nthreads);
  b.warp_arrived.assign((nthreads + 31) / 32, 0);
  b.slots.assign((nthreads + 31) / 32, std::vector<uint64_t>(32, 0));
  g_block = &b;
  for (unsigned i = 0; i < nthreads; ++i) {
    Thread& t = b.th[i];
    t.idx.x = i;
    t.lane = i & 31;
    t.warp = i >> 5;
    t.stack.resize(kStack);
    getcontext(&t.ctx);
    t.ctx.uc_stack.ss_sp = t.stack.data();
    t.ctx.uc_stack.ss_size = t.stack.size();
    t.ctx.uc_link = &b.sched;
    makecontext(&t.ctx, trampoline, 0);
  }
  std::vector<Thread*> order;
  for (;;) {
    order.clear();
    bool all_done = true;
    for (auto& t : b.th) {
      all_done &= t.done;
      if (!t.done && t.wait == 0) order.push_back(&t);
    }
    if (all_done) break;
    if (order.empty()) fail("deadlock: a barrier that not every thread reaches");
    std::shuffle(order.begin(), order.end(), g_rng);
    // Skew: each runnable thread runs in this pass with probability 1/2 (at least one does),
    // so warps drift apart between barriers as they do on a GPU, and a read that relies on
    // another warp having reached some point without a barrier sees stale or NaN data.
    const size_t keep = std::max<size_t>(1, std::count_if(order.begin(), order.end(),
                                                           [](Thread*) { return g_rng() & 1u; }));
    order.resize(keep);
    for (Thread* t : order) {
      if (t->done || t->wait != 0) continue;
      b.cur = t;
      swapcontext(&b.sched, &t->ctx);
    }
  }
  g_block = nullptr;
}

// A buffer whose last byte sits right before a PROT_NONE page: overruns crash (SIGSEGV).
inline void* guarded_alloc(size_t bytes) {
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  const size_t span = (bytes + page - 1) / page * page;
  char* base = (char*)mmap(nullptr, span + page, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) fail("mmap");
  mprotect(base + span, page, PROT_NONE);
  return base + span - bytes;
}

}  // namespace sim

#define threadIdx (::sim::cur()->idx)
#define blockIdx (::sim::g_blockIdx)
#define gridDim (::sim::g_gridDim)
#define blockDim (::sim::g_blockDim)
inline void __syncthreads() { ::sim::block_barrier(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  if (mask != 0xffffffffu) ::sim::fail("__syncwarp with a partial mask");
  ::sim::warp_barrier();
}
template <typename V> V __shfl_xor_sync(unsigned m, V v, int off) {
  return ::sim::exchange(m, v, ::sim::cur()->lane ^ off);
}
template <typename V> V __shfl_sync(unsigned m, V v, int src) { return ::sim::exchange(m, v, src); }
