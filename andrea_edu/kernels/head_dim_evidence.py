"""What runs at each head_dim, from the compiled kernel's own evidence, and its time MODEL.

Chapter "The configuration mirrors the hardware" (the head_dim slider) and the worklog's n_head
slider. No GPU needed: the kernel the dispatcher's rule picks (registry.walk, the specs' own
refusals) is compiled by NVRTC for the H200 (sm_90) and the RTX 4090 (sm_89), its SASS walked
(kernels.sass, disk-cached by kernels.nvrtc), and the launch modelled (kernels.time_model).

    at(head_dim, B=8, n_head=12, T=1024, causal=True, dtype=bf16, pad=False) -> dict (cached)
        version, backend, why (each better kernel's refusal, in the dispatcher's order),
        tile_useful (16-wide tiles of the head slice), width (the columns the kernel computes:
        80 for 72 padded), useful_columns (head_dim / width), tensor_per_score, instr_per_score,
        smem_per_score, registers, blocks_per_sm {gpu}, waves {gpu}, idle_sms {gpu},
        model {gpu: {lower, upper, bound_by, latency_bound, sms_busy}} (MODEL, µs),
        published [{kernel, instruction, us, extrapolated, where}] (points, H200 only)
    sweep(head_dims, **case) -> [at(h, **case) for h in head_dims]
    at_fixed_d_model(n_head, d_model=768, **case) -> at(d_model // n_head, n_head=n_head) plus
        scores_per_head and blocks of the launch: what n_head changes at a fixed width
    pad: the dispatcher's choice with choose_backend(..., pad=pad): True runs a head_dim no
        tensor-core kernel is compiled for in the padded one (cuda-flash-padded), False falls back
    SWEEP: 8..128 in steps of 8, plus 70 and 72 (the source's misaligned head_dims)
    compiled(kernel, head_dim, dtype, arch, B, n_head, T, gpu) -> dict
        one compiled specialization's PTX evidence, registers, shared memory, occupancy on an
        occupancy preset and grid fill (bench.dispatched.kernel_facts adds the dispatcher's
        decision; NVRTC failures come back as `error`, never raised)

Per score: one (query, key) pair of a full, unmasked K/V tile, counted for one warp (the SASS
walk's tile): every score of that tile is a useful one, so these are per useful score.
"""
from __future__ import annotations

import functools
import math
from dataclasses import asdict
from typing import Any

import torch

from andrea_edu.kernels import gpus, nvrtc, occupancy, registry, sass, tiles, time_model

SWEEP = tuple(sorted(set(range(8, 129, 8)) | {70, 72}))
MODEL_GPUS = ("H200", "H100", "RTX 4090")  # the two lent kinds and the reader GPU the book models


def _check(head_dim) -> int:
    if isinstance(head_dim, bool) or not isinstance(head_dim, int) or not 1 <= head_dim <= 256:
        raise ValueError(f"head_dim={head_dim!r}: allowed values are ints 1..256")
    return head_dim


def dispatched(head_dim: int, dtype=torch.bfloat16, sm: int | None = None, pad: bool = False
               ) -> tuple[str | None, list]:
    """(the version the dispatcher's rule runs on a GPU of compute capability sm (None: a
    current sm_80+ GPU, as choose_backend(..., "cuda") decides), [(version, why it refused)]
    for each better one, in the order the dispatcher tries them)."""
    spec, passed = registry.walk(_check(head_dim), dtype, sm, pad=pad)
    return (spec.version if spec else None), [(s.version, why) for s, why in passed]


def reason(head_dim: int, dtype=torch.bfloat16, sm: int | None = None, pad: bool = False
           ) -> str | None:
    """The dispatcher's own sentence for head_dim (the spec's `chosen`), or None."""
    spec, passed = registry.walk(_check(head_dim), dtype, sm, pad=pad)
    if spec is None:
        return None
    previous = (passed[-1][0].backend, passed[-1][1]) if passed else None
    return spec.chosen(head_dim, dtype, sm, previous)


