// sim.h: run a CUDA kernel's blocks on the CPU, one cooperative fiber per CUDA thread.
// The engine of andrea_edu.kernels.cpu_sim (backend="cpu-sim", the notebook's kernel cells and
// puzzles; launch.h is its generic main) and of tests/test_kernels_on_host.py. The kernel source is
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
#undef _FORTIFY_SOURCE  // glibc's checked longjmp refuses a jump onto a fiber's stack (sim.h)
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <csignal>
#include <functional>
#include <random>
#include <sys/mman.h>
#include <setjmp.h>
#include <ucontext.h>
#include <unistd.h>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
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
  ucontext_t ctx;                 // the fiber's first entry (makecontext/swapcontext) ...
  jmp_buf jb;                     // ... every later switch: _setjmp/_longjmp, which skip the
  bool started = false;           // signal-mask system call swapcontext makes each time
  dim3 idx;
  int lane = 0, warp = 0, wait = 0;  // wait: 0 runnable, 1 block barrier, 2 warp barrier
  bool done = false;
  std::vector<char> stack;
  std::vector<AsyncCopy> cp_open;                 // cp.async issued since the last commit
  std::vector<std::vector<AsyncCopy>> cp_groups;  // committed groups, oldest first
  int static_calls = 0;                           // static __shared__ declarations reached
};

struct Block {
  std::vector<Thread> th;
  ucontext_t sched;
  jmp_buf sched_jb;
  Thread* cur = nullptr;
  int block_arrived = 0;
  std::vector<int> warp_arrived;
  std::vector<std::vector<uint64_t>> slots;  // shuffle exchange, per warp and lane
  std::function<void()> body;
  std::vector<size_t> static_offsets;              // static __shared__ arrays, in declaration order
  size_t static_top = 0;
};

inline Block* g_block = nullptr;
inline dim3 g_blockIdx, g_gridDim, g_blockDim;
inline void* g_smem = nullptr;
inline size_t g_smem_bytes = 0;                    // set by the harness: bounds for ldmatrix/cp.async
inline std::mt19937 g_rng(12345);
inline char* g_static_smem = nullptr;              // static __shared__ arrays (launch.h sets it)
inline size_t g_static_smem_bytes = 0;

[[noreturn]] inline void fail(const char* what) {
  std::fprintf(stderr, "sim: %s (block %u,%u thread %u)\n", what, g_blockIdx.x, g_blockIdx.y,
               g_block && g_block->cur ? g_block->cur->idx.x : 0u);
  std::exit(3);
}

inline Thread* cur() { return g_block->cur; }
inline void yield() {
  if (!_setjmp(cur()->jb)) _longjmp(g_block->sched_jb, 1);
}

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
  cur()->done = true;
  _longjmp(g_block->sched_jb, 1);                  // back to the scheduler, never to return
}

// Run one block: every thread of `block` runs body(); resumed in random order at barriers.
// Threads are numbered x fastest, then y, then z (as CUDA does); warps are 32 consecutive ones.
inline void run_block(dim3 shape, const std::function<void()>& body) {
  const unsigned nthreads = shape.x * shape.y * shape.z;
  Block b;
  b.body = body;
  b.th.resize(nthreads);
  b.warp_arrived.assign((nthreads + 31) / 32, 0);
  b.slots.assign((nthreads + 31) / 32, std::vector<uint64_t>(32, 0));
  g_block = &b;
  for (unsigned i = 0; i < nthreads; ++i) {
    Thread& t = b.th[i];
    t.idx.x = i % shape.x;
    t.idx.y = (i / shape.x) % shape.y;
    t.idx.z = i / (shape.x * shape.y);
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
      if (!_setjmp(b.sched_jb)) {
        if (t->started) _longjmp(t->jb, 1);
        t->started = true;
        swapcontext(&b.sched, &t->ctx);
      }
    }
  }
  g_block = nullptr;
}

inline void run_block(unsigned nthreads, const std::function<void()>& body) {
  dim3 shape;
  shape.x = nthreads;
  run_block(shape, body);
}

// A `__shared__ T name[N];` of the kernel (cpu_sim rewrites it into a call of this): every thread
// of the block gets the same bytes for its n-th declaration, carved from g_static_smem, which
// the harness poisons with NaN before each block. Only the last array ends at the guard page.
inline void* static_shared(size_t bytes, size_t align) {
  Block& b = *g_block;
  const size_t i = (size_t)cur()->static_calls++;
  if (i == b.static_offsets.size()) {
    const size_t at = (b.static_top + align - 1) / align * align;
    if (at + bytes > g_static_smem_bytes) fail("static __shared__ arrays exceed 48 KiB");
    b.static_offsets.push_back(at);
    b.static_top = at + bytes;
  }
  return g_static_smem + b.static_offsets[i];
}

