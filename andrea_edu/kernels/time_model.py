"""A lower-bound time MODEL for each kernel, from its SASS counts and published hardware limits.

Chapter "From one block per head to FlashAttention: a kernel worklog". This is a model, not a
measurement and not a forecast: every number it returns carries kind="model", and the chapter
draws it unlike any measurement. It answers "how fast could this code be at best on this GPU";
beside every bound it sets what published kernels of the same design reach (PUBLISHED), so a
reader sees where real kernels land, and the day a GPU file exists the chapter shows
measured / model.

    model_bound(version, B, nh, T, head_dim, causal=True, dtype=torch.bfloat16, gpu="H200")
        -> dict(kind="model", seconds, bound_by, terms={...}, counts={...}, gpu, clock_hz,
                published=[...], above_published, ...)
    launch_work(version, B, nh, T, causal, head_dim) -> warp-tiles of one launch
    clock_hz(gpu)   the one clock of every term: the one behind the stated tensor peak
    published_band(version, gpu, causal, useful_flops) -> published kernels' throughput as times
    GPUS, TENSOR_CEILING, PUBLISHED: the published limits and anchors used, each with its source.

The bound is the largest of five times, each a lower bound on its own (perfect overlap of the
others, every SM busy, no bank conflicts, no tail effects), all at one clock f = clock_hz(gpu):
    issue     all warp-instructions / (SMs x 4 schedulers x 1 instruction per clock x f)
    tensor    HMMA.16816 count x 4096 FLOPs / tensor ceiling (TENSOR_CEILING: on Hopper no
              rate for mma.sync is published; the model assumes the dense peak, which can only
              make the term smaller, so it stays a lower bound)
    smem      shared-memory bytes / (SMs x 128 bytes per clock x f)
    mufu      MUFU.EX2 count x 32 lanes / (SMs x 16 results per clock x f)
    hbm       compulsory DRAM traffic (read Q, K, V once, write O once) / DRAM bandwidth
The per-tile counts are those of kernels.sass.evidence (one warp, one full K/V tile), multiplied
by the number of warp-tiles the launch runs (launch_work); tiles that need a mask cost more than
the model says, which keeps it a lower bound. One exception in the counts: kernels.sass counts
v1's broadcast reads of its query tile (every lane, one address) at full width, which
overstates v1's bytes, so v1's smem term uses v1_smem_floor instead: the bytes v1 cannot avoid
(each lane's own K and V words, the staging stores), never more than the SASS count.
The clock: NVIDIA states the dense tensor peak at the clock the tensor cores sustain (1.83 GHz
on an H100/H200 SXM, below the 1.98 GHz maximum boost). The model uses that one clock for every
term; a chip that boosts higher while its tensor cores idle could beat the clocked terms by
that ratio, which the chapter says where it matters.
"""
from __future__ import annotations

from typing import Any

import torch

# The tables below, as the type checker reads them (the chapter shows them from `GPUS = {` on).
GPUS: dict[str, dict[str, Any]]
TENSOR_CEILING: dict[str, dict[str, Any]]
PUBLISHED: list[dict[str, Any]]

