"""What every backend accepts (shapes, dtypes, devices), and each kernel's limits gathered.

Each kernel's own limits (head_dim, dtype, GPU) and its one reason for refusing live in its spec
module (kernels/v1.py, v2.py, v3.py, gathered in kernels.registry): one limits function per
spec (`KernelSpec.ineligibility`), from which the compiler's, the launcher's, the GPU's and the
emulator's refusals derive (kernels.spec). The ladder's own are re-exported here for the
chapters. Introduced in "The configuration mirrors the hardware" (why head_dim=72 falls back).

    v3_ineligibility(head_dim, dtype, sm=None) -> None or the reason v3 cannot run
    v2_ineligibility(head_dim, dtype, sm=None) -> None or the reason v2 cannot run
    v1_ineligibility(head_dim, sm=None)        -> None or the reason v1 cannot run
    validate_qkv(q, k, v, dtypes=DTYPES) -> (B, nh, T, hs)   the one check of q, k, v: shapes,
        dtypes and devices (every backend; reference_attention passes REFERENCE_DTYPES)
"""
from __future__ import annotations

import torch

from andrea_edu.kernels.spec import dtype_name as _dtype_name
# Each kernel's own limits live in its spec module; chapters and the dispatcher import them here.
from andrea_edu.kernels.v1 import V1_MAX_HEAD_DIM, v1_ineligibility  # noqa: F401
from andrea_edu.kernels.v2 import V2_DTYPES, V2_HEAD_DIMS, v2_ineligibility  # noqa: F401
from andrea_edu.kernels.v3 import V3_DTYPES, V3_HEAD_DIMS, V3_MIN_SM, v3_ineligibility  # noqa: F401

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# The fp32 reference also takes float64 (and then computes in float64).
REFERENCE_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def validate_qkv(q, k, v, dtypes: tuple[torch.dtype, ...] = DTYPES) -> tuple[int, int, int, int]:
    """Check q, k, v and return (B, nh, T, hs); raise a one-line ValueError/TypeError that
    names the argument and the fix. `dtypes`: the floating dtypes the caller accepts."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must have shape [B, n_head, seq_len, head_dim] (4 dims), "
                             f"got shape {tuple(t.shape)}")
        if t.dtype not in dtypes:
            raise TypeError(f"{name}.dtype={t.dtype} is not supported; allowed: "
                            f"{[_dtype_name(d) for d in dtypes]}")
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