// A buffer whose last byte sits right before a PROT_NONE page: overruns crash (SIGSEGV). A
// second PROT_NONE page sits before the page-rounded span, and the slack between that page and
// the buffer's first byte reads NaN (0xff bytes): a small negative index reads poison, a large
// one crashes. `name` is what the SIGSEGV handler (install_fault_report) calls the buffer.
struct Guarded { const char* name; char* first; size_t bytes; };
inline std::vector<Guarded> g_guarded;

inline void* guarded_alloc(size_t bytes, const char* name = "a buffer") {
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  const size_t span = (bytes + page - 1) / page * page;
  char* base = (char*)mmap(nullptr, span + 2 * page, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) fail("mmap");
  mprotect(base, page, PROT_NONE);
  mprotect(base + page + span, page, PROT_NONE);
  char* first = base + page + span - bytes;
  std::memset(base + page, 0xff, span - bytes);
  g_guarded.push_back({name, first, bytes});
  return first;
}

// SIGSEGV (a guard page was touched) becomes one sentence naming the buffer, the block and the
// thread, on stderr, and exit code 4 (cpu_sim turns it into the reader's message).
inline void fault_report(int, siginfo_t* info, void*) {
  const char* at = static_cast<const char*>(info->si_addr);
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  const dim3 t = g_block && g_block->cur ? g_block->cur->idx : dim3{};
  // Past an end first: guard pages of neighbouring mappings can touch, and a thread that runs
  // off the end of one buffer is the likelier story than one that starts before the next.
  for (const Guarded& g : g_guarded) {
    const char* end = g.first + g.bytes;
    if (at < end || at >= end + page) continue;
    std::fprintf(stderr, "sim: out of bounds: %s is %zu bytes long; block (%u,%u,%u) thread "
                 "(%u,%u,%u) touched byte %zu, %zu bytes past its end\n", g.name, g.bytes,
                 g_blockIdx.x, g_blockIdx.y, g_blockIdx.z, t.x, t.y, t.z,
                 (size_t)(at - g.first), (size_t)(at - end));
    std::fflush(stderr);
    _exit(4);
  }
  for (const Guarded& g : g_guarded) {
    const size_t slack = (g.bytes + page - 1) / page * page - g.bytes;
    if (at >= g.first || at < g.first - slack - page) continue;
    std::fprintf(stderr, "sim: out of bounds: %s: block (%u,%u,%u) thread (%u,%u,%u) touched "
                 "an address %zu bytes before its first byte\n", g.name,
                 g_blockIdx.x, g_blockIdx.y, g_blockIdx.z, t.x, t.y, t.z,
                 (size_t)(g.first - at));
    std::fflush(stderr);
    _exit(4);
  }
  std::fprintf(stderr, "sim: segmentation fault at an address outside every buffer (block "
               "(%u,%u,%u) thread (%u,%u,%u))\n", g_blockIdx.x, g_blockIdx.y, g_blockIdx.z,
               t.x, t.y, t.z);
  std::fflush(stderr);
  _exit(4);
}

inline void install_fault_report() {
  static std::vector<char> alt(1 << 16);
  stack_t ss{};
  ss.ss_sp = alt.data();
  ss.ss_size = alt.size();
  sigaltstack(&ss, nullptr);
  struct sigaction sa{};
  sa.sa_sigaction = fault_report;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigaction(SIGSEGV, &sa, nullptr);
  sigaction(SIGBUS, &sa, nullptr);
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
template <typename V> V __shfl_down_sync(unsigned m, V v, unsigned d) {
  const int lane = ::sim::cur()->lane;
  return ::sim::exchange(m, v, lane + (int)d < 32 ? lane + (int)d : lane);
}
template <typename V> V __shfl_up_sync(unsigned m, V v, unsigned d) {
  const int lane = ::sim::cur()->lane;
  return ::sim::exchange(m, v, lane >= (int)d ? lane - (int)d : lane);
}
// Fibers never preempt one another, so a read-modify-write is atomic here as on the GPU.
template <typename V> V atomicAdd(V* p, V v) { V old = *p; *p = old + v; return old; }
template <typename V> V atomicMax(V* p, V v) { V old = *p; *p = old > v ? old : v; return old; }
template <typename V> V __ldg(const V* p) { return *p; }
inline float __expf(float x) { return std::exp(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
constexpr int warpSize = 32;