# Published limits. tensor_flops: the dense fp16/bf16 tensor peak with fp32 accumulation;
# tensor_flops_per_clock_per_sm: the per-SM rate behind it; the clock is derived from the two.
GPUS = {
    "H200": dict(
        name="NVIDIA H200 (SXM)", arch="sm_90", sms=132,
        # H200 datasheet (nvidia.com/en-us/data-center/h200): FP16/BF16 tensor core 1,979
        # TFLOPS *with sparsity*, so 989.5 TFLOPS dense; GPU memory bandwidth 4.8 TB/s.
        # SMs: NVIDIA H100 Tensor Core GPU Architecture whitepaper (GH100 in SXM5: 132 SMs; the
        # H200 is the same GH100 with HBM3e). Per-SM rate: the A100 whitepaper gives an A100 SM
        # 1,024 dense FP16 FMA per clock; the H100 whitepaper gives an H100 SM twice A100's
        # dense MMA rate clock for clock: 2,048 FMA = 4,096 FLOPs per clock per SM. So the
        # peak is 132 x 4,096 x 1.83 GHz (NVIDIA's cudnn-frontend benchmark table, PR #650,
        # states the same product for sm90).
        tensor_flops=989.5e12, tensor_flops_per_clock_per_sm=4096, dram_bytes_s=4.8e12,
        # CUDA C++ Programming Guide: an SM of compute capability 9.0 has 4 warp schedulers,
        # each issuing one instruction per clock; shared memory has 32 banks of 4 bytes, each
        # serving one 32-bit word per clock (128 bytes per clock per SM); "Arithmetic
        # Instructions" throughput table: 16 results per clock per SM for exp2 (MUFU).
        issue_per_clock=4, smem_bytes_per_clock=128, mufu_per_clock=16),
    "RTX 4090": dict(
        name="NVIDIA GeForce RTX 4090", arch="sm_89", sms=128,
        # NVIDIA Ada GPU Architecture whitepaper (AD102, RTX 4090): 128 SMs; peak FP16 tensor
        # TFLOPS with FP32 accumulate 165.2 (dense) at its 2,520 MHz boost clock, i.e. 512
        # FLOPs per clock per SM (half the FP16-accumulate rate); memory 1,008 GB/s.
        tensor_flops=165.2e12, tensor_flops_per_clock_per_sm=512, dram_bytes_s=1.008e12,
        # CUDA C++ Programming Guide, compute capability 8.9: same per-SM rates as above.
        issue_per_clock=4, smem_bytes_per_clock=128, mufu_per_clock=16),
}
HMMA_FLOPS = 2 * 16 * 8 * 16          # one HMMA.16816: m16 n8 k16 multiply-adds, 2 FLOPs each


def clock_hz(gpu: str) -> float:
    """The one clock of every term: the clock at which the stated dense tensor peak is reached,
    peak / (SMs x per-SM tensor FLOPs per clock): 1.830 GHz for the H200, 2.521 GHz for the
    RTX 4090."""
    g = GPUS[gpu]
    return g["tensor_flops"] / (g["sms"] * g["tensor_flops_per_clock_per_sm"])


for _g in GPUS.values():       # stored too, for readers of GPUS; clock_hz() is the definition
    _g["clock_hz"] = _g["tensor_flops"] / (_g["sms"] * _g["tensor_flops_per_clock_per_sm"])

# The ceiling the tensor term divides by, for the instruction v2 and v3 issue (HMMA.16816, from
# WMMA or mma.sync), per GPU. published: whether a source states this instruction's rate.
TENSOR_CEILING = {
    "H200": dict(
        flops=GPUS["H200"]["tensor_flops"], published=False, instruction="HMMA.16816 (mma.sync)",
        note="NVIDIA states Hopper's dense peak for its warpgroup instruction (wgmma) and "
             "publishes no rate for mma.sync; microbenchmark studies of Hopper's tensor cores "
             "(e.g. Luo et al., \"Benchmarking and Dissecting the Nvidia Hopper GPU "
             "Architecture\", arXiv:2402.13499, on an H800) set mma.sync beside wgmma, and "
             "public tests disagree on the share of the peak mma.sync reaches. The model assumes the dense peak: an optimistic ceiling, so the tensor "
             "term stays a lower bound, and a register-only mma.sync loop on a GPU settles it."),
    "RTX 4090": dict(
        flops=GPUS["RTX 4090"]["tensor_flops"], published=True,
        instruction="HMMA.16816 (mma.sync)",
        note="Ada has no warpgroup instruction: the whitepaper's dense peak is the rate of "
             "the warp-level mma that v2 and v3 issue."),
}

# What published kernels reach, as anchors beside the model (never a measurement of ours).
# FlashAttention-3 paper (Shah et al. 2024, arXiv:2407.08608), forward pass on an H100 80GB
# SXM5, fp16, head_dim 64, sequence length 1k (batch 16, 32 heads), TFLOP/s by causal flag.
# FlashAttention-2 issues mma.sync with S and P in registers: v3's design and instruction.
PUBLISHED = [
    dict(kernel="FlashAttention-2", instruction="mma.sync", same_design_as=("v3",),
         gpu="H100 SXM5", dtype="fp16", head_dim=64, T=1024,
         tflops={False: 306.0, True: 229.0},
         source="FlashAttention-3 paper (arXiv:2407.08608), forward, head_dim 64, seq 1k"),
    dict(kernel="cuDNN", instruction="wgmma", same_design_as=(), gpu="H100 SXM5", dtype="fp16",
         head_dim=64, T=1024, tflops={False: 373.0, True: 288.0},
         source="FlashAttention-3 paper (arXiv:2407.08608), forward, head_dim 64, seq 1k"),
    dict(kernel="FlashAttention-3", instruction="wgmma", same_design_as=(), gpu="H100 SXM5",
         dtype="fp16", head_dim=64, T=1024, tflops={False: 392.0, True: 265.0},
         source="FlashAttention-3 paper (arXiv:2407.08608), forward, head_dim 64, seq 1k"),
]
PUBLISHED_GPU: dict[str, str] = {"H200": "H100 SXM5"}   # the H200 is an H100 SXM5's GH100 with more bandwidth


