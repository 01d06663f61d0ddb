// launch.h: the generic main of andrea_edu.kernels.cpu_sim. The translation unit that includes it
// holds the kernel's source and `void sim_launch(void* const* p, const double* s)`, which calls
// the kernel with buffer p[i] and scalar s[j] arguments (cpu_sim writes it). Run as
//     ./kernel JOB
// where JOB is a text file, one item a line:
//     grid X Y Z / block X Y Z / smem BYTES / seed N / smem_fill nan|zero
//     buffers N, then N lines: BYTES FILL(nan|zero|file) IN_PATH|- OUT_PATH|- NAME
//     scalars M, then M lines: VALUE (as a double)
// Each buffer is guarded (guarded_alloc); shared memory (dynamic and static) is filled with
// smem_fill before every block. Exit codes: 0 done, 3 the simulator refused (its message on
// stderr: deadlock, bad shuffle mask, WMMA/ldmatrix alignment), 4 out of bounds, 2 a bad job.
#pragma once
#include <fstream>
#include <iterator>
#include <string>

void sim_launch(void* const* p, const double* s);

int main(int argc, char** argv) {
  if (argc != 2) { std::fprintf(stderr, "usage: kernel JOB\n"); return 2; }
  std::ifstream job(argv[1]);
  std::string key, fill;
  dim3 grid, block;
  size_t smem = 0;
  unsigned long seed = 0;
  int n = 0, m = 0;
  job >> key >> grid.x >> grid.y >> grid.z >> key >> block.x >> block.y >> block.z;
  job >> key >> smem >> key >> seed >> key >> fill >> key >> n;
  if (!job || n < 0) { std::fprintf(stderr, "sim: unreadable job file\n"); return 2; }
  const int smem_byte = fill == "zero" ? 0 : 0xff;
  sim::install_fault_report();
  sim::g_rng.seed(seed);
  std::vector<void*> ptrs(n);
  std::vector<size_t> sizes(n);
  std::vector<std::string> outs(n), names(n);
  for (int i = 0; i < n; ++i) {
    std::string how, in;
    job >> sizes[i] >> how >> in >> outs[i] >> names[i];
    char* label = new char[names[i].size() + 1];
    std::strcpy(label, names[i].c_str());
    ptrs[i] = sim::guarded_alloc(sizes[i] ? sizes[i] : 1, label);
    if (how == "file") {
      std::ifstream f(in, std::ios::binary);
      f.read(static_cast<char*>(ptrs[i]), (std::streamsize)sizes[i]);
      if ((size_t)f.gcount() != sizes[i]) { std::fprintf(stderr, "sim: short input %s\n", in.c_str()); return 2; }
    } else {
      std::memset(ptrs[i], how == "zero" ? 0 : 0xff, sizes[i]);
    }
  }
  job >> key >> m;
  std::vector<double> scalars(m > 0 ? m : 1);
  for (int j = 0; j < m; ++j) job >> scalars[j];
  if (!job) { std::fprintf(stderr, "sim: unreadable job file\n"); return 2; }
  void* shared = sim::guarded_alloc(smem ? smem : 1, "dynamic shared memory");
  constexpr size_t kStatic = 48 * 1024;
  sim::g_static_smem = static_cast<char*>(sim::guarded_alloc(kStatic, "static shared memory"));
  sim::g_static_smem_bytes = kStatic;
  sim::g_smem = shared;
  sim::g_smem_bytes = smem;
  sim::g_gridDim = grid;
  sim::g_blockDim = block;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        sim::g_blockIdx.x = x;
        sim::g_blockIdx.y = y;
        sim::g_blockIdx.z = z;
        std::memset(shared, smem_byte, smem);
        std::memset(sim::g_static_smem, smem_byte, kStatic);
        sim::run_block(block, [&] { sim_launch(ptrs.data(), scalars.data()); });
      }
  for (int i = 0; i < n; ++i)
    if (outs[i] != "-") {
      std::ofstream f(outs[i], std::ios::binary);
      f.write(static_cast<const char*>(ptrs[i]), (std::streamsize)sizes[i]);
    }
  return 0;
}
