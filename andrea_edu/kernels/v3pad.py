"""Kernel v3, padded (attention_v3_flash.cu with RD < HD, backend "cuda-flash-padded").

A head_dim that is not one of v3's widths runs inside the tensor-core kernel compiled for the next
multiple of 16 (72 -> 80): the real columns are copied, the pad is zero-filled in shared memory
and only the real columns are written back. (HD - RD) / HD of the tensor-core work multiplies
zeros: the price of not fitting, against the fallback's price (v2, then v1) when nothing pads.
PyTorch's flash kernel makes the same choice with its own widths (it runs 72 in its 96-wide
kernel); this one pads to 16 because mma.sync's k-step is 16 wide.

Its KernelSpec (kernels.spec): one template specialization per real head_dim (RD is a
compile-time argument, so the copies' bounds are constants), the padded width's tiles, grid and
shared memory, the emulator block (v3's block on zero-padded columns). The dispatcher takes it
only when asked to pad (choose_backend(..., pad=True); kernels.registry.walk). Chapter "The
configuration mirrors the hardware".
"""
from __future__ import annotations

import torch

from andrea_edu.kernels import v3
from andrea_edu.kernels.spec import KernelSpec, dtype_name as _dtype_name

PAD_TO = 16          # mma.sync m16n8k16 steps over 16 columns of the head slice (k16 in Q K^T)
V3PAD_MAX_HEAD_DIM = max(v3.V3_HEAD_DIMS)  # O stays in registers: 128 columns at most
# The specializations compile_all builds ahead of use and the GPU suite checks by name: the
# source's 72, its neighbour 80 (a multiple of 16 v3 lacks: no pad), and 70 and 100 (rows not
# 16-byte aligned). Any other head_dim up to 128 compiles on first use (RD is a template
# argument: one specialization per real head_dim).
V3PAD_HEAD_DIMS = (70, 72, 80, 100)


def padded_width(head_dim: int) -> int:
    """The width the kernel computes for head_dim: the next multiple of PAD_TO (72 -> 80)."""
    return -(-head_dim // PAD_TO) * PAD_TO


def useful_fraction(head_dim: int) -> float:
    """Real columns over computed columns: 72 / 80 = 0.9."""
    return head_dim / padded_width(head_dim)


def v3pad_ineligibility(head_dim: int, dtype, sm: int | None = None) -> str | None:
    """Why the padded v3 cannot run this (head_dim, dtype[, GPU sm]), or None. At v3's own
    widths it runs too (RD = HD: the very specialization v3 runs), but the dispatcher tries v3
    first there; asked for by name (backend="cuda-flash-padded") it runs every head_dim <= 128."""
    if dtype not in v3.V3_DTYPES:
        return (f"dtype={_dtype_name(dtype)} is not supported by cuda-flash-padded "
                f"(mma.sync m16n8k16 takes float16 or bfloat16 inputs)")
    if head_dim > V3PAD_MAX_HEAD_DIM:
        return (f"head_dim={head_dim} pads to {padded_width(head_dim)}, above "
                f"{V3PAD_MAX_HEAD_DIM} (O would not fit in registers)")
    if sm is not None and sm < v3.V3_MIN_SM:
        return (f"cuda-flash-padded needs sm_{v3.V3_MIN_SM} or newer (cp.async, bf16 "
                f"mma.sync); this GPU is sm_{sm}")
    return None


def smem_layout(c: dict, tile: int, es: int) -> tuple:
    """v3's four tiles at the padded width (tile = the real head_dim)."""
    return v3.smem_layout(c, padded_width(tile), es)


def block_rows(c: dict, head_dim: int) -> int:
    """v3's rule at the padded width: 128 rows up to 64 columns, 64 above."""
    return v3.block_rows(c, padded_width(head_dim))


def emulate_block(qh, kh, vh, oh, qtile, causal, scale, record, c, p_dtype):
    """v3's block on the head slice zero-padded to the padded width; the real columns of O
    written back. scale is the real head_dim's (the pad adds 0 to every score)."""
    T, rd = qh.shape
    hd = padded_width(rd)
    qp, kp, vp = (torch.nn.functional.pad(x, (0, hd - rd)) for x in (qh, kh, vh))  # (T, hd)
    op = torch.zeros(T, hd)
    yield from v3.emulate_block(qp, kp, vp, op, qtile, causal, scale, record, c, p_dtype)
    rows = v3.block_rows(c, hd)
    q0 = qtile * rows
    oh[q0:q0 + rows] = op[q0:q0 + rows, :rd]


def chosen(head_dim: int, dtype, sm: int | None, previous: tuple | None) -> str:
    hd = padded_width(head_dim)
    gpu = f"sm_{sm}" if sm is not None else "an sm_80+ GPU"
    why = f"{previous[0]}: {previous[1]}; " if previous else ""
    pad = (f"head_dim={head_dim} padded to {hd} ({hd - head_dim} zero columns, "
           f"{useful_fraction(head_dim):.0%} of the tensor-core work useful)" if hd != head_dim
           else f"head_dim={head_dim} needs no padding (a multiple of {PAD_TO})")
    return (f"{why}{pad}: ran cuda-flash-padded, the FlashAttention-2-style kernel compiled "
            f"for width {hd}, dtype={_dtype_name(dtype)} on {gpu}")


SPEC = KernelSpec(
    version="v3p", backend="cuda-flash-padded", kernel="attention_v3_flash",
    source="attention_v3_flash.cu", prefix="V3_", head_dims=V3PAD_HEAD_DIMS,
    dtypes=v3.V3_DTYPES, min_sm=v3.V3_MIN_SM, reverse_query_tiles=True,
    warp_skips_causal_tiles=True, row_alignment=16, pads=True,
    ineligibility=v3pad_ineligibility, tile_of=lambda head_dim: head_dim,
    template_args=lambda rd: (padded_width(rd), rd), width=padded_width,
    smem_layout=smem_layout, block_rows=block_rows, emulate_block=emulate_block,
    trip_plan=lambda head_dim, consts: lambda mix: None,  # no loops, as v3
    chosen=chosen,
    emulating=lambda previous: ("the kernel cuda-flash-padded runs on sm_80+: v3 at the "
                                "padded width, zero columns in the pad"),
    color="#ff7f0e")