@functools.lru_cache(maxsize=None)
def at(head_dim: int, B: int = 8, n_head: int = 12, T: int = 1024, causal: bool = True,
       dtype=torch.bfloat16, pad: bool = False) -> dict[str, Any]:
    """The compiled evidence and the MODEL band of the kernel that runs head_dim (module doc).
    Cached per case; the compiles and SASS listings are cached on disk by kernels.nvrtc."""
    if not isinstance(pad, bool):
        raise ValueError(f"pad={pad!r} must be True or False")
    version, refused = dispatched(head_dim, dtype, pad=pad)
    cov = tiles.tile_coverage(T, head_dim)
    out: dict[str, Any] = dict(head_dim=head_dim, B=B, n_head=n_head, T=T, causal=causal,
                               dtype=str(dtype).replace("torch.", ""), version=version,
                               refused=refused, tile_useful=cov.utilization,
                               col_tiles=cov.col_tiles, pad=pad,
                               kind="compiled evidence + MODEL")
    if version is None:
        return out
    spec = registry.get(version)
    out["backend"] = spec.backend
    out["why"] = reason(head_dim, dtype, pad=pad)
    out["width"] = spec.width(head_dim)
    out["useful_columns"] = head_dim / out["width"]
    model: dict[str, dict] = {}
    for g in MODEL_GPUS:
        ev = sass.evidence(version, head_dim, dtype, gpus.GPUS[g]["arch"])
        m = time_model.model_bound(version, B, n_head, T, head_dim, causal, dtype, g, evidence=ev)
        n = ev["scores_per_tile"]
        bps = ev["blocks_per_sm"][g]
        blocks = m["work"]["blocks"]
        model[g] = dict(lower_us=m["lower"] * 1e6, upper_us=m["upper"] * 1e6,
                        bound_by=m["bound_by"], latency_bound=m["latency_bound"],
                        sms_busy=m["sms_busy"], sms=m["sms"], blocks=blocks,
                        blocks_per_sm=bps, registers=ev["registers"],
                        waves=math.ceil(blocks / (bps * m["sms"])) if bps else math.inf,
                        idle_sms=m["sms"] - m["sms_busy"],
                        tensor_per_score=ev["per_tile"]["HMMA"] / n,
                        instr_per_score=ev["per_tile"]["total"] / n,
                        smem_per_score=ev["smem_bytes_per_tile"] / n,
                        useful_tflops=m["useful_flops"] / m["lower"] / 1e12)
        if g == "H200":
            out["published"] = [dict(kernel=b["kernel"], instruction=b["instruction"],
                                     us=b["seconds"] * 1e6, tflops=b["tflops"],
                                     same_design=b["same_design"],
                                     extrapolated=b["extrapolated"], where=b["where"])
                                for b in m["published"]]
            out["useful_flops"] = m["useful_flops"]
    h = model["H200"]
    out.update(model=model, registers=h["registers"], tensor_per_score=h["tensor_per_score"],
               instr_per_score=h["instr_per_score"], smem_per_score=h["smem_per_score"],
               blocks_per_sm={g: model[g]["blocks_per_sm"] for g in model},
               waves={g: model[g]["waves"] for g in model},
               idle_sms={g: model[g]["idle_sms"] for g in model})
    return out


def sweep(head_dims=SWEEP, **case) -> list[dict[str, Any]]:
    return [at(h, **case) for h in head_dims]


def at_fixed_d_model(n_head: int, d_model: int = 768, **case) -> dict[str, Any]:
    """at(d_model // n_head, n_head=n_head): the same matmul FLOPs, other heads. Adds
    scores_per_head (T*T, halved under the causal mask) and scores in all (n_head times it)."""
    if isinstance(n_head, bool) or not isinstance(n_head, int) or n_head < 1 or d_model % n_head:
        raise ValueError(f"n_head={n_head!r}: allowed values divide d_model={d_model}")
    r = dict(at(d_model // n_head, n_head=n_head, **case))
    T, causal, B = r["T"], r["causal"], r["B"]
    per_head = T * T * (0.5 if causal else 1.0)
    r.update(d_model=d_model, scores_per_head=per_head, scores=B * n_head * per_head)
    return r


def check_gpu_preset(gpu: str) -> str:
    """`gpu` if it is a preset of andrea_edu.kernels.occupancy, else a one-line ValueError."""
    if gpu not in occupancy.PRESETS:
        raise ValueError(f"gpu={gpu!r}: kernel_facts knows the presets "
                         f"{', '.join(map(repr, occupancy.PRESETS))} only (andrea_edu.kernels."
                         f"occupancy.PRESETS); pass one of them")
    return gpu


def compiled(kernel: str, head_dim: int, dtype=torch.bfloat16, arch: str = "sm_90", B: int = 8,
             n_head: int = 12, T: int = 1024, gpu: str = "H200") -> dict:
    """The compiled `kernel` at head_dim (NVRTC, no GPU needed; cached by kernels.nvrtc): its
    tensor-core instructions, registers, shared memory, occupancy on `gpu` (an occupancy preset)
    and how its grid for (B, n_head, T) fills that GPU. A failure to compile (NVRTC or headers
    missing, a compile error) is returned as {"error": one line}, never raised."""
    sm = occupancy.PRESETS[check_gpu_preset(gpu)]
    try:
        ck = nvrtc.compile_attention(kernel, head_dim, dtype, arch=arch)
        occ = occupancy.occupancy(ck.resources, ck.threads_per_block, sm)
        grid = ck.grid(B, n_head, T)
        n_blocks = grid[0] * grid[1] * grid[2]
        tc = ck.tensor_core_instructions()
        return dict(resources=asdict(ck.resources), threads_per_block=ck.threads_per_block,
                    tensor_core_instructions=len(tc), first_tensor_core_instruction=(
                        tc[0] if tc else None), compile_seconds=ck.compile_seconds,
                    specialization=ck.name_expression, occupancy=occ, grid=grid,
                    grid_fill=occupancy.grid_fill(n_blocks, occ["blocks_per_sm"], sm),
                    gpu=sm["name"], sms=sm["sms"])
    except Exception as e:  # noqa: BLE001 (say why, never crash the chapter)
        return {"error": f"{type(e).__name__}: {e}".split("\n")[0][:300]}
