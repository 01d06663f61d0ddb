"""The tensor-core ceiling the time model needs, measured: a register-only loop of
mma.sync.m16n8k16 (bf16 in, fp32 accumulate) and the same with WMMA 16x16x16, on non-zero
operands, over every SM. Seconds of GPU time.

    python scripts/gpu_mma_ceiling.py [--out FILE.json]     on a GPU: TFLOP/s, % of this GPU's
                                                            dense peak (kernels.gpus, by its
                                                            device name and SM count)
    python scripts/gpu_mma_ceiling.py --compile-only        anywhere: NVRTC compiles both loops for
                                                            sm_90 and their PTX holds the
                                                            instructions (the CPU rehearsal)

Why: public sources disagree on what fraction of the H100/H200 dense bf16 peak (989.5 TFLOP/s,
kernels.time_model.GPUS) a warp-level mma.sync loop reaches (about 63-65 % by a microbenchmark
paper on H800; near 100 % by a zero-operand WMMA peak test on H100 NVL). Each warp runs 8
independent accumulator chains (no dependence stalls), 4 warps per block, 8 blocks per SM.
FLOPs: 2*16*8*16 = 4096 per mma.sync.m16n8k16, 2*16*16*16 = 8192 per WMMA 16x16x16.
Exit status 0 measured (or compiled), 1 a step failed, 2 no GPU (nothing launched).
"""
from __future__ import annotations

import ctypes
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SOURCE = r"""
#include <cuda_bf16.h>
#include <mma.h>
using namespace nvcuda;

extern "C" __global__ void __launch_bounds__(128) mma_sync_loop(float* out, int iters) {
  const unsigned t = threadIdx.x + 1u;
  __nv_bfloat162 pa = __floats2bfloat162_rn(0.001f * (t & 7u), 0.002f);
  __nv_bfloat162 pb = __floats2bfloat162_rn(0.003f, 0.001f * (t & 3u));
  unsigned a = *reinterpret_cast<unsigned*>(&pa), b = *reinterpret_cast<unsigned*>(&pb);
  float c[8][4];
  #pragma unroll
  for (int j = 0; j < 8; ++j) { c[j][0] = c[j][1] = c[j][2] = c[j][3] = 0.f; }
  for (int i = 0; i < iters; ++i) {
    #pragma unroll
    for (int j = 0; j < 8; ++j) {
      asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                   "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                   : "+f"(c[j][0]), "+f"(c[j][1]), "+f"(c[j][2]), "+f"(c[j][3])
                   : "r"(a), "r"(b), "r"(a), "r"(b), "r"(a), "r"(b));
    }
  }
  float s = 0.f;
  #pragma unroll
  for (int j = 0; j < 8; ++j) s += c[j][0] + c[j][1] + c[j][2] + c[j][3];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

extern "C" __global__ void __launch_bounds__(128) wmma_loop(float* out, int iters) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc[4];
  wmma::fill_fragment(fa, __float2bfloat16(0.001f * (threadIdx.x & 7u)));
  wmma::fill_fragment(fb, __float2bfloat16(0.003f));
  #pragma unroll
  for (int j = 0; j < 4; ++j) wmma::fill_fragment(fc[j], 0.f);
  for (int i = 0; i < iters; ++i) {
    #pragma unroll
    for (int j = 0; j < 4; ++j) wmma::mma_sync(fc[j], fa, fb, fc[j]);
  }
  float s = 0.f;
  #pragma unroll
  for (int j = 0; j < 4; ++j)
    for (int e = 0; e < fc[j].num_elements; ++e) s += fc[j].x[e];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
"""
KERNELS = {"mma_sync_loop": (8, 4096), "wmma_loop": (4, 8192)}  # chains per warp, FLOPs per op
THREADS, BLOCKS_PER_SM = 128, 8


def compile_ptx_cubin(arch: str = "sm_90") -> tuple[str, bytes]:
    from andrea_edu.kernels import toolkit as tk
    nvrtc = tk._import_nvrtc()
    opts = [f"--gpu-architecture={arch}", "--std=c++17", "-default-device"] + \
        [f"-I{d}" for d in tk.include_dirs()]
    prog = tk._call(nvrtc, "nvrtcCreateProgram",
                    nvrtc.nvrtcCreateProgram(SOURCE.encode(), b"mma_ceiling.cu", 0, [], []))
    try:
        err, = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise RuntimeError(f"NVRTC could not compile the ceiling loops:\n"
                               f"{tk._program_log(nvrtc, prog)}")
        ptx = b" " * tk._call(nvrtc, "nvrtcGetPTXSize", nvrtc.nvrtcGetPTXSize(prog))
        tk._call(nvrtc, "nvrtcGetPTX", nvrtc.nvrtcGetPTX(prog, ptx))
        cubin = b" " * tk._call(nvrtc, "nvrtcGetCUBINSize", nvrtc.nvrtcGetCUBINSize(prog))
        tk._call(nvrtc, "nvrtcGetCUBIN", nvrtc.nvrtcGetCUBIN(prog, cubin))
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    return ptx.rstrip(b"\x00").decode(), cubin


