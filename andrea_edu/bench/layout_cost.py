"""What a layout costs: the copy `.contiguous()` makes, and q @ k^T on strided vs contiguous heads.

Introduced in the chapter "How CUDA stores the heads" (the source's claim "CUDA matmul operations
run faster on contiguous tensors"). Every timing validates its result first, then interleaves the
variants it compares (each repeat runs them all in turn, so a drift of the machine hits them
alike) and reports the median and the minimum, with the spread and the timing check of
bench.timing (`timings`; MatmulTiming.check says whether its ratio may be stated). CUDA events
on a GPU, perf_counter on one thread on a CPU.
Names: B batch, T seq_len, C d_model, nh n_head, hs head_dim.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from andrea_edu.layout import check_shape
from andrea_edu.projections import split_heads


def _timed(fns: dict, repeats: int, warmup: int, device: str) -> dict:
    """{name: the time_fns timing} of each fn() (the fns take turns in every repeat, so that a
    drift of the machine hits them all alike; CUDA events on a GPU; spread and check included)."""
    from andrea_edu.bench.timing import time_fns

    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an int >= 1, got {repeats!r}")
    return time_fns(fns, device, repeats=repeats, warmup=warmup)


def _median_seconds(timed: dict) -> dict:
    """{name: (median, min) seconds} of _timed's timings."""
    return {name: (t["median_ms"] / 1e3, t["min_ms"] / 1e3) for name, t in timed.items()}


COPY_OPS = ("clone", "copy_", "contiguous")  # aten ops that write a tensor to new memory


def count_copies(fn) -> int:
    """How many tensor copies (COPY_OPS) fn() makes, including those inside torch's own ops."""
    from andrea_edu.bench.aten import count_aten_ops

    ops = count_aten_ops(fn)
    return sum(ops.get(name, 0) for name in COPY_OPS)


@dataclass(frozen=True)
class CopyCost:
    """What `.contiguous()` on the transposed view costs."""

    shape: tuple  # (B, T, nh, hs)
    dtype: str
    device: str
    bytes_copied: int  # the new buffer: B*T*C elements
    bytes_moved: int  # read + write
    median_s: float
    min_s: float
    repeats: int
    timing: dict = field(default_factory=dict)  # bench.time_fns's: spread, timing check

    @property
    def gb_per_s(self) -> float:
        return self.bytes_moved / self.median_s / 1e9


def contiguous_copy_cost(B, T, n_head, head_dim, dtype=torch.float32, device="cpu",
                         repeats=7, warmup=2) -> CopyCost:
    """Measure `split_heads(x, nh).contiguous()` for x [B, T, C]: median of `repeats` runs."""
    B, T, nh, hs = check_shape((B, T, n_head, head_dim))
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    x = torch.randn(B, T, nh * hs, device=device).to(dtype)  # (B, T, C)
    xt = split_heads(x, nh)  # (B, nh, T, hs), a view
    y = xt.contiguous()
    if y.data_ptr() == x.data_ptr() or not torch.equal(y, xt):
        raise RuntimeError("contiguous() did not produce an equal copy; nothing to time")
    timed = _timed({"copy": xt.contiguous}, repeats, warmup, device)
    med, mn = _median_seconds(timed)["copy"]
    nbytes = x.numel() * x.element_size()
    return CopyCost((B, T, nh, hs), str(dtype).replace("torch.", ""), device, nbytes,
                    2 * nbytes, med, mn, timed["copy"]["repeats"], timed["copy"])


@dataclass(frozen=True)
class MatmulTiming:
    """Q_h K_h^T for every head: on the transposed view vs on contiguous copies."""

    shape: tuple  # (B, T, nh, hs)
    dtype: str
    device: str
    strided_s: float  # median: q @ k^T with q, k the transposed views
    contiguous_s: float  # median: the same on contiguous copies made beforehand
    copy_then_matmul_s: float  # median: .contiguous() of q and k, then the matmul
    min_s: dict  # {"strided", "contiguous", "copy_then_matmul"}: fastest run of each
    copies: dict  # {"strided", "contiguous"}: tensor copies torch's matmul made (count_copies)
    max_abs_diff: float  # strided vs contiguous result (validated before timing)
    repeats: int
    timings: dict = field(default_factory=dict)  # {"strided", "contiguous", "copy"}: time_fns's

    @property
    def ratio(self) -> float:
        """strided / contiguous: above 1 means the contiguous matmul is faster."""
        return self.strided_s / self.contiguous_s

    @property
    def check(self) -> tuple[bool, str]:
        """Whether `ratio` may be stated: both timings pass bench.timing.timing_ok."""
        from andrea_edu.bench.timing import checked_ratio
        r, why = checked_ratio(self.timings.get("strided"), self.timings.get("contiguous"))
        return r is not None, why


