"""Matmul-shaped benchmarks: Q/K/V projections three ways, and strided vs contiguous heads.

Introduced for the chapters "Three matrices per head, or one big matrix" (`projections`: per-head
36 matmuls vs fused 3 vs GPT-2's single c_attn, and how many BLAS calls each really makes) and
"How CUDA stores the heads" (`layout`: q @ k^T on the transposed view vs on a contiguous copy,
what .contiguous() costs, SDPA on both). Run through andrea_edu.bench.cases.run_suite; the
runner validates before it times. Names: B batch, T seq_len, C d_model, nh n_head, hs head_dim.
"""
from __future__ import annotations

import math
from collections import Counter

import torch

from andrea_edu.bench import timing as bench
from andrea_edu.attention import reference_attention
from andrea_edu.bench.runner import (DTYPE, N_HEAD, _params, _progress, _Runner,
                                     _shape_table)


def count_aten_ops(fn) -> dict:
    """{aten op name: calls} that fn() dispatches (e.g. {'mm': 36, ...}): BLAS calls, copies."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops: Counter[str] = Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops[func.overloadpacket.__name__] += 1
            return func(*args, **(kwargs or {}))

    with _Count() as c:
        fn()
    return dict(sorted(c.ops.items()))


BLAS_OPS = ("mm", "addmm", "bmm", "baddbmm")


def projections_suite(r: _Runner, fast: bool, progress: bool):
    from andrea_edu import projections as P

    shape = "ANDREA-120M"
    s = _shape_table(r.device, fast)[shape]
    B, T, C = s["B"], s["T"], s["d_model"]
    n_heads = (12,) if fast else (1, 4, 12, 48)
    gen = torch.Generator(device="cpu").manual_seed(1)
    with _progress(4 * len(n_heads), progress, "projections") as bar:
        for nh in n_heads:
            X = torch.randn(B, T, C, generator=gen).to(r.device, DTYPE)  # (B, T, C)
            Ws = [(torch.randn(C, C, generator=gen) / math.sqrt(C)).to(r.device, DTYPE)
                  for _ in range(3)]  # W_Q, W_K, W_V: 3 x (C, C)
            heads = [P.fused_to_per_head(W, nh) for W in Ws]  # 3 x (nh, C, hs)
            c_attn = P.fused_to_c_attn(*Ws)  # (C, 3C)
            refs = P.project_fused(X.float(), Ws[0].float(), Ws[1].float(), Ws[2].float(),
                                   n_head=nh)  # fp32
            variants = {
                "per-head": lambda: P.project_per_head(X, *heads),
                "per-head-matmuls": lambda: tuple([X @ Wh[h] for h in range(nh)] for Wh in heads),
                "fused": lambda: P.project_fused(X, Ws[0], Ws[1], Ws[2], n_head=nh),
                "c-attn": lambda: P.project_c_attn(X, c_attn, n_head=nh),
            }
            params = _params(shape=shape, B=B, T=T, d_model=C, n_head=nh, head_dim=C // nh,
                             dtype_t=DTYPE)
            recs = {}
            for name, fn in variants.items():
                ops = count_aten_ops(fn)
                ref = torch.cat([x.flatten() for x in refs]) if name != "per-head-matmuls" else \
                    torch.cat([x.transpose(0, 1).flatten() for x in refs])
                recs[name] = r.check(
                    f"{shape}/n_head={nh}", name, params,
                    lambda fn=fn: (_flat(fn()), {}), ref, bench.matmul_flops(B * T, 3 * C, C),
                    extra={"blas_calls": sum(ops.get(o, 0) for o in BLAS_OPS), "aten_ops": ops})
                bar.update(1)
            r.time_queued()
            base = recs["fused"].get("median_ms")
            for rec in recs.values():
                if rec["status"] == "ok" and base:
                    rec["time_ratio_to_fused"] = rec["median_ms"] / base


def _flat(out):
    """Projection outputs of any structure -> one flat tensor, in (q, k, v) x head order."""
    parts = []
    for x in out:
        if isinstance(x, (list, tuple)):  # per-head matmuls: nh x (B, T, hs)
            parts.append(torch.stack(list(x), dim=0).flatten())  # (nh*B*T*hs,)
        else:
            parts.append(x.flatten())  # (B, nh, T, hs) -> (B*nh*T*hs,)
    return torch.cat(parts)


def layout_suite(r: _Runner, fast: bool, progress: bool):
    shape = "ANDREA-120M"
    s = _shape_table(r.device, fast)[shape]
    # B >= 2: with B = 1 the (B, nh) axes of the transposed view fold into one batch stride and
    # torch's batched matmul needs no copy; ANDREA trains with B = 8.
    B, T, C, nh = max(2, s["B"]), s["T"], s["d_model"], N_HEAD
    hs = C // nh
    gen = torch.Generator(device="cpu").manual_seed(2)
    X = torch.randn(B, T, C, generator=gen).to(r.device, DTYPE)  # (B, T, C)
    W_Q, W_K = ((torch.randn(C, C, generator=gen) / math.sqrt(C)).to(r.device, DTYPE)
                for _ in range(2))
    q_view = (X @ W_Q).view(B, T, nh, hs).transpose(1, 2)  # (B, nh, T, hs), strided view
    k_view = (X @ W_K).view(B, T, nh, hs).transpose(1, 2)  # (B, nh, T, hs), strided view
    q_c, k_c = q_view.contiguous(), k_view.contiguous()  # (B, nh, T, hs), contiguous copies
    scores_ref = q_c.float() @ k_c.float().transpose(-2, -1)  # (B, nh, T, T)
    attn_ref = reference_attention(q_c, k_c, k_c, True)  # (B, nh, T, hs)
    elem = q_view.element_size()
    params = _params(shape=shape, B=B, T=T, d_model=C, n_head=nh, head_dim=hs, dtype_t=DTYPE,
                     q_strides=list(q_view.stride()), contiguous_strides=list(q_c.stride()))
    score_flops = 2.0 * B * nh * T * T * hs
    cases = [
        ("scores-contiguous", lambda: q_c @ k_c.transpose(-2, -1), scores_ref, score_flops),
        ("scores-strided", lambda: q_view @ k_view.transpose(-2, -1), scores_ref, score_flops),
        ("copy-contiguous", lambda: q_view.contiguous(), q_c, None),
        ("sdpa-contiguous", lambda: torch.nn.functional.scaled_dot_product_attention(
            q_c, k_c, k_c, is_causal=True), attn_ref, bench.attention_flops(B, nh, T, hs, True)),
        ("sdpa-strided", lambda: torch.nn.functional.scaled_dot_product_attention(
            q_view, k_view, k_view, is_causal=True), attn_ref,
         bench.attention_flops(B, nh, T, hs, True)),
    ]
    with _progress(len(cases), progress, "layout") as bar:
        for name, fn, ref, flops in cases:
            r.check(f"{shape}/n_head={nh}", name, params, lambda fn=fn: (fn(), {}), ref, flops,
                    extra={"aten_ops": count_aten_ops(fn)})
            bar.update(1)
        r.time_queued()
    by = {x["backend"]: x for x in r.records}
    if by["copy-contiguous"]["status"] == "ok":
        rec = by["copy-contiguous"]
        rec["bytes_moved"] = 2 * q_view.numel() * elem
        rec["gb_per_s"] = rec["bytes_moved"] / (rec["median_ms"] * 1e-3) / 1e9
    base = by["scores-contiguous"].get("median_ms")
    for rec in r.records:
        if rec["status"] == "ok" and base and rec["backend"].startswith("scores"):
            rec["time_ratio_to_contiguous"] = rec["median_ms"] / base