def measure(cubin: bytes, iters: int = 4096) -> dict:
    import torch
    from cuda.bindings import driver as drv

    def ok(res, what):
        err, *rest = res
        if err != drv.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"{what} failed: {drv.cuGetErrorName(err)[1]}")
        return rest[0] if rest else None

    torch.cuda.init()
    torch.cuda.synchronize()                      # torch's primary context exists and is current
    ok(drv.cuInit(0), "cuInit")
    dev = ok(drv.cuDeviceGet(torch.cuda.current_device()), "cuDeviceGet")
    ctx = ok(drv.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
    ok(drv.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    module = ok(drv.cuModuleLoadData(cubin), "cuModuleLoadData")
    props = torch.cuda.get_device_properties(0)
    blocks = props.multi_processor_count * BLOCKS_PER_SM
    out = torch.empty(blocks * THREADS, device="cuda")
    stream = torch.cuda.current_stream().cuda_stream
    res: dict = dict(gpu=props.name, sms=props.multi_processor_count, blocks=blocks,
                     threads_per_block=THREADS, iters=iters)
    for name, (chains, flops_per_op) in KERNELS.items():
        func = ok(drv.cuModuleGetFunction(module, name.encode()), "cuModuleGetFunction")
        args = [ctypes.c_void_p(out.data_ptr()), ctypes.c_int(iters)]
        params = (ctypes.c_void_p * 2)(*[ctypes.addressof(a) for a in args])

        def launch():
            ok(drv.cuLaunchKernel(func, blocks, 1, 1, THREADS, 1, 1, 0, drv.CUstream(stream),
                                  ctypes.addressof(params), 0), f"cuLaunchKernel({name})")

        launch()                                   # warm-up
        times = []
        for _ in range(5):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            launch()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        warps = blocks * THREADS // 32
        flops = warps * iters * chains * flops_per_op
        best = min(times)
        finite = bool(torch.isfinite(out).all()) and bool((out != 0).any())
        res[name] = dict(seconds=best, tflops=flops / best / 1e12, operands_nonzero=finite)
    return res


def main(argv: list[str]) -> int:
    compile_only = "--compile-only" in argv
    out_path = None
    rest = [a for a in argv if a != "--compile-only"]
    if rest[:1] == ["--out"]:   # checked before any work: one line, status 2
        if len(rest) < 2 or rest[1].startswith("-") or not rest[1]:
            print("gpu_mma_ceiling: --out needs a file name (e.g. --out mma.json)",
                  file=sys.stderr)
            return 2
        out_path, rest = Path(rest[1]), rest[2:]
        if not out_path.parent.is_dir():
            print(f"gpu_mma_ceiling: --out {str(out_path)!r}: its folder does not exist",
                  file=sys.stderr)
            return 2
    if rest:
        print(f"gpu_mma_ceiling: unknown argument {rest[0]!r} (allowed: --out FILE.json, "
              f"--compile-only)", file=sys.stderr)
        return 2
    ptx, cubin = compile_ptx_cubin("sm_90")
    n_mma = ptx.count("mma.sync.aligned.m16n8k16")
    n_wmma = ptx.count("wmma.mma.sync")
    if not n_mma or not n_wmma:
        print(f"gpu_mma_ceiling: the PTX holds {n_mma} mma.sync.m16n8k16 and {n_wmma} "
              f"wmma.mma.sync lines; both loops need some", file=sys.stderr)
        return 1
    print(f"compiled for sm_90: {n_mma} mma.sync.m16n8k16 and {n_wmma} wmma.mma.sync lines in "
          f"the PTX, {len(cubin)} bytes of CUBIN")
    import torch
    if compile_only or not torch.cuda.is_available():
        print("skipped: no GPU" if not torch.cuda.is_available() else "compile only")
        return 0 if compile_only else 2
    cap = torch.cuda.get_device_capability()
    if cap != (9, 0):
        print(f"compiled for sm_90 but this GPU is sm_{cap[0]}{cap[1]}: not measured")
        return 2
    res = measure(cubin)
    from andrea_edu.kernels import gpus
    props = torch.cuda.get_device_properties(0)
    key = gpus.by_device_name(props.name, props.multi_processor_count)   # this GPU's own row
    peak = gpus.GPUS[key].get("tensor_flops") if key else None
    for name in KERNELS:
        r = res[name]
        r["pct_of_dense_peak"] = 100 * r["tflops"] / peak if peak else None
        share = (f" = {r['pct_of_dense_peak']:.0f} % of the {peak / 1e12:.1f} TFLOP/s dense bf16 "
                 f"peak of the {key}" if peak else
                 f" (the book cites no dense peak for {props.name}: no share stated)")
        print(f"{name}: {r['tflops']:.0f} TFLOP/s{share} (measured; operands non-zero: "
              f"{r['operands_nonzero']})")
    res["dense_peak_tflops"] = peak / 1e12 if peak else None
    res["gpu"] = props.name
    res["n_wmma_ptx_lines"] = n_wmma
    if out_path:
        out_path.write_text(json.dumps(res, indent=1))
    return 0 if all(math.isfinite(res[n]["tflops"]) for n in KERNELS) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
