"""A lower-bound time MODEL for each kernel, from its SASS counts and published hardware limits.

Chapter "From one block per head to FlashAttention: a kernel worklog". This is a model, not a
measurement: every number it returns carries kind="model", and the chapter draws it unlike any
measurement. It answers "how fast could this code be at best on this GPU", so that the day a GPU
file exists the chapter can show measured / model.

    model_bound(version, B, nh, T, head_dim, causal=True, dtype=torch.bfloat16, gpu="H200")
        -> dict(kind="model", seconds, bound_by, terms={...}, counts={...}, gpu, ...)
    launch_work(version, B, nh, T, causal, head_dim) -> warp-tiles of one launch
    GPUS: the published limits used, each with its source.

The bound is the largest of five times, each a lower bound on its own (perfect overlap of the
others, every SM busy, no bank conflicts, no tail effects):
    issue     all warp-instructions / (SMs x 4 schedulers x 1 instruction per clock x clock)
    tensor    HMMA.16816 count x 4096 FLOPs / dense fp16/bf16 tensor peak
    smem      shared-memory bytes / (SMs x 128 bytes per clock x clock)
    mufu      MUFU.EX2 count x 32 lanes / (SMs x 16 results per clock x clock)
    hbm       compulsory DRAM traffic (read Q, K, V once, write O once) / DRAM bandwidth
The per-tile counts are those of kernels.sass.evidence (one warp, one full K/V tile), multiplied
by the number of warp-tiles the launch runs (launch_work); tiles that need a mask cost more than
the model says, which keeps it a lower bound for v2 and v3. For v1 the smem term can overstate
(its broadcast reads count at full width: kernels.sass): read v1's issue term as its bound.
"""
from __future__ import annotations


import torch

# Published limits. Clock: the boost clock of the whole chip.
GPUS = {
    "H200": dict(
        name="NVIDIA H200 (SXM)", arch="sm_90", sms=132, clock_hz=1.98e9,
        # H200 datasheet (nvidia.com/en-us/data-center/h200): FP16/BF16 tensor core 1,979
        # TFLOPS *with sparsity*, so 989.5 TFLOPS dense; GPU memory bandwidth 4.8 TB/s.
        # SMs and clock: NVIDIA H100 Tensor Core GPU Architecture whitepaper (GH100 in SXM5:
        # 132 SMs; the H200 is the same GH100 with HBM3e), boost 1.98 GHz.
        tensor_flops=989.5e12, dram_bytes_s=4.8e12,
        # CUDA C++ Programming Guide: an SM of compute capability 9.0 has 4 warp schedulers,
        # each issuing one instruction per clock; shared memory has 32 banks of 4 bytes, each
        # serving one 32-bit word per clock (128 bytes per clock per SM); "Arithmetic
        # Instructions" throughput table: 16 results per clock per SM for exp2 (MUFU).
        issue_per_clock=4, smem_bytes_per_clock=128, mufu_per_clock=16),
    "RTX 4090": dict(
        name="NVIDIA GeForce RTX 4090", arch="sm_89", sms=128, clock_hz=2.52e9,
        # NVIDIA Ada GPU Architecture whitepaper (AD102, RTX 4090): 128 SMs, boost 2.52 GHz,
        # peak FP16 tensor TFLOPS with FP32 accumulate 165.2 (dense); memory 1,008 GB/s.
        tensor_flops=165.2e12, dram_bytes_s=1.008e12,
        # CUDA C++ Programming Guide, compute capability 8.9: same per-SM rates as above.
        issue_per_clock=4, smem_bytes_per_clock=128, mufu_per_clock=16),
}
HMMA_FLOPS = 2 * 16 * 8 * 16          # one HMMA.16816: m16 n8 k16 multiply-adds, 2 FLOPs each


def launch_work(version: str, B: int, nh: int, T: int, causal: bool, head_dim: int) -> dict:
    """Blocks, K/V tiles and warp-tiles (one warp, one K/V tile) of one launch, from the .cu
    file's tile sizes (the same loops as the emulator): KernelSpec.launch_work."""
    from andrea_edu.kernels import registry
    return registry.get(version).launch_work(B, nh, T, causal, head_dim)


