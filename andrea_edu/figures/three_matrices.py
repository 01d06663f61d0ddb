"""Figures of the chapter "Three matrices per head, or one big matrix".

The chapter's live measurement (``projection_sweep``: BLAS calls, validation, then time per way)
is ``andrea_edu.bench.matmuls``; the committed, provenance-carrying version of the same
comparison is ``python -m andrea_lab.bench projections``. This module draws and formats.
- ``fig_fused_matrix``: W_Q with the column blocks W_Q^h coloured, beside the per-head view.
- ``fig_projection_timings``: BLAS calls and time per way for one (n_head, head_dim).
- ``tensor_core_claim``: the GPU claim's facts and verdict; ``committed_projection_rows``: the committed GPU
  measurement's rows, when one exists (the chapter tabulates them).
Names: B batch, T seq_len, C d_model, nh n_head, hs head_dim.
"""
from __future__ import annotations


import torch

from andrea_edu import projections as P
from andrea_edu.bench.matmuls import projection_roofline
from andrea_edu.kernels import gpus
from andrea_edu.figures.viz import head_colors

WAYS = ("per-head", "fused", "c_attn")


# ------------------------------------------------------------------ figures
def _tint_column_blocks(ax, n_head: int, C: int, alpha: float = 0.38):
    """Tint column block h (head h's columns) of a [C, C] image in head h's colour."""
    from matplotlib.patches import Rectangle

    hs = C // n_head
    for h, color in enumerate(head_colors(n_head)):
        ax.add_patch(Rectangle((h * hs - 0.5, -0.5), hs, C, facecolor=color, alpha=alpha,
                               edgecolor=color, lw=0.8))