def published_band(version: str, gpu: str, causal: bool, useful_flops: float,
                   head_dim: int = 64) -> list[dict]:
    """The published anchors for this GPU and head_dim as times for `useful_flops`: [{kernel,
    instruction, same_design, tflops, seconds, source, where}], the same design first. [] where
    the book cites none (the RTX 4090; head_dims other than the anchors' 64)."""
    if PUBLISHED_GPU.get(gpu) is None:
        return []
    rows = [dict(kernel=p["kernel"], instruction=p["instruction"],
                 same_design=version in p["same_design_as"], tflops=p["tflops"][causal],
                 seconds=useful_flops / (p["tflops"][causal] * 1e12), source=p["source"],
                 where=f"{p['gpu']}, {p['dtype']}, head_dim {p['head_dim']}, T={p['T']}")
            for p in PUBLISHED if p["gpu"] == PUBLISHED_GPU[gpu] and p["head_dim"] == head_dim]
    return sorted(rows, key=lambda r: (not r["same_design"], r["kernel"]))


def v1_smem_floor(head_dim: int) -> int:
    """Shared-memory bytes one v1 warp cannot avoid per full K/V tile (kernels/v1.py's
    smem_floor, the spec's own; see there)."""
    from andrea_edu.kernels import registry
    v1 = registry.get("v1")
    assert v1.smem_floor is not None
    return v1.smem_floor(head_dim, v1.constants())


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
    smem_tile = evidence["smem_bytes_per_tile"]
    from andrea_edu.kernels import registry
    spec = registry.get(version)
    if spec.smem_floor is not None:           # the SASS count overstates v1: use the floor
        smem_tile = min(smem_tile, spec.smem_floor(head_dim, spec.constants()))
    counts = dict(instructions=n * per["total"], hmma=n * per["HMMA"],
                  smem_bytes=n * smem_tile, smem_bytes_sass=n * evidence["smem_bytes_per_tile"],
                  mufu_ex2=n * per["MUFU.EX2"])
    es = torch.empty((), dtype=dtype).element_size()
    counts["dram_bytes"] = 4 * B * nh * T * head_dim * es   # Q, K, V read + O written once
    f = clock_hz(gpu)
    clk = g["sms"] * f
    ceiling = TENSOR_CEILING[gpu]
    terms = dict(issue=counts["instructions"] / (g["issue_per_clock"] * clk),
                 tensor=counts["hmma"] * HMMA_FLOPS / ceiling["flops"],
                 smem=counts["smem_bytes"] / (g["smem_bytes_per_clock"] * clk),
                 mufu=counts["mufu_ex2"] * 32 / (g["mufu_per_clock"] * clk),
                 hbm=counts["dram_bytes"] / g["dram_bytes_s"])
    bound_by = max(terms, key=lambda t: terms[t])
    useful = 4 * B * nh * T * T * head_dim * (0.5 if causal else 1.0)  # QK^T and PV FLOPs
    tflops = useful / terms[bound_by] / 1e12
    band = published_band(version, gpu, causal, useful, head_dim)
    # The fastest published kernel with the same tensor instruction (mma.sync) on this GPU.
    same_instr = [b for b in band if b["instruction"] == "mma.sync"]
    return dict(kind="model", label="model (lower bound from SASS counts)", version=version,
                gpu=g["name"], gpu_key=gpu, B=B, n_head=nh, T=T, head_dim=head_dim,
                causal=causal, dtype=str(dtype).replace("torch.", ""), seconds=terms[bound_by],
                bound_by=bound_by, terms=terms, counts=counts, work=w, clock_hz=f,
                tensor_ceiling=ceiling, useful_flops=useful, model_tflops=tflops,
                published=band,
                above_published=bool(same_instr) and tflops > max(b["tflops"]
                                                                   for b in same_instr))


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
    try:  # before the report's compilations: an unwritable --out is one line, exit status 2
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".write-test.{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        ap.error(f"--out: {args.out} is not a writable folder ({e.strerror or e})")
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
