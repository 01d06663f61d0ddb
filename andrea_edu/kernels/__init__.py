"""The CUDA kernels and everything that knows them (Part "The GPU" of the book).

    spec       KernelSpec: what a kernel version is, in one record (name, source, who may run
               it and why not, tiles, grid, shared memory, emulator block, SASS plan, work)
    v1, v2, v3 one spec module beside each .cu file
    v3pad      the padded v3 (attention_v3_flash.cu with RD < HD): a head_dim run inside the next
               multiple of 16, zeros in the pad (backend "cuda-flash-padded", pad=True)
    registry   the list of the specs, in the dispatcher's order of preference
    block_steps  the emulator's pieces: staged tiles, masks, one online-softmax step
    limits     what every backend accepts (shapes, dtypes), and each kernel's limits gathered
    toolkit    where NVRTC and its headers come from (pip wheels), the .cu sources, their constants
    nvrtc      run-time compilation: PTX, CUBIN, registers, shared memory, SASS, the disk cache
    launch     launching a compiled kernel on torch's current stream (needs a GPU)
    gpus       the one GPU table: SMs, per-SM limits, peaks and clocks of every GPU named, cited
    occupancy  blocks per SM and grid fill on H200, RTX 4090, A100, T4, RTX 3090, L4, H100
    targets    what runs where: each reader's GPU (T4 sm_75 .. H200 sm_90), the kernels the
               dispatcher runs there, their registers and occupancy (a table, a line per chapter)
    grid       the launch grid of each kernel, drawn block by block
    tiles      tile coverage, padding, MMA shapes, SDPA's head_dim rules
    emulator   the kernels' grid, tiles and online softmax, run block by block on the CPU
    cpu_sim    a kernel's own CUDA C++ compiled by g++ against stand-in headers and run on the CPU,
               one fiber per CUDA thread (host_sim/: the simulator; backend="cpu-sim")
    sass       SASS evidence: the instruction mix and shared-memory bytes of one warp's K/V tile
    time_model a time MODEL per kernel (a bracket: all terms overlapped .. none) from those
               counts and published GPU limits
    head_dim_evidence  per head_dim: the kernel the dispatcher runs, its compiled evidence and
               its MODEL band (the head_dim slider)
    *.cu       attention_v1.cu (one block per (batch, head)), attention_v2_wmma.cu (tensor cores),
               attention_v3_flash.cu (FlashAttention-2 style: mma.sync, ldmatrix, cp.async)

Chapters: "How CUDA stores the heads", "One kernel, many heads", "The configuration mirrors the
hardware", "Why twelve heads, not one wider head". Nothing here imports the dispatcher
(andrea_edu.dispatch): the dispatcher imports this.

The names below are the API a chapter calls: `from andrea_edu import kernels` then
`kernels.compile_attention(...)`.
"""
from andrea_edu.kernels.launch import (DriverTooOldError, GpuUnavailableError, device_info,
                                       has_gpu, launch_attention)
from andrea_edu.kernels.limits import (V1_MAX_HEAD_DIM, V2_DTYPES, V2_HEAD_DIMS, V3_DTYPES,
                                      V3_HEAD_DIMS)
from andrea_edu.kernels.nvrtc import (ARCHS, V1_CHUNK_SIZES, CompiledKernel, Resources, cache_dir,
                                      compile_all, compile_attention, parse_ptxas_log,
                                      shared_bytes, specializations)
from andrea_edu.kernels.occupancy import A100, H200, RTX_4090, blocks_per_sm
from andrea_edu.kernels.toolkit import (CompileError, NvrtcUnavailableError, find_binary,
                                        include_dirs, kernel_constants, kernel_source,
                                        nvrtc_version)

__all__ = ["ARCHS", "A100", "CompileError", "CompiledKernel", "DriverTooOldError",
           "GpuUnavailableError", "H200", "NvrtcUnavailableError", "RTX_4090", "Resources",
           "V1_CHUNK_SIZES", "V1_MAX_HEAD_DIM", "V2_DTYPES", "V2_HEAD_DIMS", "V3_DTYPES",
           "V3_HEAD_DIMS", "blocks_per_sm",
           "cache_dir", "compile_all", "compile_attention", "device_info", "find_binary",
           "has_gpu", "include_dirs", "kernel_constants", "kernel_source", "launch_attention",
           "nvrtc_version", "parse_ptxas_log", "shared_bytes", "specializations"]
