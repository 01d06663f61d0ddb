"""Kernel v3 (attention_v3_flash.cu, backend "cuda-flash"): FlashAttention-2 style.

Its KernelSpec (kernels.spec): who may run it, its tiles, grid and shared memory, its block on the
CPU, its SASS loop plan. Chapter "From one block per head to FlashAttention: a kernel worklog".
"""
from __future__ import annotations

import torch

from andrea_edu.kernels.block_steps import QTile, KVStep, mask, online_rescale, padded
from andrea_edu.kernels.spec import KernelSpec, dtype_name as _dtype_name

V3_HEAD_DIMS = (32, 64, 96, 128)  # v3 keeps O in registers: HD/2 floats per lane (64 at 128)


V3_DTYPES = (torch.float16, torch.bfloat16)  # mma.sync m16n8k16 .f16/.bf16 inputs


V3_MIN_SM = 80  # mma.sync m16n8k16 with bf16, cp.async, cvt.rn.{f16,bf16}x2.f32: sm_80+


def v3_ineligibility(head_dim: int, dtype, sm: int | None = None) -> str | None:
    """Why the FlashAttention-style kernel v3 cannot run this (head_dim, dtype[, GPU sm]), or
    None. sm=None (no GPU named) checks only head_dim and dtype."""
    if dtype not in V3_DTYPES:
        return (f"dtype={_dtype_name(dtype)} is not supported by cuda-flash "
                f"(mma.sync m16n8k16 takes float16 or bfloat16 inputs)")
    if head_dim not in V3_HEAD_DIMS:
        return (f"head_dim={head_dim} is not one of cuda-flash's compiled head_dims "
                f"{list(V3_HEAD_DIMS)}")
    if sm is not None and sm < V3_MIN_SM:
        return (f"cuda-flash needs sm_{V3_MIN_SM} or newer (cp.async, bf16 "
                f"mma.sync); this GPU is sm_{sm}")
    return None


def tile_of(head_dim: int) -> int:
    """The template's HD: head_dim itself."""
    return head_dim


def smem_layout(c: dict, tile: int, es: int) -> tuple:
    """K[0], V[0], K[1], V[1]: V3_TILES tiles of BK x (HD + PAD) elements (Q is staged in K[1],
    V[1] first, O in K[0], V[0] at the end)."""
    names = ("K[0]", "V[0]", "K[1]", "V[1]")
    return tuple((names[i] if i < len(names) else f"tile {i}",
                  c["V3_BK"] * (tile + c["V3_PAD"]) * es) for i in range(c["V3_TILES"]))


def block_rows(c: dict, head_dim: int) -> int:
    """A warp takes 32 query rows (two m16 tiles) up to head_dim V3_NARROW_HD, 16 above it."""
    return c["V3_BQ_NARROW"] if head_dim <= c["V3_NARROW_HD"] else c["V3_BQ"]


def emulate_block(qh, kh, vh, oh, qtile, causal, scale, record, c, p_dtype):
    """attention_v3_flash's block: one 64-row query tile, 4 warps of 16 rows, 64-key tiles;
    the online softmax in exp2 form on raw scores, masks only where the kernel masks."""
    T, hs = qh.shape
    BQ, BK, W = block_rows(c, hs), c["V3_BK"], c["V3_WARPS"]
    R = BQ // W                                              # rows per warp: 32, or 16 (hs > 64)
    log2e = 1.4426950408889634
    cc = scale * log2e                                       # exp(x scale) = exp2(x cc)
    q0 = qtile * BQ
    qt = padded(qh[q0:q0 + BQ], BQ)                         # (BQ, hs) staged Q (zeros past T)
    kp, vp = (padded(x, -(-T // BK) * BK) for x in (kh, vh))  # (T rounded up to BK, hs)
    m = torch.full((W, R), float("-inf"))                    # per warp, per row: raw max
    l = torch.zeros(W, R)
    o = torch.zeros(W, R, hs)                                # the warps' O registers
    n = min(BQ, T - q0)
    tile = QTile(q0, q0 + n)
    kv_end = min(T, q0 + BQ) if causal else T
    for k0 in range(0, kv_end, BK):
        kt, vt = kp[k0:k0 + BK], vp[k0:k0 + BK]              # (BK, hs) the block's K/V tile
        for w in range(W):
            r0 = q0 + w * R                                  # this warp's first query row
            if causal and k0 > r0 + R - 1:                   # the whole tile is above its rows:
                continue                                     # the kernel's warp skips it
            s = torch.mm(qt[w * R:(w + 1) * R], kt.T)        # (R, BK) raw scores
            if k0 + BK > T or (causal and k0 + BK - 1 > r0):  # the kernel's warp-level test
                s.masked_fill_(~mask(r0, R, k0, BK, T, causal, always=True), float("-inf"))
            m[w], l[w], o[w] = online_rescale(s, m[w], l[w], o[w], vt, p_dtype, cc)  # exp2 form
        if record:
            tile.steps.append(KVStep(k0, min(k0 + BK, T), (m.reshape(-1)[:n] * scale).clone(),
                                     l.reshape(-1)[:n].clone()))
    oh[q0:q0 + n] = (o.reshape(BQ, hs) / l.reshape(BQ, 1))[:n]
    if record:
        yield tile


def chosen(head_dim: int, dtype, sm: int | None, previous: tuple | None) -> str:
    gpu = f"sm_{sm}" if sm is not None else "an sm_80+ GPU"
    return (f"head_dim={head_dim} is one of cuda-flash's head_dims "
            f"{list(V3_HEAD_DIMS)}, dtype={_dtype_name(dtype)} feeds mma.sync "
            f"and {gpu} has cp.async and ldmatrix: ran cuda-flash "
            f"(FlashAttention-2 style, S/P/O in registers)")


SPEC = KernelSpec(
    version="v3", backend="cuda-flash", kernel="attention_v3_flash",
    source="attention_v3_flash.cu", prefix="V3_", head_dims=V3_HEAD_DIMS, dtypes=V3_DTYPES,
    min_sm=V3_MIN_SM, reverse_query_tiles=True, warp_skips_causal_tiles=True, row_alignment=16,
    ineligibility=v3_ineligibility, tile_of=tile_of, smem_layout=smem_layout, block_rows=block_rows,
    emulate_block=emulate_block, trip_plan=lambda head_dim, consts: lambda mix: None,  # no loops
    chosen=chosen,
    emulating=lambda previous: "the kernel cuda-flash runs for this head_dim and dtype on sm_80+",
    color="#d62728")
