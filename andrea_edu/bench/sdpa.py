"""PyTorch's scaled_dot_product_attention measured live, in the chapter that asks about it.

    sdpa_view_vs_contiguous   "How CUDA stores the heads": SDPA on the transposed view of
                              [B, T, C] and on its .contiguous() copy (is there a hidden copy?)
    sdpa_one_wide_head        "Why twelve heads, not one wider head": the same numbers cut into
                              n_head heads and into one head of d_model (which kernel ran, time)

Each returns the aten ops torch dispatched (andrea_edu.bench.aten, so the backend that really
ran) and the time (andrea_edu.bench.timing.time_fns: turns, median and minimum); the chapter's
figures module draws them.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from andrea_edu.bench.aten import count_aten_ops
from andrea_edu.bench.timing import time_fns


def _shown(t: dict) -> dict:
    """What the chapters show of a timing: median, fastest, the spread and the timing check."""
    return {k: t[k] for k in ("median_ms", "min_ms", "p25_ms", "p75_ms", "iqr_over_median",
                              "repeats", "quality_ok", "quality_reason")}


def sdpa_view_vs_contiguous(B: int = 2, T: int = 256, n_head: int = 12, head_dim: int = 64,
                            repeats: int = 5, device: str = "cpu") -> dict:
    """PyTorch's SDPA (causal) on the transposed view of [B, T, C] and on its .contiguous()
    copy: the aten ops each dispatches (is there a copy?) and the time, the copy included for the
    contiguous path. Returns {path: {"ops", "median_ms", "min_ms"}} and the max difference."""
    C = n_head * head_dim
    g = torch.Generator().manual_seed(0)
    x = [torch.randn(B, T, C, generator=g).to(device) for _ in range(3)]  # (B, T, C)
    q, k, v = (t.view(B, T, n_head, head_dim).transpose(1, 2) for t in x)  # (B, nh, T, hs) strided
    fns = {
        "transposed view": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        ".contiguous() first": lambda: F.scaled_dot_product_attention(
            q.contiguous(), k.contiguous(), v.contiguous(), is_causal=True),
    }
    diff = (fns["transposed view"]() - fns[".contiguous() first"]()).abs().max().item()
    times = time_fns(fns, device=device, repeats=repeats)
    out: dict[str, Any] = {p: {"ops": count_aten_ops(fn), **_shown(times[p])}
                           for p, fn in fns.items()}
    out["max_abs_diff"] = diff
    out["strides"] = tuple(q.stride())
    return out


def sdpa_one_wide_head(B: int = 1, T: int = 256, d_model: int = 768, n_head: int = 12,
                       repeats: int = 5, device: str = "cpu") -> dict:
    """PyTorch's SDPA (causal) on the same q, k, v numbers cut two ways: `n_head` heads of
    d_model / n_head, and one head of d_model. For each: the aten kernel torch dispatched
    (counted at its dispatcher, so the backend that really ran) and the time (turns, median).
    Returns {label: {"head_dim", "ops", "median_ms", "min_ms"}}."""
    g = torch.Generator().manual_seed(0)
    qkv = [torch.randn(B, T, d_model, generator=g).to(device) for _ in range(3)]  # (B, T, C)
    cut = {f"{n_head} heads of {d_model // n_head}": (n_head, d_model // n_head),
           f"1 head of {d_model}": (1, d_model)}
    fns = {}
    for label, (nh, hs) in cut.items():
        q, k, v = (x.view(B, T, nh, hs).transpose(1, 2) for x in qkv)  # (B, nh, T, hs)
        fns[label] = (lambda q=q, k=k, v=v:
                      F.scaled_dot_product_attention(q, k, v, is_causal=True))
    times = time_fns(fns, device=device, repeats=repeats)
    return {label: {"head_dim": cut[label][1], "ops": count_aten_ops(fn), **_shown(times[label])}
            for label, fn in fns.items()}
