"""Each kernel's limits, in one place: what v1, v2 and v3 accept (head_dim, dtype, GPU).

Read by the dispatcher (andrea_edu.attention), the compiler (kernels.nvrtc), the launcher
(kernels.launch) and the emulator (kernels.emulator) alike, so that a limit changes in one line.
Introduced in the chapter "The configuration mirrors the hardware" (why head_dim=72 falls back).

    v3_ineligibility(head_dim, dtype, sm=None) -> None or the reason v3 cannot run
    v2_ineligibility(head_dim, dtype, sm=None) -> None or the reason v2 cannot run
    v1_ineligibility(head_dim, sm=None)        -> None or the reason v1 cannot run
    validate_qkv(q, k, v) -> (B, nh, T, hs)    shapes, dtypes and devices every backend needs
"""
from __future__ import annotations

import torch

DTYPES = (torch.float32, torch.float16, torch.bfloat16)


V1_MAX_HEAD_DIM = 256  # v1 keeps ceil(hs/32) accumulators per lane; 8 chunks of 32 at most


V2_HEAD_DIMS = tuple(range(16, 129, 16))  # v2 is compiled for these head_dims only (16..128)


V2_DTYPES = (torch.float16, torch.bfloat16)  # WMMA 16x16x16 takes half or bf16 inputs


V3_HEAD_DIMS = (32, 64, 96, 128)  # v3 keeps O in registers: HD/2 floats per lane (64 at 128)


V3_DTYPES = (torch.float16, torch.bfloat16)  # mma.sync m16n8k16 .f16/.bf16 inputs


V3_MIN_SM = 80  # mma.sync m16n8k16 with bf16, cp.async, cvt.rn.{f16,bf16}x2.f32: sm_80+


def _dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


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
        return (f"cuda-flash needs sm_{V3_MIN_SM} or newer (cp.async, ldmatrix, bf16 "
                f"mma.sync); this GPU is sm_{sm}")
    return None


def v1_ineligibility(head_dim: int, sm: int | None = None) -> str | None:
    """Why kernel v1 cannot run this head_dim (on a GPU of compute capability sm), or None."""
    if head_dim > V1_MAX_HEAD_DIM:
        return f"head_dim={head_dim} is above cuda-naive's maximum {V1_MAX_HEAD_DIM}"
    if sm is not None and sm < 80 and head_dim > 128:  # v1 above 128 stages 82 KB (cuda.shared_bytes)
        return f"head_dim={head_dim} needs more than the 64 KB of shared memory sm_{sm} allows"
    return None


def validate_qkv(q, k, v) -> tuple[int, int, int, int]:
    """Check q, k, v and return (B, nh, T, hs); raise a ValueError/TypeError that names the fix."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must have shape [B, n_head, seq_len, head_dim] (4 dims), "
                             f"got shape {tuple(t.shape)}")
        if t.dtype not in DTYPES:
            raise TypeError(f"{name}.dtype={t.dtype} is not supported; allowed: "
                            f"{[_dtype_name(d) for d in DTYPES]}")
    for name, t in (("k", k), ("v", v)):
        if t.shape != q.shape:
            raise ValueError(f"{name}.shape={tuple(t.shape)} differs from q.shape="
                             f"{tuple(q.shape)}; q, k, v must share [B, n_head, seq_len, head_dim]")
        if t.dtype != q.dtype:
            raise TypeError(f"{name}.dtype={t.dtype} differs from q.dtype={q.dtype}; "
                            f"cast them to one dtype")
        if t.device != q.device:
            raise ValueError(f"{name}.device={t.device} differs from q.device={q.device}; "
                             f"move q, k, v to one device")
    B, nh, T, hs = q.shape
    if min(B, nh, T, hs) < 1:
        raise ValueError(f"q.shape={tuple(q.shape)} has an empty dimension; B, n_head, "
                         f"seq_len and head_dim must all be >= 1")
    return B, nh, T, hs
