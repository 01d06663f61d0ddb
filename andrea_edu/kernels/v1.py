"""Kernel v1 (attention_v1.cu, backend "cuda-naive"): one block per (batch, head).

Its KernelSpec (kernels.spec): who may run it, its tiles, grid and shared memory, its block on the
CPU, its SASS loop plan. Chapters "One kernel, many heads" and the kernel worklog.
"""
from __future__ import annotations

import math

from andrea_edu.kernels.block_steps import padded, query_tile
from andrea_edu.kernels.spec import CTYPE, KernelSpec

V1_MAX_HEAD_DIM = 256  # v1 keeps ceil(hs/32) accumulators per lane; 8 chunks of 32 at most
V1_CHUNK_SIZES = (1, 2, 4, 8)  # v1 specializations: lanes' chunks of 32 dims


def v1_ineligibility(head_dim: int, sm: int | None = None) -> str | None:
    """Why kernel v1 cannot run this head_dim (on a GPU of compute capability sm), or None."""
    if head_dim > V1_MAX_HEAD_DIM:
        return f"head_dim={head_dim} is above cuda-naive's maximum {V1_MAX_HEAD_DIM}"
    if sm is not None and sm < 80 and head_dim > 128:  # v1 above 128 stages 82 KB (shared_bytes)
        return f"head_dim={head_dim} needs more than the 64 KB of shared memory sm_{sm} allows"
    return None


def tile_of(head_dim: int) -> int:
    """The template's CHUNKS: ceil(head_dim / 32) rounded up to 1, 2, 4 or 8."""
    need = math.ceil(head_dim / 32)
    return next(c for c in V1_CHUNK_SIZES if c >= need)


def smem_layout(c: dict, tile: int, es: int) -> tuple:
    """sQ [BR][HDP], sK [BC][HDP + 1], sV [BC][HDP] floats, HDP = 32 * CHUNKS."""
    hdp = 32 * tile
    return (("sQ", 4 * c["V1_BR"] * hdp), ("sK", 4 * c["V1_BC"] * (hdp + 1)),
            ("sV", 4 * c["V1_BC"] * hdp))


def emulate_block(qh, kh, vh, oh, qtile, causal, scale, record, c, p_dtype):
    """attention_v1's block: every query tile of one (b, h), K/V streamed 32 rows at a time
    (qtile is always 0: the block walks them all; P stays fp32, p_dtype is unused)."""
    T = qh.shape[0]
    BR, BC = c["V1_BR"], c["V1_BC"]
    qp = padded(qh, -(-T // BR) * BR)                       # (T rounded up to BR, hs)
    kp, vp = (padded(x, -(-T // BC) * BC) for x in (kh, vh))  # (T rounded up to BC, hs)
    for q0 in range(0, T, BR):                               # the block walks every tile
        tile = query_tile(qp[q0:q0 + BR], kp, vp, oh, q0, BC, causal, scale, record, None)
        if record:
            yield tile


def trip_plan(head_dim: int, consts: dict):
    """The source's inner-loop iteration counts for one K/V tile, per thread (kernels.sass)."""
    hdp = 32 * max(1, -(-head_dim // 32))
    stage = consts["V1_BC"] * hdp // consts["V1_THREADS"]

    def plan(mix):
        if mix["LDG"]:
            return stage, 2, "LDG"                        # one K and one V element
        if mix["SHFL"]:
            return consts["V1_BC"], 1, "SHFL"             # p_j from lane j, per key
        if mix["FFMA"]:
            return head_dim, 1, "FFMA"                    # s += q_d k_d over head_dim
        return None
    return plan


def smem_floor(head_dim: int, c: dict) -> int:
    """Shared-memory bytes one v1 warp cannot avoid per full K/V tile, from attention_v1.cu's
    loops: for each of its query rows, every lane reads its own key's head_dim floats of sK
    (S = Q K^T) and, for each of the tile's keys, its own columns of sV (O += P V), 128 bytes per
    warp-instruction each; plus its share of the tile's staging stores (K and V, fp32). The
    broadcast reads of sQ (one address for the whole warp) are counted at zero. A floor: never
    more than the bytes the SASS instructions request (the time model takes it for v1)."""
    hdp = 32 * math.ceil(head_dim / 32)
    per_row = 4 * 32 * head_dim + c["V1_BC"] * 4 * hdp        # sK words + sV words
    staging = 2 * 4 * c["V1_BC"] * hdp // c["V1_WARPS"]         # sK and sV stores, this warp's
    return c["V1_ROWS_PER_WARP"] * per_row + staging


def chosen(head_dim: int, dtype, sm: int | None, previous: tuple | None) -> str:
    if previous is None:
        return "backend='cuda-naive' was requested"
    backend, why = previous
    return f"{why}: {backend} unavailable, ran cuda-naive"


def emulating(previous: tuple | None) -> str:
    return "the kernel cuda-naive runs" + (f": {previous[1]}" if previous else "")


SPEC = KernelSpec(
    version="v1", backend="cuda-naive", kernel="attention_v1", source="attention_v1.cu",
    prefix="V1_", keys_const="BC", head_dims=tuple(32 * c for c in V1_CHUNK_SIZES),
    dtypes=tuple(CTYPE), walks_all_query_tiles=True,
    ineligibility=lambda head_dim, dtype, sm=None: v1_ineligibility(head_dim, sm),
    tile_of=tile_of, max_head_dim=lambda t: 32 * t, smem_layout=smem_layout, smem_floor=smem_floor,
    block_rows=lambda c, head_dim: c["V1_BR"], emulate_block=emulate_block, trip_plan=trip_plan,
    chosen=chosen, emulating=emulating, color="#7f7f7f")
