"""Occupancy: how many blocks of a kernel fit on one SM, and how full a grid leaves the GPU.

Introduced in the chapter "One kernel, many heads" (one block per (batch, head): 96 blocks for
B=8, nh=12 on an H200's 132 SMs) and used in "The configuration mirrors the hardware".
Pure functions of the numbers ptxas reports (andrea_edu.kernels.nvrtc.Resources): no GPU needed.

    blocks_per_sm(resources, threads_per_block, sm=H200) -> int
    occupancy(resources, threads_per_block, sm=H200) -> dict (blocks, each limit, what limits)
    grid_fill(n_blocks, blocks_per_sm, sm=H200) -> dict (waves, SMs busy in the last wave, ...)

`resources` is a Resources, or any object/dict with `registers` and `shared_bytes`.
The rules are those of NVIDIA's occupancy calculator for sm_75..sm_90: registers are given to
warps in units of 256 (regs/thread rounded up to a multiple of 8), every block also reserves
1 KB of shared memory (sm_80 and newer), and an SM holds at most max_threads threads and
max_blocks blocks.
Presets: the GPUs of andrea_edu.kernels.gpus (the one GPU table, with its sources):
"""
from __future__ import annotations

import math
from typing import Any

from andrea_edu.kernels.gpus import GPUS

# The same dicts as gpus.GPUS (one table): name, architecture, SM count, per-SM limits.
H200, A100, RTX_4090 = GPUS["H200"], GPUS["A100"], GPUS["RTX 4090"]
T4, RTX_3090, L4, H100 = GPUS["T4"], GPUS["RTX 3090"], GPUS["L4"], GPUS["H100"]
PRESETS = {"H200": H200, "A100": A100, "RTX 4090": RTX_4090, "T4": T4, "RTX 3090": RTX_3090,
           "L4": L4, "H100": H100}
__doc__ += "".join(f"    {k}: {v['arch']}, {v['sms']} SMs, {v['smem'] // 1024} KB shared memory "
                   f"and {v['max_threads']} threads per SM\n" for k, v in PRESETS.items())


def _get(res, name):
    return res[name] if isinstance(res, dict) else getattr(res, name)


def occupancy(resources, threads_per_block: int, sm: dict[str, Any] = H200) -> dict:
    """Blocks per SM under each limit, the binding one, and the fraction of warp slots used."""
    if threads_per_block < 1:
        raise ValueError(f"threads_per_block={threads_per_block} must be >= 1")
    regs, smem = int(_get(resources, "registers")), int(_get(resources, "shared_bytes"))
    warps = math.ceil(threads_per_block / 32)
    regs_per_warp = math.ceil(max(regs, 1) * 32 / 256) * 256
    limits = {
        "threads": sm["max_threads"] // (warps * 32),
        "registers": (sm["regs"] // regs_per_warp) // warps,
        "shared memory": (sm["smem"] // (smem + sm.get("reserved_smem", 0))) if smem else
        sm["max_blocks"],
        "blocks": sm["max_blocks"],
    }
    if smem > sm.get("smem_per_block", sm["smem"]) or regs > 255:
        limits["per-block limit"] = 0
    blocks = max(0, min(limits.values()))
    limiting = min(limits, key=lambda k: limits[k])
    max_warps = sm["max_threads"] // 32
    return dict(blocks_per_sm=blocks, limits=limits, limiting=limiting,
                warps_per_sm=blocks * warps, occupancy=blocks * warps / max_warps)


def blocks_per_sm(resources, threads_per_block: int, sm: dict[str, Any] = H200) -> int:
    """How many blocks of this kernel one SM holds at once (0: it cannot launch)."""
    return occupancy(resources, threads_per_block, sm)["blocks_per_sm"]


def grid_fill(n_blocks: int, blocks_per_sm: int, sm: dict[str, Any] = H200) -> dict:
    """How a grid of n_blocks spreads over the GPU's SMs.

    waves: rounds of blocks the GPU needs; sms_busy_first_wave: SMs that get at least one
    block; idle_sms: SMs with no block at all (96 blocks on 132 SMs leave 36 idle).
    """
    if n_blocks < 0 or blocks_per_sm < 0:
        raise ValueError(f"n_blocks={n_blocks} and blocks_per_sm={blocks_per_sm} must be >= 0")
    slots = sm["sms"] * blocks_per_sm
    busy = min(n_blocks, sm["sms"])
    return dict(n_blocks=n_blocks, sms=sm["sms"], slots=slots,
                waves=math.ceil(n_blocks / slots) if slots else math.inf,
                sms_busy_first_wave=busy, idle_sms=sm["sms"] - busy,
                fraction_of_slots_used=min(1.0, n_blocks / slots) if slots else 0.0)