def fig_fused_matrix(W: torch.Tensor, n_head: int, name: str = "W_Q"):
    """Left: fused W [C, C] with head h's column block tinted in its colour. Right: the same
    numbers as n_head separate [C, hs] matrices (``fused_to_per_head``), drawn apart."""
    import matplotlib.pyplot as plt

    C = W.shape[0]
    hs = C // n_head
    Wh = P.fused_to_per_head(W, n_head)  # (nh, C, hs)
    lim = float(W.abs().max())
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.6), gridspec_kw={"width_ratios": [1, 1.5]})
    a.imshow(W.float().cpu().numpy(), cmap="gray", vmin=-lim, vmax=lim, interpolation="nearest")
    _tint_column_blocks(a, n_head, C)
    step = max(1, n_head // 6)
    a.set_xticks([h * hs + hs / 2 for h in range(0, n_head, step)])
    a.set_xticklabels([f"h{h}" for h in range(0, n_head, step)])
    a.set_ylabel(f"input feature (row 0:{C})")
    a.set_title(f"fused {name} [{C} x {C}]\ncolumn block h = {name}^h", fontsize=10)
    gap = max(1, hs // 4)
    for h, color in enumerate(head_colors(n_head)):
        x0 = h * (hs + gap)
        b.imshow(Wh[h].float().cpu().numpy(), cmap="gray", vmin=-lim, vmax=lim,
                 extent=(x0, x0 + hs, C, 0), interpolation="nearest")
        b.add_patch(plt.Rectangle((x0, 0), hs, C, fill=False, edgecolor=color, lw=2.5))
    b.set_xlim(-gap, n_head * (hs + gap))
    b.set_ylim(C, 0)
    b.set_aspect("auto")
    b.set_xticks([h * (hs + gap) + hs / 2 for h in range(0, n_head, step)])
    b.set_xticklabels([f"{name}^{h}" for h in range(0, n_head, step)], fontsize=8)
    b.set_title(f"per-head view: {n_head} matrices [{C} x {hs}]", fontsize=10)
    fig.suptitle(f"One {name}, two views (d_model={C}, n_head={n_head}, head_dim={hs})")
    fig.tight_layout()
    return fig


def fig_projection_timings(sweep: dict, n_head: int, head_dim: int, device_label: str,
                           shape_label: str):
    """Left: BLAS calls per way at this n_head. Right: median time per way over every n_head of
    the sweep, this one marked."""
    import matplotlib.pyplot as plt

    colors = {"per-head": "#d62728", "fused": "#1f77b4", "c_attn": "#2ca02c"}
    res = sweep[n_head]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    calls = [res[w]["blas_calls"] for w in WAYS]
    bars = a.bar(WAYS, calls, color=[colors[w] for w in WAYS])
    a.bar_label(bars, labels=[str(c) for c in calls])
    a.set_yscale("log")
    a.set_ylim(0.5, max(3 * max(calls), 10))
    a.set_ylabel("matmul (BLAS) calls for Q, K, V")
    a.set_title(f"n_head={n_head}, head_dim={head_dim}: calls counted", fontsize=10)
    nhs = sorted(sweep)
    for w in WAYS:
        b.plot(nhs, [sweep[n][w]["min_ms"] for n in nhs], "o-", color=colors[w], label=w, ms=4)
        b.plot([n_head], [res[w]["min_ms"]], "o", color=colors[w], ms=10, mfc="none", mew=2)
    b.axvline(n_head, color="#999999", lw=0.8, ls="--")
    b.set_xscale("log", base=2)
    b.set_xticks(nhs)
    b.set_xticklabels([str(n) for n in nhs], fontsize=7)
    b.set_xlabel("n_head (head_dim = d_model / n_head)")
    b.set_ylabel("fastest time (ms)")
    b.set_ylim(bottom=0)
    b.legend(fontsize=8)
    from andrea_edu.bench.timing import checked_ratio
    ratio, why = checked_ratio(res["per-head"], res["fused"], key="min_ms")
    b.set_title(f"per-head / fused = {ratio:.2f}x at n_head={n_head}" if ratio is not None else
                f"n_head={n_head}: timing check failed", fontsize=10)
    fig.suptitle(f"Q, K, V projections three ways, {shape_label}, measured on {device_label}",
                 fontsize=10)
    fig.tight_layout()
    return fig


def committed_projection_rows(results: dict | None) -> list[dict]:
    """Rows of a committed ``bench projections`` results object (``bench_results.load_results``),
    status "ok" only: {n_head, way, blas_calls, median_ms, tflops, ratio_to_fused}."""
    if not results:
        return []
    rows = []
    for r in results.get("records", []):
        if r.get("status") != "ok":
            continue
        rows.append({"n_head": r["params"].get("n_head"), "way": r["backend"],
                     "blas_calls": r.get("blas_calls"), "median_ms": r.get("median_ms"),
                     "tflops": r.get("tflops"), "ratio_to_fused": r.get("time_ratio_to_fused"),
                     **{k: r[k] for k in ("p25_ms", "p75_ms", "quality_ok", "quality_reason")
                        if k in r}})
    return sorted(rows, key=lambda x: (x["n_head"] or 0, x["way"]))


# ---------------------------------------------------------------- the tensor-core claim
def tensor_core_claim(gpu_results, n_head: int, rows: int) -> tuple[dict, str]:
    """(facts, verdict) for "tensor cores reach peak throughput on matmuls of this size;
    per-head matmuls would underuse the hardware". facts: the calculation from a published peak
    (bench.matmuls.projection_roofline, a calculation, not a measurement) at B·T = `rows`, and,
    from a committed GPU file, its device, the per-head / fused ratio at `n_head` and the fused
    projection's share of the published dense bf16 peak (None where the book cites no peak).
    Without a GPU file, or when its per-head or fused timing fails bench.timing.timing_ok, the
    ratio is None, "why" says which, and the verdict is "not yet measured"; with one, the claim
    does not hold at a ratio <= 1.1, holds at a share >= 50 %, else holds with a caveat."""
    from andrea_edu.bench.timing import checked_ratio
    from andrea_edu.figures.verdicts import NOT_MEASURED

    # for the measured GPU where the book cites its peak (matched by its device record), else
    # the fallback that calc["gpu"] names
    measured_key = gpus.by_device(gpu_results) if gpu_results else None
    calc = projection_roofline(rows, gpu=measured_key if gpus.published_peak(gpu_results)
                               else None)
    facts: dict = {
        "peak of": f"{calc['gpu']} ({calc['source']})", "B·T": rows,
        "µs at peak": round(calc["compute_s"] * 1e6, 2),
        "µs moving bytes": round(calc["memory_s"] * 1e6, 2),
        "compute-bound from B·T": calc["compute_bound_from_rows"],
        "GPU file": None, "per-head / fused": None, "fused TFLOP/s": None,
        "share of peak": None, "why": "no GPU file committed"}
    by = {(r["n_head"], r["way"]): r for r in committed_projection_rows(gpu_results)}
    per, fused = by.get((n_head, "per-head")), by.get((n_head, "fused"))
    if not (per and fused and per["median_ms"] and fused["median_ms"]):
        return facts, NOT_MEASURED
    facts["GPU file"] = gpu_results["provenance"]["device"]
    ratio, why = checked_ratio(per, fused)
    if ratio is None:
        facts["why"] = why
        return facts, NOT_MEASURED
    spec = gpus.published_peak(gpu_results)  # the device's whole name (and SM count) -> its peak
    peak = spec["bf16_tflops"] if spec else None  # dense bf16, TFLOP/s
    share = fused["tflops"] / peak if peak and fused.get("tflops") else None
    facts.update({"per-head / fused": round(ratio, 2), "fused TFLOP/s": fused.get("tflops"),
                  "share of peak": None if share is None else round(share, 2),
                  "why": "" if share is not None else "no published peak"})
    if ratio <= 1.1:
        return facts, "does not hold"
    return facts, ("holds" if share is not None and share >= 0.5 else "holds with a caveat")
