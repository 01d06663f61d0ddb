"""Kernel v4 (attention_v4_split.cu, backend "cuda-split"): v1's loops, one block per query tile.

A fourth rung kept outside the package, written as a contributor adds one (CONTRIBUTING.md):
tests/test_kernel_registry.py copies this module and its .cu into a temporary package, imports
it and registers SPEC. It names no colour (the registry gives it one) and changes no other file.
"""
from __future__ import annotations

import math
from pathlib import Path

from andrea_edu.kernels.block_steps import padded, query_tile
from andrea_edu.kernels.spec import CTYPE, KernelSpec

V4_MAX_HEAD_DIM = 256         # ceil(hs/32) accumulators per lane, 8 chunks of 32 at most
V4_CHUNK_SIZES = (1, 2, 4, 8)  # the specializations: lanes' chunks of 32 dims


def ineligibility(head_dim: int, dtype, sm: int | None = None) -> str | None:
    """The one limits function: why v4 cannot run (head_dim, dtype[, GPU sm]), or None."""
    if dtype not in CTYPE:
        return f"dtype={dtype} is not one of cuda-split's {list(CTYPE)}"
    if head_dim > V4_MAX_HEAD_DIM:
        return f"head_dim={head_dim} is above cuda-split's maximum {V4_MAX_HEAD_DIM}"
    if sm is not None and sm < 80 and head_dim > 128:   # 72 KB of shared memory above 128
        return f"head_dim={head_dim} needs more than the 64 KB of shared memory sm_{sm} allows"
    return None


def tile_of(head_dim: int) -> int:
    """The template's CHUNKS: ceil(head_dim / 32) rounded up to 1, 2, 4 or 8."""
    return next(c for c in V4_CHUNK_SIZES if c >= math.ceil(head_dim / 32))


def smem_layout(c: dict, tile: int, es: int) -> tuple:
    """sQ [BQ][HDP], sK [BK][HDP + 1], sV [BK][HDP] floats, HDP = 32 * CHUNKS."""
    hdp = 32 * tile
    return (("sQ", 4 * c["V4_BQ"] * hdp), ("sK", 4 * c["V4_BK"] * (hdp + 1)),
            ("sV", 4 * c["V4_BK"] * hdp))


def emulate_block(qh, kh, vh, oh, qtile, causal, scale, record, c, p_dtype):
    """attention_v4_split's block: query tile `qtile` of one (b, h), K/V BK rows at a time
    (P stays fp32, as in v1: p_dtype is unused)."""
    T = qh.shape[0]
    BQ, BK = c["V4_BQ"], c["V4_BK"]
    q0 = qtile * BQ                                          # q0 = blockIdx.y * V4_BQ
    qt = padded(qh[q0:q0 + BQ], BQ)                         # (BQ, hs) staged Q tile
    kp, vp = (padded(x, -(-T // BK) * BK) for x in (kh, vh))  # (T rounded up to BK, hs)
    tile = query_tile(qt, kp, vp, oh, q0, BK, causal, scale, record, None)
    if record:
        yield tile


def trip_plan(head_dim: int, consts: dict):
    """The inner-loop iteration counts for one K/V tile, per thread (kernels.sass)."""
    hdp = 32 * max(1, -(-head_dim // 32))
    stage = consts["V4_BK"] * hdp // consts["V4_THREADS"]

    def plan(mix):
        if mix["LDG"]:
            return stage, 2, "LDG"                        # one K and one V element
        if mix["SHFL"]:
            return consts["V4_BK"], 1, "SHFL"             # p_j from lane j, per key
        if mix["FFMA"]:
            return head_dim, 1, "FFMA"                    # s += q_d k_d over head_dim
        return None
    return plan


def chosen(head_dim: int, dtype, sm: int | None, previous: tuple | None) -> str:
    return f"head_dim={head_dim} fits cuda-split's {V4_MAX_HEAD_DIM}: ran cuda-split"


SPEC = KernelSpec(
    version="v4", backend="cuda-split", kernel="attention_v4_split",
    source="attention_v4_split.cu", source_dir=Path(__file__).parent, prefix="V4_",
    head_dims=tuple(32 * c for c in V4_CHUNK_SIZES), dtypes=tuple(CTYPE),
    ineligibility=ineligibility, tile_of=tile_of, max_head_dim=lambda t: 32 * t,
    smem_layout=smem_layout, block_rows=lambda c, head_dim: c["V4_BQ"],
    emulate_block=emulate_block, trip_plan=trip_plan, chosen=chosen,
    emulating=lambda previous: "the kernel cuda-split runs")
