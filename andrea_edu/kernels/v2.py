"""Kernel v2 (attention_v2_wmma.cu, backend "cuda-wmma"): the same attention on tensor cores.

Its KernelSpec (kernels.spec): who may run it, its tiles, grid and shared memory, its block on the
CPU, its SASS loop plan. Chapter "The configuration mirrors the hardware" and the worklog.
"""
from __future__ import annotations

import torch

from andrea_edu.kernels.block_steps import padded, query_tile
from andrea_edu.kernels.spec import KernelSpec, dtype_name as _dtype_name

V2_HEAD_DIMS = tuple(range(16, 129, 16))  # v2 is compiled for these head_dims only (16..128)


V2_DTYPES = (torch.float16, torch.bfloat16)  # WMMA 16x16x16 takes half or bf16 inputs


def v2_ineligibility(head_dim: int, dtype, sm: int | None = None) -> str | None:
    """Why the tensor-core kernel v2 cannot run this (head_dim, dtype[, GPU sm]), or None."""
    if dtype not in V2_DTYPES:
        return (f"dtype={_dtype_name(dtype)} is not supported by the tensor-core kernel "
                f"(WMMA 16x16x16 takes float16 or bfloat16 inputs)")
    if head_dim % 16 != 0:
        return f"head_dim={head_dim} is not a multiple of 16"
    if head_dim not in V2_HEAD_DIMS:
        return (f"head_dim={head_dim} is above the largest compiled tensor-core tile "
                f"({V2_HEAD_DIMS[-1]})")
    if sm is not None and dtype == torch.bfloat16 and sm < 80:
        return f"bfloat16 tensor cores need sm_80 or newer; this GPU is sm_{sm}"
    return None


def tile_of(head_dim: int) -> int:
    """The template's HD: head_dim itself."""
    return head_dim


def smem_layout(c: dict, tile: int, es: int) -> tuple:
    """sK, sV [BK][HD + 8]; sS [rows][LDS] fp32; sP [rows][LDP]; sO [rows][HD + 4] fp32 (sQ is
    staged in sO before it is in use); rows = 16 per warp."""
    rows = 16 * c["V2_WARPS"]
    return (("sK", c["V2_BK"] * (tile + 8) * es), ("sV", c["V2_BK"] * (tile + 8) * es),
            ("sS", rows * c["V2_LDS"] * 4), ("sP", rows * c["V2_LDP"] * es),
            ("sO", rows * (tile + 4) * 4))


def emulate_block(qh, kh, vh, oh, qtile, causal, scale, record, c, p_dtype):
    """attention_v2_wmma's block: one 64-row query tile of one (b, h), K/V 32 rows at a time."""
    T = qh.shape[0]
    BQ, BK = c["V2_BQ"], c["V2_BK"]
    q0 = qtile * BQ
    qt = padded(qh[q0:q0 + BQ], BQ)                         # (BQ, hs) staged Q tile
    kp, vp = (padded(x, -(-T // BK) * BK) for x in (kh, vh))  # (T rounded up to BK, hs)
    tile = query_tile(qt, kp, vp, oh, q0, BK, causal, scale, record, p_dtype)  # acc: the sO
    if record:
        yield tile


def trip_plan(head_dim: int, consts: dict):
    """The source's inner-loop iteration counts for one K/V tile, per thread (kernels.sass)."""
    stage = consts["V2_BK"] * head_dim // consts["V2_THREADS"]
    return lambda mix: (stage, 2, "LDG") if mix["LDG"] else None


def chosen(head_dim: int, dtype, sm: int | None, previous: tuple | None) -> str:
    why = f"head_dim={head_dim} is a multiple of 16 and dtype={_dtype_name(dtype)} " \
          f"feeds the tensor cores: ran cuda-wmma"
    if previous is not None:
        why = f"{previous[1]}: {previous[0]} unavailable; {why}"
    return why


SPEC = KernelSpec(
    version="v2", backend="cuda-wmma", kernel="attention_v2_wmma", source="attention_v2_wmma.cu",
    prefix="V2_", head_dims=V2_HEAD_DIMS, dtypes=V2_DTYPES,
    ineligibility=v2_ineligibility, tile_of=tile_of, smem_layout=smem_layout,
    block_rows=lambda c, head_dim: c["V2_BQ"], emulate_block=emulate_block, trip_plan=trip_plan,
    chosen=chosen, emulating=lambda previous: "the kernel cuda-wmma runs for this head_dim and "
                                              "dtype",
    color="#1f77b4")