def model_bound(version: str, B: int, nh: int, T: int, head_dim: int, causal: bool = True,
                dtype=torch.bfloat16, gpu: str = "H200", evidence: dict | None = None) -> dict:
    """The lower-bound time model of one launch (module docstring). evidence: a
    kernels.sass.evidence dict to reuse (else computed for gpu's arch)."""
    if gpu not in GPUS:
        raise ValueError(f"gpu={gpu!r} is not one of {tuple(GPUS)}")
    g = GPUS[gpu]
    if evidence is None:
        from andrea_edu.kernels.sass import evidence as _evidence
        evidence = _evidence(version, head_dim, dtype, g["arch"])
    w = launch_work(version, B, nh, T, causal, head_dim)
    n = w["warp_tiles"]
    per = evidence["per_tile"]
    counts = dict(instructions=n * per["total"], hmma=n * per["HMMA"],
                  smem_bytes=n * evidence["smem_bytes_per_tile"], mufu_ex2=n * per["MUFU.EX2"])
    es = torch.empty((), dtype=dtype).element_size()
    counts["dram_bytes"] = 4 * B * nh * T * head_dim * es   # Q, K, V read + O written once
    clk = g["sms"] * g["clock_hz"]
    terms = dict(issue=counts["instructions"] / (g["issue_per_clock"] * clk),
                 tensor=counts["hmma"] * HMMA_FLOPS / g["tensor_flops"],
                 smem=counts["smem_bytes"] / (g["smem_bytes_per_clock"] * clk),
                 mufu=counts["mufu_ex2"] * 32 / (g["mufu_per_clock"] * clk),
                 hbm=counts["dram_bytes"] / g["dram_bytes_s"])
    bound_by = max(terms, key=terms.get)
    useful = 4 * B * nh * T * T * head_dim * (0.5 if causal else 1.0)  # QK^T and PV FLOPs
    return dict(kind="model", label="model (lower bound from SASS counts)", version=version,
                gpu=g["name"], B=B, n_head=nh, T=T, head_dim=head_dim, causal=causal,
                dtype=str(dtype).replace("torch.", ""), seconds=terms[bound_by],
                bound_by=bound_by, terms=terms, counts=counts, work=w,
                model_tflops=useful / terms[bound_by] / 1e12)


def report(head_dims=(32, 64, 96, 128), shape=(8, 12, 1024), causal: bool = True,
           dtype=torch.bfloat16, gpus=("H200", "RTX 4090")) -> dict:
    """SASS evidence and the model bound of every version at every head_dim, per GPU: what
    scripts/gpu_suite.sh stores beside the measurements (all of it labelled "model")."""
    from andrea_edu.kernels import registry
    from andrea_edu.kernels.sass import evidence
    B, nh, T = shape
    rows = []
    for gpu in gpus:
        for spec in registry.specs():
            version = spec.version
            for hd in head_dims:
                if spec.ineligibility(hd, dtype, None) is not None:
                    continue
                ev = evidence(version, hd, dtype, GPUS[gpu]["arch"])
                rows.append(dict(evidence=ev, model=model_bound(version, B, nh, T, hd, causal,
                                                                dtype, gpu, evidence=ev)))
    return dict(schema="andrea_edu.sass_model/1", kind="model",
                note="counts read from the compiled SASS; times are a lower-bound MODEL, not "
                     "measurements (andrea_edu.kernels.time_model)",
                shape=dict(B=B, n_head=nh, T=T, causal=causal,
                           dtype=str(dtype).replace("torch.", "")), rows=rows)


def main(argv=None) -> int:
    import argparse
    import json
    import os
    from pathlib import Path
    ap = argparse.ArgumentParser(prog="python -m andrea_edu.kernels.time_model",
                                 description="write sass_model.json: SASS evidence and the "
                                             "lower-bound time model of v1, v2, v3")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    obj = report()
    tmp = out / f".sass_model.json.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(obj, indent=1, default=str))
    os.replace(tmp, out / "sass_model.json")
    for r in obj["rows"]:
        ev, m = r["evidence"], r["model"]
        if ev["head_dim"] == 64:
            print(f"[model] {m['gpu']} {ev['version']} hd=64: {ev['per_tile']['total']} instr/"
                  f"warp-tile, {ev['smem_bytes_per_tile']} smem B/warp-tile, {ev['registers']} "
                  f"regs, {m['seconds'] * 1e6:.1f} us ({m['bound_by']}-bound, model)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
