"""A time MODEL for each kernel, a bracket from its SASS counts and published hardware limits.

Chapter "From one block per head to FlashAttention: a kernel worklog". This is a model, not a
measurement and not a forecast: every number it returns carries kind="model", and the chapter
draws it unlike any measurement. It answers "how fast could this code be at best on this GPU";
beside every bound it sets what published kernels of the same design reach (PUBLISHED), so a
reader sees where real kernels land, and the day a GPU file exists the chapter shows
measured / model.

    model_bound(version, B, nh, T, head_dim, causal=True, dtype=torch.bfloat16, gpu="H200")
        -> dict(kind="model", lower (= seconds), upper, bound_by (the largest term), terms={...},
                sms_busy, latency_bound, counts={...}, gpu, clock_hz, published=[...], ...)
    launch_work(version, B, nh, T, causal, head_dim) -> warp-tiles of one launch
    clock_hz(gpu)   the one clock of every term: the one behind the stated tensor peak
    published_band(version, gpu, causal, useful_flops) -> published kernels' throughput as times
    GPUS, TENSOR_CEILING, PUBLISHED: the published limits and anchors used, each with its source.

Each of five resources gives a time the launch cannot beat, all at one clock f = clock_hz(gpu),
on the SMs the grid really occupies (s = min(blocks, SMs): a 96-block grid on 132 SMs leaves 36
idle) and never less than its heaviest block alone on one SM (a block runs on one SM):
    issue     warp-instructions / (s x 4 schedulers x 1 instruction per clock x f); one block
              issues at most min(4, its warps) per clock
    tensor    HMMA.16816 count x 4096 FLOPs / (s/SMs x tensor ceiling) (TENSOR_CEILING: on
              Hopper no rate for mma.sync is published; the model assumes the dense peak, which
              can only make the term smaller)
    smem      shared-memory bytes / (s x 128 bytes per clock x f)
    mufu      MUFU.EX2 count x 32 lanes / (s x 16 results per clock x f)
    hbm       compulsory DRAM traffic (read Q, K, V once, write O once) / DRAM bandwidth
The MODEL is a bracket, not one number: `lower` is the largest term (every resource overlapped
perfectly with the others, as a warp that runs softmax while its tensor cores multiply would;
FlashAttention-2-style kernels do not get that, FlashAttention-3 was built to), `upper` the sum
of the terms (no overlap at all); model_terms(m, overlap) shows the five terms and either
combination. Neither bounds a real kernel from above: bank conflicts,
latency stalls and tails come on top. `latency_bound` marks a launch whose busy SMs hold no more
warps than schedulers: a stall of a dependent chain then loses issue slots, so latency, not the
issue rate, decides (v1 at B=8: one block of 4 warps per SM, a serial FMA chain).
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

import math
from typing import Any

import torch

from andrea_edu.kernels import gpus as _gpus

# The tables below, as the type checker reads them (the chapter shows them from `GPUS = {` on).
GPUS: dict[str, dict[str, Any]]
TENSOR_CEILING: dict[str, dict[str, Any]]
PUBLISHED: list[dict[str, Any]]

# The GPUs the model knows: the entries of the one GPU table (kernels.gpus, where each published
# limit is cited) that carry a tensor peak, DRAM bandwidth and per-SM rates.
GPUS = {key: _gpus.GPUS[key] for key in ("H200", "H100", "RTX 4090")}
HMMA_FLOPS = 2 * 16 * 8 * 16          # one HMMA.16816: m16 n8 k16 multiply-adds, 2 FLOPs each


def clock_hz(gpu: str) -> float:
    """The one clock of every term: the clock at which the stated dense tensor peak is reached,
    peak / (SMs x per-SM tensor FLOPs per clock): 1.830 GHz for the H200, 2.521 GHz for the
    RTX 4090 (kernels.gpus.clock_hz)."""
    if gpu not in GPUS:
        raise ValueError(f"gpu={gpu!r} is not one of {tuple(GPUS)}")
    return _gpus.clock_hz(gpu)


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
    # the H100 SXM: the same GH100 SM, clock and dense peak as the H200 (kernels.gpus), so the
    # same unpublished mma.sync rate; only the DRAM term differs (3.35 against 4.8 TB/s)
    "H100": dict(
        flops=GPUS["H100"]["tensor_flops"], published=False, instruction="HMMA.16816 (mma.sync)",
        note="as for the H200: NVIDIA states the dense peak for wgmma and no rate for mma.sync; "
             "the model assumes the dense peak (an optimistic ceiling, so a lower bound)."),
    "RTX 4090": dict(
        flops=GPUS["RTX 4090"]["tensor_flops"], published=True,
        instruction="HMMA.16816 (mma.sync)",
        note="Ada has no warpgroup instruction: the whitepaper's dense peak is the rate of "
             "the warp-level mma that v2 and v3 issue."),
}

# What published kernels reach, as anchors beside the model (never a measurement of ours).
# FlashAttention-3 paper (Shah et al. 2024, arXiv:2407.08608), Figure "Attention forward speed
# (FP16/BF16) on H100 SXM5": forward pass on an H100 80GB SXM5, fp16, sequence length 1k, the
# batch and heads that paper uses at every length (batch x seq = 16k tokens, n_head x head_dim =
# 2048: batch 16 with 32 heads at head_dim 64, 16 heads at head_dim 128), TFLOP/s by causal
# flag, read off the bars' labels. FlashAttention-2 issues mma.sync with S and P in registers:
# v3's design and instruction.
_FA3 = "FlashAttention-3 paper (arXiv:2407.08608), forward, seq 1k"
PUBLISHED = [
    dict(kernel="FlashAttention-2", instruction="mma.sync", same_design_as=("v3",),
         gpu="H100 SXM5", dtype="fp16", head_dim=64, T=1024, B=16, n_head=32,
         tflops={False: 306.0, True: 229.0}, source=_FA3),
    dict(kernel="cuDNN", instruction="wgmma", same_design_as=(), gpu="H100 SXM5", dtype="fp16",
         head_dim=64, T=1024, B=16, n_head=32, tflops={False: 373.0, True: 288.0}, source=_FA3),
    dict(kernel="FlashAttention-3", instruction="wgmma", same_design_as=(), gpu="H100 SXM5",
         dtype="fp16", head_dim=64, T=1024, B=16, n_head=32,
         tflops={False: 392.0, True: 265.0}, source=_FA3),
    dict(kernel="FlashAttention-2", instruction="mma.sync", same_design_as=("v3",),
         gpu="H100 SXM5", dtype="fp16", head_dim=128, T=1024, B=16, n_head=16,
         tflops={False: 350.0, True: 260.0}, source=_FA3),
    dict(kernel="cuDNN", instruction="wgmma", same_design_as=(), gpu="H100 SXM5", dtype="fp16",
         head_dim=128, T=1024, B=16, n_head=16, tflops={False: 574.0, True: 410.0}, source=_FA3),
    dict(kernel="FlashAttention-3", instruction="wgmma", same_design_as=(), gpu="H100 SXM5",
         dtype="fp16", head_dim=128, T=1024, B=16, n_head=16,
         tflops={False: 565.0, True: 423.0}, source=_FA3),
]
PUBLISHED_GPU: dict[str, str] = {"H200": "H100 SXM5",   # the H200 is an H100 SXM5's GH100 with more bandwidth
                                 "H100": "H100 SXM5"}
PUBLISHED_HEAD_DIMS = tuple(sorted({int(p["head_dim"]) for p in PUBLISHED}))


def published_band(version: str, gpu: str, causal: bool, useful_flops: float,
                   head_dim: int = 64, pairs: int | None = None) -> list[dict]:
    """The published anchors for this GPU and head_dim as times for `useful_flops`: [{kernel,
    instruction, same_design, tflops, seconds, source, where, extrapolated}], the same design
    first. [] where the book cites none (the RTX 4090; head_dims other than 64 and 128).
    The seconds are the published *rate* applied to this launch's work: when the launch has
    another number of (batch, head) pairs (`pairs`) than the published run, that conversion is
    an extrapolation (a rate measured on 512 pairs need not hold on 96), and `extrapolated`
    says so."""
    if PUBLISHED_GPU.get(gpu) is None:
        return []
    rows = []
    for p in PUBLISHED:
        if p["gpu"] != PUBLISHED_GPU[gpu] or p["head_dim"] != head_dim:
            continue
        n_pub = p["B"] * p["n_head"]
        extra = pairs is None or pairs != n_pub
        rows.append(dict(
            kernel=p["kernel"], instruction=p["instruction"],
            same_design=version in p["same_design_as"], tflops=p["tflops"][causal],
            seconds=useful_flops / (p["tflops"][causal] * 1e12), source=p["source"],
            published_pairs=n_pub, extrapolated=extra,
            where=f"{p['gpu']}, {p['dtype']}, head_dim {p['head_dim']}, T={p['T']}, measured at "
                  f"B={p['B']} x {p['n_head']} heads"
                  + (f"; converted to {pairs} pairs: an extrapolation" if extra and pairs
                     else "")))
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
    """The time MODEL of one launch (module docstring): `seconds` = `lower` (the largest term:
    every term overlapped), `upper` (the no-overlap sum), each term on the SMs the grid
    occupies. evidence: a kernels.sass.evidence dict to reuse (else computed for gpu's arch)."""
    if gpu not in GPUS:
        raise ValueError(f"gpu={gpu!r} is not one of {tuple(GPUS)}")
    g = GPUS[gpu]
    if evidence is None:
        from andrea_edu.kernels.sass import evidence as _evidence
        evidence = _evidence(version, head_dim, dtype, g["arch"])
    w = launch_work(version, B, nh, T, causal, head_dim)
    n, n_block = w["warp_tiles"], w["max_block_warp_tiles"]
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
    ceiling = TENSOR_CEILING[gpu]
    sms_busy = min(w["blocks"], g["sms"])       # SMs with at least one block: the rest idle
    warps = w["warps_per_block"]
    # Per-SM rates of the clocked terms; one block's warps issue at most one instruction each
    # per clock, so a block of fewer warps than schedulers cannot use them all.
    rate = dict(issue=g["issue_per_clock"] * f, tensor=ceiling["flops"] / g["sms"] / HMMA_FLOPS,
                smem=g["smem_bytes_per_clock"] * f, mufu=g["mufu_per_clock"] * f / 32)
    block_rate = dict(rate, issue=min(g["issue_per_clock"], warps) * f)
    per_tile = dict(issue=per["total"], tensor=per["HMMA"], smem=smem_tile, mufu=per["MUFU.EX2"])
    terms, grid_bound = {}, {}
    for t in ("issue", "tensor", "smem", "mufu"):
        spread = n * per_tile[t] / (sms_busy * rate[t])       # the work over the busy SMs
        one_block = n_block * per_tile[t] / block_rate[t]      # the heaviest block, alone
        terms[t] = max(spread, one_block)
        grid_bound[t] = one_block > spread
    terms["hbm"] = counts["dram_bytes"] / g["dram_bytes_s"]
    grid_bound["hbm"] = False
    bound_by = max(terms, key=lambda t: terms[t])
    lower, upper = terms[bound_by], sum(terms.values())
    # Useful FLOPs count the real head_dim; the SASS counts are the compiled width's, so a
    # padded kernel (72 run 80 wide) pays for its zero columns: useful_columns = 72 / 80.
    useful = 4 * B * nh * T * T * head_dim * (0.5 if causal else 1.0)  # QK^T and PV FLOPs
    width = spec.width(head_dim)
    tflops = useful / lower / 1e12
    band = published_band(version, gpu, causal, useful, head_dim, pairs=B * nh)
    # The fastest published kernel with the same tensor instruction (mma.sync) on this GPU.
    same_instr = [b for b in band if b["instruction"] == "mma.sync"]
    # Warps a busy SM holds at once: with no more than one per scheduler, every stall of a
    # dependent chain (v1's serial FMAs) is an issue slot lost: latency, not issue, decides.
    bps = (evidence.get("blocks_per_sm") or {}).get(gpu)
    per_sm_blocks = math.ceil(w["blocks"] / g["sms"])
    resident = (min(bps, per_sm_blocks) if bps else per_sm_blocks) * warps
    return dict(kind="model", label="MODEL (from SASS counts)", version=version,
                gpu=g["name"], gpu_key=gpu, B=B, n_head=nh, T=T, head_dim=head_dim,
                causal=causal, dtype=str(dtype).replace("torch.", ""), seconds=lower,
                width=width, useful_columns=head_dim / width,
                lower=lower, upper=upper, bound_by=bound_by, terms=terms,
                grid_bound=grid_bound, sms_busy=sms_busy, sms=g["sms"],
                warps_per_busy_sm=resident,
                latency_bound=resident <= g["issue_per_clock"],
                counts=counts, work=w, clock_hz=f,
                tensor_ceiling=ceiling, useful_flops=useful, model_tflops=tflops,
                published=band,
                above_published=bool(same_instr) and tflops > max(b["tflops"]
                                                                   for b in same_instr))


OVERLAPS = {"perfect": "max", "none": "sum"}  # how the model's five terms combine


def model_terms(m: dict, overlap: str = "perfect") -> dict:
    """A time_model.model_bound dict's five terms (µs) and their combination: overlap="perfect"
    takes the largest (the bracket's lower edge: every resource busy at once), "none" adds them
    (the upper edge: each waits for the others); the useful TFLOP/s at that time, and the
    published kernels' times for the same work beside it."""
    if overlap not in OVERLAPS:
        raise ValueError(f"overlap={overlap!r}: allowed values are "
                         f"{', '.join(map(repr, OVERLAPS))}")
    terms = m["terms"]
    t = max(terms.values()) if overlap == "perfect" else sum(terms.values())
    return {"MODEL terms, µs": {name: round(s * 1e6, 1) for name, s in terms.items()},
            "largest": m["bound_by"],
            f"{OVERLAPS[overlap]} of the terms, µs": round(t * 1e6, 1),
            "useful TFLOP/s": round(m["useful_flops"] / t / 1e12),
            "published, µs": {b["kernel"]: round(b["seconds"] * 1e6, 1)
                              for b in m.get("published") or []}}