def matmul_strided_vs_contiguous(B, T, n_head, head_dim, dtype=torch.float32, device="cpu",
                                 repeats=7, warmup=2) -> MatmulTiming:
    """Time q @ k^T per head on the transposed view and on contiguous copies (validated first)."""
    B, T, nh, hs = check_shape((B, T, n_head, head_dim))
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    g = torch.Generator(device="cpu").manual_seed(0)
    q = split_heads(torch.randn(B, T, nh * hs, generator=g).to(device, dtype), nh)  # (B, nh, T, hs)
    k = split_heads(torch.randn(B, T, nh * hs, generator=g).to(device, dtype), nh)  # (B, nh, T, hs)
    qc, kc = q.contiguous(), k.contiguous()
    s1 = q @ k.transpose(-2, -1)  # (B, nh, T, T)
    s2 = qc @ kc.transpose(-2, -1)  # (B, nh, T, T)
    diff = float((s1.float() - s2.float()).abs().max())
    tol = 1e-3 * hs ** 0.5 if dtype == torch.float32 else 5e-2 * hs ** 0.5
    if diff > tol:
        raise RuntimeError(f"strided and contiguous q @ k^T differ by {diff:g} > {tol:g}")
    timed = _timed({"strided": lambda: q @ k.transpose(-2, -1),
                    "contiguous": lambda: qc @ kc.transpose(-2, -1),
                    "copy": lambda: q.contiguous() @ k.contiguous().transpose(-2, -1)},
                   repeats, warmup, device)
    t = _median_seconds(timed)
    return MatmulTiming((B, T, nh, hs), str(dtype).replace("torch.", ""), device,
                        t["strided"][0], t["contiguous"][0], t["copy"][0],
                        {"strided": t["strided"][1], "contiguous": t["contiguous"][1],
                         "copy_then_matmul": t["copy"][1]},
                        {"strided": count_copies(lambda: q @ k.transpose(-2, -1)),
                         "contiguous": count_copies(lambda: qc @ kc.transpose(-2, -1))},
                        diff, timed["strided"]["repeats"], timed)


# ---------------------------------------------------------------- heads straight from the matmul
PROJECTION_VARIANTS = ("matmul, split, copy", "einsum", "per-head matmul")


@dataclass(frozen=True)
class ProjectionTiming:
    """Q as contiguous [B, nh, T, hs] heads from X [B, T, C], several ways (projection_to_heads)."""

    shape: tuple  # (B, T, nh, hs)
    dtype: str
    device: str
    median_s: dict  # {variant: median seconds of the whole path to contiguous heads}
    min_s: dict  # {variant: fastest run}
    contiguous: dict  # {variant: whether the variant's own output was already contiguous}
    copies: dict  # {variant: tensor copies made on the way, .contiguous() included}
    max_abs_diff: float  # largest difference from the first variant (validated before timing)
    repeats: int
    timings: dict = field(default_factory=dict)  # {variant: bench.time_fns's timing}


def projection_to_heads(B, T, n_head, head_dim, variants=PROJECTION_VARIANTS,
                        dtype=torch.float32, device="cpu", repeats=5, warmup=1) -> ProjectionTiming:
    """Time ways of getting contiguous [B, nh, T, hs] heads out of the projection X @ W_Q:

    "matmul, split, copy"  X @ W_Q [C, C], split_heads (a view), .contiguous() (a copy)
    "einsum"               torch.einsum("btc,chd->bhtd", X, W_Q.view(C, nh, hs)), then
                           .contiguous(), which copies only if einsum's output is not contiguous
    "per-head matmul"      the weights stored per head, [nh, C, hs]: X[:, None] @ W, one
                           batched matmul that writes [B, nh, T, hs] in order (for B > 1
                           torch first copies X once per head to broadcast it: in `copies`)
    All give the same numbers (validated); each is timed as a whole, the variants in turns.
    """
    B, T, nh, hs = check_shape((B, T, n_head, head_dim))
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    variants = tuple(variants) if isinstance(variants, (tuple, list)) else (variants,)
    bad = [v for v in variants if v not in PROJECTION_VARIANTS]
    if bad or not variants:
        raise ValueError(f"variants={variants!r}: allowed values are "
                         f"{', '.join(map(repr, PROJECTION_VARIANTS))}")
    C = nh * hs
    g = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(B, T, C, generator=g).to(device, dtype)  # (B, T, C)
    w = (torch.randn(C, C, generator=g) / C ** 0.5).to(device, dtype)  # (C, C): W_Q
    w_heads = w.view(C, nh, hs).permute(1, 0, 2).contiguous()  # (nh, C, hs): stored per head
    raw = {"matmul, split, copy": lambda: split_heads(x @ w, nh),  # (B, nh, T, hs) view
           "einsum": lambda: torch.einsum("btc,chd->bhtd", x, w.view(C, nh, hs)),
           "per-head matmul": lambda: x.unsqueeze(1) @ w_heads}  # (B,1,T,C) @ (nh,C,hs)
    fns = {v: (lambda f=raw[v]: f().contiguous()) for v in variants}
    outs = {v: fns[v]() for v in variants}
    first = outs[variants[0]]
    diff = max(float((o.float() - first.float()).abs().max()) for o in outs.values())
    tol = 1e-4 if dtype == torch.float32 else 5e-2
    if diff > tol or any(o.shape != (B, nh, T, hs) or not o.is_contiguous() for o in outs.values()):
        raise RuntimeError(f"the variants disagree (max abs diff {diff:g} > {tol:g}): not timed")
    timed = _timed(fns, repeats, warmup, device)
    t = _median_seconds(timed)
    return ProjectionTiming((B, T, nh, hs), str(dtype).replace("torch.", ""), device,
                            {v: t[v][0] for v in variants}, {v: t[v][1] for v in variants},
                            {v: raw[v]().is_contiguous() for v in variants},
                            {v: count_copies(fns[v]) for v in variants}, diff,
                            timed[variants[0]]["repeats"], timed)
